// Recursive halving-doubling all-reduce (Rabenseifner), for any world size: fold the extra ranks
// in, reduce-scatter by recursive halving, all-gather by recursive doubling, unfold.
// halving_doubling_pattern.h defines the words (pof2, rem, fold, block, step). 2 log2(n) rounds
// instead of the ring's 2(n-1): the latency-optimal choice for small messages, while still
// sending each rank only about twice the vector.
#pragma once

#include <cstdint>

#include "algorithms/context.h"
#include "c10d/types.h"

namespace c10d::inline v1::algorithms {

// Vectors up to this size skip the halving: after the fold, every step exchanges the whole
// vector (recursive doubling), log2(n) messages instead of 2 log2(n); above it the halving's
// smaller messages win.
inline constexpr std::int64_t kRecursiveDoublingMaxBytes = 4 << 10;

// Reduces `count` elements of `data` across the ranks of ctx, in place (AVG divides once at the
// end; PREMUL_SUM scales each rank's input once first).
void halving_doubling_all_reduce(const Context& ctx, DType dtype, const Reduction& reduction,
                                 void* data, std::int64_t count);

}  // namespace c10d::inline v1::algorithms
