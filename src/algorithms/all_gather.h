// All-gather with separate input and output: every rank contributes one block and receives
// every rank's block.
//
// Words used here: a block is one rank's contribution, `input.size()` bytes, the same on every
// rank; the output holds n blocks in rank order, block r at byte offset r * input.size(). The
// steps are those of the ring all-gather (ring_pattern.h): this rank places its own block in the
// output, then n-1 ring steps pass each block once round the ring. Since every block has the
// same size, the output viewed as n * block bytes is cut by block_of exactly at the rank
// boundaries, so the ring half works on it unchanged, for any ring order.
#pragma once

#include <cstddef>
#include <span>

#include "algorithms/context.h"
#include "algorithms/ring_all_reduce.h"

namespace c10d::inline v1::algorithms {

// Gathers every rank's `input` into `output` in rank order. Throws InvalidArgument, before any
// message, unless output holds exactly n * input.size() bytes. `input` may be this rank's block
// of `output` itself (the in-place form); otherwise they must not overlap.
void all_gather(const Context& ctx, std::span<const std::byte> input, std::span<std::byte> output,
                const RingOptions& options = {});

}  // namespace c10d::inline v1::algorithms
