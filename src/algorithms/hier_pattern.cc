#include "algorithms/hier_pattern.h"

#include <algorithm>
#include <numeric>

#include "core/check.h"
#include "transport/transport.h"

namespace c10d::inline v1::algorithms {
namespace {

// count * share passes 2^64 for the counts and shares allowed; GCC and Clang have the type.
__extension__ using Wide = unsigned __int128;

}  // namespace

HostLayout::HostLayout(const std::vector<int>& host_of_rank)
    : host_of_(transport::number_hosts(host_of_rank)) {
  if (host_of_.empty()) host_of_ = {0};  // one rank, nothing said about it
  local_of_.reserve(host_of_.size());
  for (std::size_t r = 0; r < host_of_.size(); ++r) {
    const auto host = static_cast<std::size_t>(host_of_[r]);
    if (host == ranks_.size()) ranks_.emplace_back();
    local_of_.push_back(static_cast<int>(ranks_[host].size()));
    ranks_[host].push_back(static_cast<int>(r));
  }
  per_host_ = static_cast<int>(ranks_[0].size());
  for (const auto& on : ranks_) {
    if (static_cast<int>(on.size()) != per_host_) per_host_ = 0;
  }
}

HostLayout HostLayout::one_per_host(int world_size) {
  return HostLayout(transport::one_host_each(world_size));
}

std::vector<int> HostLayout::cross_ranks(int local) const {
  C10D_CHECK(per_host_ > 0 && local >= 0 && local < per_host_,
             "cross group {} of a layout with {} ranks per host", local, per_host_);
  std::vector<int> ranks;
  ranks.reserve(ranks_.size());
  for (const auto& on : ranks_) ranks.push_back(on[static_cast<std::size_t>(local)]);
  return ranks;
}

std::vector<int> HostLayout::ring_order() const {
  std::vector<int> order;
  order.reserve(host_of_.size());
  for (const auto& on : ranks_) order.insert(order.end(), on.begin(), on.end());
  return order;
}

std::vector<std::int64_t> split_by_shares(std::int64_t count, int n,
                                          const std::vector<std::int64_t>& shares) {
  C10D_CHECK(count >= 0 && n >= 1, "split of {} elements into {} parts", count, n);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  if (shares.empty()) {
    for (int i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = block_of(count, n, i).count;
    return out;
  }
  C10D_CHECK(static_cast<int>(shares.size()) == n, "split into {} parts given {} shares", n,
             shares.size());
  Wide total = 0;
  for (std::int64_t s : shares) {
    C10D_CHECK(s >= 0, "a negative share {}", s);
    total += static_cast<Wide>(s);
  }
  C10D_CHECK(total > 0, "split of {} elements by shares that are all 0", count);
  std::vector<Wide> rest(static_cast<std::size_t>(n));
  std::int64_t given = 0;
  for (std::size_t i = 0; i < out.size(); ++i) {
    const auto exact = static_cast<Wide>(count) * static_cast<std::uint64_t>(shares[i]);
    out[i] = static_cast<std::int64_t>(exact / total);
    rest[i] = exact % total;
    given += out[i];
  }
  // Fewer than n elements are left over; they go to the largest remainders, lower index first.
  std::vector<std::size_t> by_rest(out.size());
  std::iota(by_rest.begin(), by_rest.end(), 0);
  std::stable_sort(by_rest.begin(), by_rest.end(),
                   [&](std::size_t a, std::size_t b) { return rest[a] > rest[b]; });
  for (std::int64_t k = 0; k < count - given; ++k) ++out[by_rest[static_cast<std::size_t>(k)]];
  return out;
}

HierPattern::HierPattern(const HostLayout& layout, int rank, std::int64_t count,
                         std::vector<std::int64_t> host_shares)
    : shares_(std::move(host_shares)), hosts_(layout.hosts()) {
  C10D_CHECK(layout.hierarchical(),
             "hierarchical pattern over {} hosts of {} ranks each (needs 2 or more of both, the "
             "same on every host)",
             layout.hosts(), layout.per_host());
  C10D_CHECK(rank >= 0 && rank < layout.world(), "rank {} outside a world of {}", rank,
             layout.world());
  C10D_CHECK(count >= 0, "hierarchical pattern over a negative count {}", count);
  C10D_CHECK(shares_.empty() || static_cast<int>(shares_.size()) == hosts_,
             "{} host shares for {} hosts", shares_.size(), hosts_);
  host_ = layout.host_of(rank);
  local_rank_ = layout.local_of(rank);
  const int l = layout.per_host();
  for (int i = 0; i < l; ++i) local_blocks_.push_back(block_of(count, l, i));
  cross_blocks_ = cross_pieces(local_rank_);
}

std::vector<Block> HierPattern::cross_pieces(int local) const {
  const Block chunk = local_blocks_.at(static_cast<std::size_t>(local));
  return adjacent_blocks(split_by_shares(chunk.count, hosts_, shares_), chunk.offset);
}

namespace {

std::vector<Block> blocks_of_ranks(const std::vector<int>& ranks, std::int64_t block) {
  std::vector<Block> blocks;
  blocks.reserve(ranks.size());
  for (int r : ranks) blocks.push_back({r * block, block});
  return blocks;
}

}  // namespace

std::vector<Block> cross_row_blocks(const HostLayout& layout, int local, std::int64_t block) {
  return blocks_of_ranks(layout.cross_ranks(local), block);
}

std::vector<Block> local_row_blocks(const HostLayout& layout, int host, std::int64_t block) {
  return blocks_of_ranks(layout.ranks_on(host), block);
}

}  // namespace c10d::inline v1::algorithms
