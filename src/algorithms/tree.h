// Rooted collectives: broadcast and reduce over a binomial tree, and a pipelined chain broadcast
// for large messages.
//
// Words used here:
//  - virtual rank: a rank's distance from the root, v = (rank - root) mod n, so the root is
//    v = 0 and every tree below is drawn for root 0 and then rotated.
//  - binomial tree: the parent of v > 0 is v with its lowest set bit cleared; the children of v
//    are v + 2^k for every 2^k below v's lowest set bit (every 2^k for the root) with
//    v + 2^k < n. The subtree under child v + 2^k holds at most 2^k ranks, so the depth is
//    ceil(log2 n) and a broadcast or reduce takes that many message latencies.
//  - chain: the ranks in virtual-rank order, root first; each forwards to the next.
//  - segment: the chain cuts the message into segments of at most `segment_bytes` and forwards
//    each as soon as it arrives, so every link carries the message once and the time is about
//    (n - 2 + segments) segment transfers: ~1x the message's bandwidth cost instead of the
//    tree's log2(n)x at the root.
//
// Every rank of ctx calls the same function with the same root, the same byte count (or element
// count) and, for the chain, the same segment_bytes; every wait uses ctx.deadline.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "algorithms/context.h"
#include "c10d/types.h"

namespace c10d::inline v1::algorithms {

// ---- Pattern arithmetic (pure; n >= 1, 0 <= root, rank < n) ----

// The parent of `rank` in the binomial tree of n ranks rooted at `root`, or -1 for the root.
int binomial_parent(int n, int root, int rank);

// The children of `rank`, largest subtree first (the order a broadcast should feed them in, so
// the deepest subtree starts earliest).
std::vector<int> binomial_children(int n, int root, int rank);

// The rank after / before `rank` on the chain rooted at `root`, or -1 past either end.
int chain_next(int n, int root, int rank);
int chain_prev(int n, int root, int rank);

// ---- Algorithms ----

inline constexpr std::int64_t kDefaultBroadcastSegmentBytes = 1024 << 10;
// Copies root's `data` into every other rank's `data` over the binomial tree. Which of the two
// broadcasts runs is algorithms/choice.h's to say.
void tree_broadcast(const Context& ctx, std::span<std::byte> data, int root);

// Copies root's `data` into every other rank's `data` along the chain, `segment_bytes` (> 0) at a
// time with several segments in flight per link.
void pipelined_broadcast(const Context& ctx, std::span<std::byte> data, int root,
                         std::int64_t segment_bytes = kDefaultBroadcastSegmentBytes);

// Reduces `count` elements of `dtype` in `data` across the ranks of ctx into root's `data` over
// the binomial tree (reduce_kernels.h's call order: PREMUL_SUM scales each input once at its
// source; AVG divides once, at the root). On every other rank `data` is left unspecified: it is
// used as the accumulator of that rank's subtree.
void tree_reduce(const Context& ctx, DType dtype, const Reduction& reduction, void* data,
                 std::int64_t count, int root);

}  // namespace c10d::inline v1::algorithms
