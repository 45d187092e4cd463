// Ring all-reduce: a ring reduce-scatter, then a ring all-gather (ring_pattern.h defines block
// and step). Bandwidth-optimal: each rank sends and receives 2(n-1)/n of the vector.
//
// Segment: a block goes out in segments of at most `segment_bytes`; the receiver keeps two
// segments in flight and reduces one while the next is on the wire. The all-gather receives
// straight into the output (no reduction, no scratch). The steps run as one pipeline (in
// ring_all_reduce both halves' steps): each segment goes on to the next step as soon as it is
// reduced or has arrived, not when its whole step is done (4 ranks on loopback TCP, a 16 MiB
// all_reduce: 19.2 against 22.3 ms, medians of 8 alternating rounds; docs/benchmarks.md).
// ring_reduce_scatter_to, whose partial sums travel through two scratch blocks, runs step by
// step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/ring_pattern.h"
#include "c10d/types.h"

namespace c10d::inline v1::algorithms {

struct RingOptions {
  std::vector<int> order;                   // empty: ranks in order 0..n-1
  std::int64_t segment_bytes = 1024 << 10;  // pipelining granularity
  // Empty: block_of's cut of `count` (ring_pattern.h). Else rank r's block, in elements of the
  // buffer (ring_pattern.h: any sizes and places, not overlapping), their counts summing to
  // `count`; every rank passes the same. Not for ring_reduce_scatter_to, whose blocks its
  // inputs fix.
  std::vector<Block> blocks;
};

// Reduces `count` elements of `data` across the ranks of ctx, in place. For kAvg the result is
// divided by the world size once at the end; for kPremulSum each rank's input is scaled first.
void ring_all_reduce(const Context& ctx, DType dtype, const Reduction& reduction, void* data,
                     std::int64_t count, const RingOptions& options = {});

// The reduce-scatter half alone: afterwards this rank's block (block_of(count, n, rank)) of
// `data` holds the full reduction; other blocks hold partial sums. No AVG division.
void ring_reduce_scatter(const Context& ctx, DType dtype, const Reduction& reduction, void* data,
                         std::int64_t count, const RingOptions& options = {});

// The reduce-scatter half with the input left as it was: rank r's block of `count` elements
// is read at inputs[r] (n pointers; the blocks need not be adjacent), and this rank's block of
// the reduction (no AVG division) is written to `output` instead of into an input. Partial sums
// travel through scratch. `output` is either inputs[rank] itself or disjoint from every block.
void ring_reduce_scatter_to(const Context& ctx, DType dtype, const Reduction& reduction,
                            std::span<const void* const> inputs, void* output, std::int64_t count,
                            const RingOptions& options = {});

// The all-gather half alone: every rank's block of `data` is copied to every rank.
void ring_all_gather(const Context& ctx, DType dtype, void* data, std::int64_t count,
                     const RingOptions& options = {});

}  // namespace c10d::inline v1::algorithms
