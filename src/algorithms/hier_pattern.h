// Hierarchical pattern arithmetic: which ranks share a host, and which elements each rank holds
// at each phase of a hierarchical collective. Pure functions, tested alone (pattern_test.cc).
//
// Words used by the hierarchical collectives (hierarchical.h):
//  - host map: host_of_rank[r] is the host of rank r (Transport::host_of_rank()); hosts are
//    numbered 0..H-1 in the order of their lowest rank.
//  - local rank: a rank's place among the ranks of its host, in ascending rank order; L is the
//    number of ranks on every host. The hierarchical collectives need the same L on every host,
//    H > 1 and L > 1 (HostLayout::hierarchical()); otherwise the flat ones run.
//  - local group: the L ranks of one host (they exchange through shared memory). Cross group l:
//    the H ranks of local rank l, one per host, in host order (they exchange over the network).
//    Each rank is in one of each; the L cross groups of a collective run at once, side by side.
//  - all_reduce of `count` elements runs in three phases:
//      1. reduce-scatter in the local group: the buffer is cut into L local chunks (block_of);
//         local rank l ends with chunk l reduced over its host.
//      2. all_reduce of chunk l in cross group l: a ring whose H blocks are the pieces of chunk l
//         that each host owns (cross_pieces: equal, or in proportion to per-host shares);
//         afterwards every rank holds chunk l reduced over all ranks.
//      3. all-gather in the local group: every rank gets every chunk.
//    So each host sends and receives about 2(H-1)/H of the vector over the network, in L
//    streams of 1/L each, instead of the flat ring's 2(n-1)/n through one.
//  - shares: how much of each chunk each host owns in phase 2 (empty: equal, as block_of). In a
//    ring a rank forwards every block but its own in the reduce-scatter half, and every block
//    but its right neighbour's in the all-gather half, so a host that owns more sends less.
#pragma once

#include <cstdint>
#include <vector>

#include "algorithms/ring_pattern.h"

namespace c10d::inline v1::algorithms {

class HostLayout {
 public:
  // `host_of_rank`: one entry per rank, each >= 0; any numbering (renumbered here by first
  // appearance). Empty: one rank. InvalidArgument for a negative entry.
  explicit HostLayout(const std::vector<int>& host_of_rank);
  // Every rank a host of its own (what a transport that knows no better says).
  static HostLayout one_per_host(int world_size);

  int world() const { return static_cast<int>(host_of_.size()); }
  int hosts() const { return static_cast<int>(ranks_.size()); }
  // L when every host has that many ranks, else 0.
  int per_host() const { return per_host_; }
  // H > 1 and the same L > 1 on every host: the hierarchical collectives can run.
  bool hierarchical() const { return hosts() > 1 && per_host_ > 1; }

  int host_of(int rank) const { return host_of_[static_cast<std::size_t>(rank)]; }
  int local_of(int rank) const { return local_of_[static_cast<std::size_t>(rank)]; }
  // The ranks of `host`, ascending (the local group).
  const std::vector<int>& ranks_on(int host) const {
    return ranks_[static_cast<std::size_t>(host)];
  }
  // Local rank `local` of every host, in host order (cross group `local`; needs per_host()).
  std::vector<int> cross_ranks(int local) const;
  // Every rank, host by host (ascending within a host): a flat ring in this order crosses
  // between hosts H times per round instead of up to n.
  std::vector<int> ring_order() const;
  // The normalized map: hosts numbered 0..H-1 by their lowest rank.
  const std::vector<int>& host_of_rank() const { return host_of_; }

 private:
  std::vector<int> host_of_;
  std::vector<int> local_of_;
  std::vector<std::vector<int>> ranks_;  // by host
  int per_host_ = 0;
};

// `count` cut into one count per share, in proportion to the shares (each >= 0, at least one
// > 0), largest remainders taking the leftover elements (ties: the lower index). Equal shares
// give block_of's cut exactly. Empty shares: `n` equal ones. InvalidArgument for bad shares.
std::vector<std::int64_t> split_by_shares(std::int64_t count, int n,
                                          const std::vector<std::int64_t>& shares);

// One rank's view of a hierarchical all_reduce (phases above) of `count` elements.
class HierPattern {
 public:
  // `layout.hierarchical()` must hold; `host_shares`: empty or one per host (split_by_shares).
  HierPattern(const HostLayout& layout, int rank, std::int64_t count,
              std::vector<std::int64_t> host_shares = {});

  // Phases 1 and 3: the local chunks, by local rank (block_of's cut of the buffer).
  const std::vector<Block>& local_blocks() const { return local_blocks_; }
  // The chunk this rank reduces over its host in phase 1 and over all in phase 2.
  Block own_chunk() const { return local_blocks_[static_cast<std::size_t>(local_rank_)]; }
  // Phase 2: the pieces of own_chunk() by host (cross rank), offsets in the whole buffer.
  const std::vector<Block>& cross_blocks() const { return cross_blocks_; }
  // The pieces chunk `local` is cut into in cross group `local`, by host.
  std::vector<Block> cross_pieces(int local) const;
  // The piece this rank holds reduced over every rank once phase 2's reduce-scatter half ends.
  Block owned() const { return cross_blocks_[static_cast<std::size_t>(host_)]; }

 private:
  std::vector<Block> local_blocks_;
  std::vector<Block> cross_blocks_;
  std::vector<std::int64_t> shares_;
  int hosts_ = 0;
  int host_ = 0;
  int local_rank_ = 0;
};

// For collectives over n blocks of `block` elements, rank r's at r * block (all_gather's output,
// reduce_scatter's input): the blocks of cross group `local` by host, and those of `host`'s
// local group by local rank.
std::vector<Block> cross_row_blocks(const HostLayout& layout, int local, std::int64_t block);
std::vector<Block> local_row_blocks(const HostLayout& layout, int host, std::int64_t block);

}  // namespace c10d::inline v1::algorithms
