#include "algorithms/reduce_scatter.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "algorithms/reduce_kernels.h"
#include "algorithms/scratch.h"
#include "core/check.h"

namespace c10d::algorithms {

void reduce_scatter(const Context& ctx, DType dtype, const Reduction& reduction, const void* input,
                    void* output, std::int64_t count, const RingOptions& options) {
  // Both checks fail on every rank alike, before any message.
  C10D_CHECK(count >= 0, "reduce_scatter on rank {}: count {} is negative", ctx.rank(), count);
  validate_reduction(dtype, reduction.op);
  const int n = ctx.size();
  const std::size_t elem = element_size(dtype);
  const std::size_t block_bytes = static_cast<std::size_t>(count) * elem;
  const std::int64_t total = count * n;

  // The ring reads the input and writes partial sums to scratch and the result to the output,
  // unless PREMUL_SUM must scale this rank's input first or the output overlaps the input
  // anywhere but at this rank's own block (where each element is read just before it is
  // written). AVG accumulates as a plain sum and is divided once at the end.
  const auto* in_begin = static_cast<const std::byte*>(input);
  const auto* in_end = in_begin + block_bytes * static_cast<std::size_t>(n);
  const auto* out_begin = static_cast<const std::byte*>(output);
  const bool disjoint = out_begin + block_bytes <= in_begin || out_begin >= in_end;
  const bool own_block = out_begin == in_begin + static_cast<std::size_t>(ctx.rank()) * block_bytes;
  if (reduction.op != ReduceOp::kPremulSum && (disjoint || own_block)) {
    Reduction accumulate = reduction;
    if (reduction.op == ReduceOp::kAvg) accumulate.op = ReduceOp::kSum;
    ring_reduce_scatter_to(ctx, dtype, accumulate, input, output, total, options);
    if (reduction.op == ReduceOp::kAvg) finish_average(dtype, output, count, n);
    return;
  }

  // The ring reduces in place and leaves partial sums in the other blocks; the caller's input
  // must stay as it was, so the ring runs on a copy.
  const Scratch scratch(ScratchSlot::kInputCopy, block_bytes * static_cast<std::size_t>(n));
  if (!scratch.span().empty()) std::memcpy(scratch.data(), input, scratch.span().size());

  // AVG and PREMUL_SUM accumulate as plain sums (reduce_kernels.h): scale this rank's own
  // contribution once before, divide the result once after.
  Reduction accumulate = reduction;
  if (reduction.op == ReduceOp::kPremulSum) {
    premul_in_place(dtype, reduction.premul_factor, scratch.data(), total);
    accumulate.op = ReduceOp::kSum;
  } else if (reduction.op == ReduceOp::kAvg) {
    accumulate.op = ReduceOp::kSum;
  }
  ring_reduce_scatter(ctx, dtype, accumulate, scratch.data(), total, options);

  if (block_bytes > 0) {
    std::memcpy(output, scratch.data() + static_cast<std::size_t>(ctx.rank()) * block_bytes,
                block_bytes);
  }
  if (reduction.op == ReduceOp::kAvg) finish_average(dtype, output, count, n);
}

}  // namespace c10d::algorithms
