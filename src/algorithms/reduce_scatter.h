// Reduce-scatter with separate input and output: every rank contributes n blocks and receives
// the reduction of its own block over all ranks.
//
// Words used here: a block is `count` elements; the input holds n blocks in rank order, block r
// being this rank's contribution to rank r's result; the output is one block. The steps are
// those of the ring reduce-scatter (ring_pattern.h; with equal blocks, block_of cuts the
// n * count elements exactly at the rank boundaries), run by ring_reduce_scatter_to: the input
// is only read, partial sums travel through scratch, and the last step writes the output. Two
// cases run the in-place ring on a scratch copy of the input instead: PREMUL_SUM, which scales
// this rank's whole contribution before the ring, and an output that overlaps the input other
// than as this rank's own block. AVG follows reduce_kernels.h: the ring accumulates plain sums
// and the result is divided once at the end.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/ring_all_reduce.h"
#include "c10d/types.h"

namespace c10d::inline v1::algorithms {

// output[i] = reduction over ranks q of q's input[rank * count + i], for i in [0, count).
// `input` holds n * count elements of `dtype`, `output` count elements; they may overlap in any
// way (the input is then copied before anything is written, unless the output is exactly this
// rank's block of it). Throws InvalidArgument, before any message, for
// a negative count or a reduction the kernels reject on `dtype`.
void reduce_scatter(const Context& ctx, DType dtype, const Reduction& reduction, const void* input,
                    void* output, std::int64_t count, const RingOptions& options = {});

// The same with each rank's block in a buffer of its own: inputs[r] holds this rank's `count`
// elements for rank r (n pointers). The output may be inputs[rank] itself or overlap any
// blocks (which are then copied first). Also throws InvalidArgument when inputs.size() != n.
void reduce_scatter_blocks(const Context& ctx, DType dtype, const Reduction& reduction,
                           std::span<const void* const> inputs, void* output, std::int64_t count,
                           const RingOptions& options = {});

// The n block pointers of a contiguous input of n blocks of `block_bytes`, in rank order.
std::vector<const void*> block_pointers(const void* input, int n, std::size_t block_bytes);

}  // namespace c10d::inline v1::algorithms
