#include "algorithms/reduce_scatter.h"

#include <cstddef>
#include <cstring>
#include <vector>

#include "algorithms/reduce_kernels.h"
#include "algorithms/scratch.h"
#include "core/check.h"

namespace c10d::inline v1::algorithms {

namespace {

bool overlaps(const void* a, const void* b, std::size_t bytes) {
  const auto* x = static_cast<const std::byte*>(a);
  const auto* y = static_cast<const std::byte*>(b);
  return bytes > 0 && x < y + bytes && y < x + bytes;
}

}  // namespace

void reduce_scatter_blocks(const Context& ctx, DType dtype, const Reduction& reduction,
                           std::span<const void* const> inputs, void* output, std::int64_t count,
                           const RingOptions& options) {
  // The checks fail on every rank alike, before any message.
  C10D_CHECK(count >= 0, "reduce_scatter on rank {}: count {} is negative", ctx.rank(), count);
  validate_reduction(dtype, reduction.op);
  const int n = ctx.size();
  C10D_CHECK(static_cast<int>(inputs.size()) == n,
             "reduce_scatter on rank {}: {} input blocks for a group of {} ranks", ctx.rank(),
             inputs.size(), n);
  const std::size_t block_bytes = static_cast<std::size_t>(count) * element_size(dtype);

  // The ring reads the inputs and writes partial sums to scratch and the result to the output,
  // unless PREMUL_SUM must scale this rank's blocks first or the output overlaps an input
  // other than as this rank's own block (where each element is read just before it is
  // written). AVG accumulates as a plain sum and is divided once at the end.
  bool direct = reduction.op != ReduceOp::kPremulSum;
  for (int r = 0; r < n && direct; ++r) {
    const void* in = inputs[static_cast<std::size_t>(r)];
    direct = !overlaps(in, output, block_bytes) || (r == ctx.rank() && in == output);
  }
  Reduction accumulate = reduction;
  if (reduction.op == ReduceOp::kAvg || reduction.op == ReduceOp::kPremulSum) {
    accumulate.op = ReduceOp::kSum;
  }
  if (direct) {
    ring_reduce_scatter_to(ctx, dtype, accumulate, inputs, output, count, options);
  } else {
    // The ring reduces in place and leaves partial sums in the other blocks; the caller's
    // inputs must stay as they were, so the ring runs on a copy of them.
    const Scratch scratch(ScratchSlot::kInputCopy, block_bytes * static_cast<std::size_t>(n));
    for (int r = 0; r < n && block_bytes > 0; ++r) {
      std::memcpy(scratch.data() + static_cast<std::size_t>(r) * block_bytes,
                  inputs[static_cast<std::size_t>(r)], block_bytes);
    }
    if (reduction.op == ReduceOp::kPremulSum) {
      premul_in_place(dtype, reduction.premul_factor, scratch.data(), count * n);
    }
    ring_reduce_scatter(ctx, dtype, accumulate, scratch.data(), count * n, options);
    if (block_bytes > 0) {
      std::memcpy(output, scratch.data() + static_cast<std::size_t>(ctx.rank()) * block_bytes,
                  block_bytes);
    }
  }
  if (reduction.op == ReduceOp::kAvg) finish_average(dtype, output, count, n);
}

std::vector<const void*> block_pointers(const void* input, int n, std::size_t block_bytes) {
  std::vector<const void*> blocks(static_cast<std::size_t>(n));
  for (std::size_t r = 0; r < blocks.size(); ++r) {
    blocks[r] = static_cast<const std::byte*>(input) + r * block_bytes;
  }
  return blocks;
}

void reduce_scatter(const Context& ctx, DType dtype, const Reduction& reduction, const void* input,
                    void* output, std::int64_t count, const RingOptions& options) {
  C10D_CHECK(count >= 0, "reduce_scatter on rank {}: count {} is negative", ctx.rank(), count);
  reduce_scatter_blocks(
      ctx, dtype, reduction,
      block_pointers(input, ctx.size(), static_cast<std::size_t>(count) * element_size(dtype)),
      output, count, options);
}

}  // namespace c10d::inline v1::algorithms
