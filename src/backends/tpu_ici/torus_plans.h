// The torus-aware collectives of the ICI backend as plans (plan.h), one builder per algorithm,
// each in its own file. All take the chip's rank in `torus` and are pure.
//
//  multi_axis_all_reduce.cc  all_reduce of `count` elements: the buffer is cut into one lane
//      per axis of more than one chip; lane i reduce-scatters along axes i, i+1, ... in turn
//      (each phase a line_ring.h ring over the lane's current block), then all-gathers back in
//      the reverse order. In every phase the lanes use different axes, so the bandwidth term is
//      divided by the number of axes. Large vectors run phase p of every lane as stage p, each
//      lane's share in proportion to what its first axis carries, so axes of unequal length
//      finish together; small ones merge the lanes step by step into one, equal shares
//      (axis_shares.h has the arithmetic and the choice).
//  torus_all_gather.cc  all_gather of one `block_bytes` block per rank into n blocks in rank
//      order: along axis 0, then 1, ...; before the phase on axis a each chip holds the blocks of
//      the chips that share its coordinates above a (contiguous in rank order, axis 0 fastest).
//  torus_reduce_scatter.cc  the mirror: along the last axis first, keeping this chip's slice.
//  routed_all_to_all.cc  all_to_all(v): one step in which every chip sends every other chip its
//      block directly; the fabric forwards each message along its dimension-order route.
//  torus_broadcast.cc  broadcast from `root`: the data floods the torus axis by axis, along each
//      line both ways (half the line each way on a wrapping axis), pipelined in segments.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "backends/tpu_ici/plan.h"
#include "backends/tpu_ici/topology.h"

namespace c10d::inline v1::tpu_ici {

Plan multi_axis_all_reduce(const Torus& torus, int rank, std::int64_t count,
                           std::size_t element_bytes);

Plan torus_all_gather(const Torus& torus, int rank, std::int64_t block_bytes);

// The data buffer holds n blocks of `count` elements in rank order; afterwards block `rank` is
// reduced (the other blocks hold partial sums).
Plan torus_reduce_scatter(const Torus& torus, int rank, std::int64_t count,
                          std::size_t element_bytes);

// Byte counts and offsets per rank as algorithms::all_to_allv; sends read the input buffer. The
// chip's own block is not part of the plan (the caller copies it).
Plan routed_all_to_all(int rank, int n, std::span<const std::int64_t> send_counts,
                       std::span<const std::int64_t> send_offsets,
                       std::span<const std::int64_t> recv_counts,
                       std::span<const std::int64_t> recv_offsets);

// The blocks (of `block` elements or bytes) a chip holds before the all_gather phase on `axis`,
// or reduces in the reduce_scatter phase on it: those of the chips sharing its coordinates on
// every axis above `axis`, contiguous in rank order (axis 0 fastest).
inline Range super_block(const Torus& torus, int rank, int axis, std::int64_t block) {
  const int first = rank - rank % (torus.stride(axis) * torus.dim(axis));
  return {first * block, static_cast<std::int64_t>(torus.stride(axis)) * torus.dim(axis) * block};
}

inline constexpr std::int64_t kBroadcastSegmentBytes = 1 << 20;
Plan torus_broadcast(const Torus& torus, int rank, int root, std::int64_t bytes,
                     std::int64_t segment_bytes = kBroadcastSegmentBytes);

}  // namespace c10d::inline v1::tpu_ici
