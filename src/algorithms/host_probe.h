// Measuring the rate of each edge of the hierarchical collectives' cross rings (host_shares.h),
// for a group that chooses its host shares by itself.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/context.h"
#include "algorithms/hier_pattern.h"

namespace c10d::inline v1::algorithms {

// Edge p's rate in bytes per second (host p sends to host p+1 mod H), identical on every rank.
// Every cross group shifts `bytes_per_host / L` bytes one host to the
// right, all L at once (as the cross rings load the links), each rank timing the receive from
// its left from the moment it tells that neighbour to go; then ctx all-gathers the timings, and
// edge p is the L streams' bytes over the longest time any of host p+1's ranks saw. Every rank of
// ctx calls it alike (hierarchical.h's contract); ctx's tag and deadline.
std::vector<double> probe_edge_rates(const Context& ctx, const HostLayout& layout,
                                     std::int64_t bytes_per_host);

}  // namespace c10d::inline v1::algorithms
