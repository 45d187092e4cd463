// Hierarchical collectives: for a group that spans H > 1 hosts of L > 1 ranks each, a collective
// runs within each host (over shared memory, in the TCP backend), across hosts as L rings side
// by side (one per local rank, each carrying 1/L of the data), and within each host again.
// hier_pattern.h defines the words (host map, local rank, local group, cross group, shares) and
// the phases of all_reduce; the others here:
//  - all_gather: cross group l gathers the blocks of its H ranks in a ring, straight into their
//    places in the output; then each local group gathers, host by host (H rings of L), the
//    blocks its members got. Each host receives (H-1)/H of the output over the network.
//  - reduce_scatter: each local group reduce-scatters, host by host (H rings of L), the blocks
//    of that host's ranks into scratch, so local rank l holds its host's partial sums of the H
//    blocks of cross group l; cross group l then reduce-scatters those, each rank ending with
//    its own block. The inputs are only read.
//  - broadcast: the root sends chunk l (block_of over L) to local rank l of its host; cross
//    group l broadcasts chunk l from the root's host (chain, or tree below
//    kChainBroadcastMinBytes per chunk); each local group all-gathers the chunks.
// Each phase runs the flat algorithms (ring_all_reduce.h, tree.h) over a SubTransport of ctx's
// transport and ctx's tag and deadline: the local and cross groups' pairs are disjoint, and a
// local group's phases follow each other on both sides of every pair, so one tag serves them all.
//
// Every rank of ctx calls the same function with the same layout (built from the transport's
// host_of_rank(), identical on every rank), counts, root and shares. `layout.hierarchical()`
// must hold and layout.world() equal ctx.size() (InvalidArgument otherwise, before any message).
// Reductions follow reduce_kernels.h: PREMUL_SUM scales each rank's input once, AVG divides once
// at the end; the phases accumulate plain sums.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/hier_pattern.h"
#include "c10d/types.h"

namespace c10d::inline v1::algorithms {

// all_reduce runs as a pipeline of pieces of at least kHierPieceBytes, at most kHierMaxPieces of
// them: one piece's network phase overlaps the shared-memory phases of the next and the one
// before (hierarchical.cc). Smaller pieces cost more than they overlap: 16 MiB on 2 hosts x 2
// ranks over 2 Gbit/s took 82 ms in 2 pieces, 101 in 4, 120 in 8 (88 unpiped).
inline constexpr std::int64_t kHierPieceBytes = std::int64_t{8} << 20;
inline constexpr int kHierMaxPieces = 8;
// How many pieces hier_all_reduce cuts `bytes` into by default (1: no pipeline).
int hier_pieces(std::int64_t bytes);

// The two ways of hier_all_reduce: through each host's leader, its local rank 0 (a binomial
// reduce within the host, halving-doubling between the leaders, a binomial broadcast within the
// host), or the three phases of rings above. kBySize takes the leaders up to
// kHierLeadersMaxBytes (choice.h), the rings above; the others are for tests.
enum class HierRoute { kBySize, kLeaders, kRings };

// Reduces `count` elements of `data` across the ranks of ctx, in place. `host_shares`: how each
// local chunk is cut between the hosts in the cross rings (hier_pattern.h; empty: equally).
// `pieces`: 0 for hier_pieces(), 1 for no pipeline, else that many (every rank alike). Both
// apply to the rings alone.
void hier_all_reduce(const Context& ctx, const HostLayout& layout, DType dtype,
                     const Reduction& reduction, void* data, std::int64_t count,
                     const std::vector<std::int64_t>& host_shares = {}, int pieces = 0,
                     HierRoute route = HierRoute::kBySize);

// As all_gather (all_gather.h): every rank's `input` into `output` in rank order; `input` may be
// this rank's block of `output` itself.
void hier_all_gather(const Context& ctx, const HostLayout& layout, std::span<const std::byte> input,
                     std::span<std::byte> output);

// As reduce_scatter_blocks (reduce_scatter.h): inputs[r] holds this rank's `count` elements for
// rank r; the output may be any of them or overlap them.
void hier_reduce_scatter(const Context& ctx, const HostLayout& layout, DType dtype,
                         const Reduction& reduction, std::span<const void* const> inputs,
                         void* output, std::int64_t count);

// As tree_broadcast (tree.h): root's `data` into every rank's.
void hier_broadcast(const Context& ctx, const HostLayout& layout, std::span<std::byte> data,
                    int root);

}  // namespace c10d::inline v1::algorithms
