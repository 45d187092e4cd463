#include "backends/tpu_ici/ici_hooks.h"

#include <cstring>

#include "algorithms/reduce_kernels.h"
#include "algorithms/scratch.h"
#include "backends/tpu_ici/plan_executor.h"
#include "backends/tpu_ici/torus_plans.h"
#include "core/check.h"

namespace c10d::inline v1::tpu_ici {
namespace {

// AVG and PREMUL_SUM accumulate as plain sums (reduce_kernels.h): scale this rank's input once
// before, divide once after.
Reduction accumulation_of(const Reduction& r) {
  Reduction a = r;
  if (r.op == ReduceOp::kPremulSum || r.op == ReduceOp::kAvg) a.op = ReduceOp::kSum;
  return a;
}

}  // namespace

std::shared_ptr<Work> IciHooks::make_work(std::string op, std::uint64_t sequence) {
  return std::make_shared<IciWork>(std::move(op), sequence);
}

void IciHooks::op_started(Work& work) { static_cast<IciWork&>(work).start = fabric_->clock(); }

void IciHooks::op_finished(Work& work) {
  auto& w = static_cast<IciWork&>(work);
  w.simulated.store(fabric_->clock() - w.start, std::memory_order_release);
}

std::shared_ptr<backends::BackendHooks> IciHooks::for_subgroup(const std::vector<int>&) {
  return std::make_shared<IciHooks>(fabric_, false);
}

bool IciHooks::all_reduce(const algorithms::Context& ctx, DType dtype, const Reduction& reduction,
                          void* data, std::int64_t count) {
  if (!torus_algorithms_) return false;
  algorithms::validate_reduction(dtype, reduction.op);
  if (ctx.size() == 1 || count == 0) {
    if (reduction.op == ReduceOp::kPremulSum) {
      algorithms::premul_in_place(dtype, reduction.premul_factor, data, count);
    }
    return true;
  }
  if (reduction.op == ReduceOp::kPremulSum) {
    algorithms::premul_in_place(dtype, reduction.premul_factor, data, count);
  }
  const std::size_t elem = element_size(dtype);
  const Plan plan = multi_axis_all_reduce(fabric_->torus(), ctx.rank(), count, elem);
  run_plan(ctx, plan, {static_cast<std::byte*>(data), static_cast<std::size_t>(count) * elem}, {},
           dtype, accumulation_of(reduction));
  if (reduction.op == ReduceOp::kAvg) algorithms::finish_average(dtype, data, count, ctx.size());
  return true;
}

bool IciHooks::broadcast(const algorithms::Context& ctx, std::span<std::byte> data, int root) {
  if (!torus_algorithms_) return false;
  const Plan plan =
      torus_broadcast(fabric_->torus(), ctx.rank(), root, static_cast<std::int64_t>(data.size()));
  run_plan(ctx, plan, data, {}, DType::kUInt8, {});
  return true;
}

bool IciHooks::all_gather(const algorithms::Context& ctx, std::span<const std::byte> input,
                          std::span<std::byte> output) {
  if (!torus_algorithms_) return false;
  const std::size_t block = input.size();
  const auto n = static_cast<std::size_t>(ctx.size());
  C10D_CHECK(output.size() == n * block,
             "all_gather on rank {}: {} blocks of {} bytes need a {}-byte output, got {} bytes",
             ctx.rank(), n, block, n * block, output.size());
  std::byte* own = output.data() + static_cast<std::size_t>(ctx.rank()) * block;
  if (block > 0 && own != input.data()) std::memmove(own, input.data(), block);
  const Plan plan =
      torus_all_gather(fabric_->torus(), ctx.rank(), static_cast<std::int64_t>(block));
  run_plan(ctx, plan, output, {}, DType::kUInt8, {});
  return true;
}

bool IciHooks::reduce_scatter(const algorithms::Context& ctx, DType dtype,
                              const Reduction& reduction, std::span<const void* const> inputs,
                              void* output, std::int64_t count) {
  if (!torus_algorithms_) return false;
  C10D_CHECK(count >= 0, "reduce_scatter on rank {}: count {} is negative", ctx.rank(), count);
  algorithms::validate_reduction(dtype, reduction.op);
  const int n = ctx.size();
  const std::size_t elem = element_size(dtype);
  const std::size_t block = static_cast<std::size_t>(count) * elem;
  // The plan reduces in place and leaves partial sums elsewhere: it runs on a copy.
  const algorithms::Scratch copy(algorithms::ScratchSlot::kInputCopy,
                                 block * static_cast<std::size_t>(n));
  for (int r = 0; r < n && block > 0; ++r) {
    std::memcpy(copy.data() + static_cast<std::size_t>(r) * block,
                inputs[static_cast<std::size_t>(r)], block);
  }
  if (reduction.op == ReduceOp::kPremulSum) {
    algorithms::premul_in_place(dtype, reduction.premul_factor, copy.data(), count * n);
  }
  const Plan plan = torus_reduce_scatter(fabric_->torus(), ctx.rank(), count, elem);
  run_plan(ctx, plan, copy.span(), {}, dtype, accumulation_of(reduction));
  if (block > 0) {
    std::memcpy(output, copy.data() + static_cast<std::size_t>(ctx.rank()) * block, block);
  }
  if (reduction.op == ReduceOp::kAvg) algorithms::finish_average(dtype, output, count, n);
  return true;
}

bool IciHooks::all_to_allv(const algorithms::Context& ctx, std::span<const std::byte> input,
                           std::span<const std::int64_t> send_counts,
                           std::span<const std::int64_t> send_offsets, std::span<std::byte> output,
                           std::span<const std::int64_t> recv_counts,
                           std::span<const std::int64_t> recv_offsets) {
  if (!torus_algorithms_) return false;
  const int n = ctx.size();
  const auto me = static_cast<std::size_t>(ctx.rank());
  C10D_CHECK(static_cast<int>(send_counts.size()) == n && static_cast<int>(recv_counts.size()) == n,
             "all_to_allv on rank {}: {} send and {} receive counts for {} ranks", ctx.rank(),
             send_counts.size(), recv_counts.size(), n);
  C10D_CHECK(send_counts[me] == recv_counts[me],
             "all_to_allv on rank {}: sends itself {} bytes but expects to receive {}", ctx.rank(),
             send_counts[me], recv_counts[me]);
  const Plan plan =
      routed_all_to_all(ctx.rank(), n, send_counts, send_offsets, recv_counts, recv_offsets);
  if (send_counts[me] > 0) {
    std::memcpy(output.data() + recv_offsets[me], input.data() + send_offsets[me],
                static_cast<std::size_t>(send_counts[me]));
  }
  run_plan(ctx, plan, output, input, DType::kUInt8, {});
  return true;
}

}  // namespace c10d::inline v1::tpu_ici
