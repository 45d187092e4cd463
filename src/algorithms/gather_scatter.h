// Gather and scatter, direct: the root posts one receive (gather) or one send (scatter) per other
// rank at once and waits for them all; every other rank exchanges exactly one message with the
// root. n-1 messages through the root's link, one latency: the right shape for the small,
// per-rank payloads these collectives carry (the root's link is the bottleneck either way).
//
// Words used here:
//  - input / output: this rank's own buffer.
//  - outputs / inputs: at the root, one buffer per rank of the group, indexed by rank; the
//    root's own slot is copied locally. Elsewhere these must be empty.
// Buffers of different ranks may differ in size (gatherv/scatterv); the root's slot for rank q
// must be exactly as large as q's buffer. The root checks its own arguments before any message;
// a mismatch with a peer's size fails on both sides with the transport's InvalidArgument, which
// names the peer, the tag and both sizes. A rank whose arguments are rejected sends nothing, so
// its peers fail at ctx.deadline.
#pragma once

#include <cstddef>
#include <span>

#include "algorithms/context.h"

namespace c10d::inline v1::algorithms {

// Collects every rank's `input` into root's outputs[rank].
void gather(const Context& ctx, std::span<const std::byte> input,
            std::span<const std::span<std::byte>> outputs, int root);

// Sends root's inputs[rank] to every rank's `output`.
void scatter(const Context& ctx, std::span<const std::span<const std::byte>> inputs,
             std::span<std::byte> output, int root);

}  // namespace c10d::inline v1::algorithms
