// The hierarchical pattern arithmetic (hier_pattern.h) on simulated ranks, as pattern_test.cc
// does for the flat ring: host layouts, the weighted split, and a whole hierarchical all_reduce
// (local reduce-scatter, cross-host ring all_reduce, local all-gather) run as copies between
// vectors, for layouts of 2x2, 3x2, 2x3 and hosts whose ranks interleave, counts that divide by
// neither L nor H, zero, and unequal host shares.
#include "algorithms/hier_pattern.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <numeric>
#include <vector>

#include "c10d/errors.h"

namespace c10d::inline v1::algorithms {
namespace {

using Buffers = std::vector<std::vector<std::int64_t>>;

std::int64_t input(int r, std::int64_t i) { return (r + 1) * 1000003 + i * 7; }

// A ring over `members` (ring rank k is global rank members[k], in that order) whose ranks'
// blocks are `blocks` (by ring rank), run on the global buffers: its reduce-scatter half, its
// all-gather half, or both.
void simulate_ring(Buffers& buf, const std::vector<int>& members, const std::vector<Block>& blocks,
                   bool reduce_scatter, bool all_gather) {
  const int n = static_cast<int>(members.size());
  std::vector<int> order(static_cast<std::size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  std::vector<RingPattern> pats;
  for (int k = 0; k < n; ++k) pats.emplace_back(order, k, blocks);
  for (int half = 0; half < 2; ++half) {
    if ((half == 0 && !reduce_scatter) || (half == 1 && !all_gather)) continue;
    for (int s = 0; s < n - 1; ++s) {
      const Buffers sent = buf;
      for (int k = 0; k < n; ++k) {
        const RingPattern& p = pats[k];
        const Block got = half == 0 ? p.reduce_scatter_recv(s) : p.all_gather_recv(s);
        const Block left =
            half == 0 ? pats[p.left()].reduce_scatter_send(s) : pats[p.left()].all_gather_send(s);
        ASSERT_EQ(left.offset, got.offset);
        ASSERT_EQ(left.count, got.count);
        auto& mine = buf[members[k]];
        const auto& theirs = sent[members[p.left()]];
        for (std::int64_t i = got.offset; i < got.offset + got.count; ++i) {
          mine[i] = half == 0 ? mine[i] + theirs[i] : theirs[i];
        }
      }
    }
  }
}

// The hierarchical all_reduce of hier_pattern.h's three phases over `hosts` (a host map).
void run_hier(const std::vector<int>& hosts, std::int64_t count,
              const std::vector<std::int64_t>& shares = {}) {
  const HostLayout layout(hosts);
  ASSERT_TRUE(layout.hierarchical());
  const int n = layout.world();
  Buffers buf(static_cast<std::size_t>(n), std::vector<std::int64_t>(count));
  std::vector<std::int64_t> want(count, 0);
  for (int r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < count; ++i) {
      buf[r][i] = input(r, i);
      want[i] += input(r, i);
    }
  }
  std::vector<HierPattern> pats;
  for (int r = 0; r < n; ++r) pats.emplace_back(layout, r, count, shares);
  // Every element is owned, after the cross reduce-scatter, by exactly one rank.
  std::vector<int> owners(count, 0);
  for (int r = 0; r < n; ++r) {
    const Block o = pats[r].owned();
    for (std::int64_t i = o.offset; i < o.offset + o.count; ++i) ++owners[i];
  }
  for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(owners[i], 1) << "element " << i;

  for (int h = 0; h < layout.hosts(); ++h) {
    const int first = layout.ranks_on(h)[0];
    simulate_ring(buf, layout.ranks_on(h), pats[first].local_blocks(), true, false);
  }
  for (int r = 0; r < n; ++r) {
    const Block chunk = pats[r].own_chunk();
    for (std::int64_t i = chunk.offset; i < chunk.offset + chunk.count; ++i) {
      std::int64_t host_sum = 0;
      for (int q : layout.ranks_on(layout.host_of(r))) host_sum += input(q, i);
      ASSERT_EQ(buf[r][i], host_sum) << "rank " << r << " after the local reduce-scatter";
    }
  }
  for (int l = 0; l < layout.per_host(); ++l) {
    const std::vector<int> cross = layout.cross_ranks(l);
    for (int r : cross) ASSERT_EQ(pats[r].cross_blocks().size(), cross.size());
    EXPECT_EQ(pats[cross[0]].cross_pieces(l).size(), cross.size());
    simulate_ring(buf, cross, pats[cross[0]].cross_blocks(), true, true);
  }
  for (int h = 0; h < layout.hosts(); ++h) {
    const int first = layout.ranks_on(h)[0];
    simulate_ring(buf, layout.ranks_on(h), pats[first].local_blocks(), false, true);
  }
  for (int r = 0; r < n; ++r) ASSERT_EQ(buf[r], want) << "rank " << r << " count " << count;
}

TEST(HostLayoutTest, NumbersHostsByTheirLowestRankAndCountsRanksPerHost) {
  const HostLayout l({7, 3, 7, 3, 9, 9});  // three hosts of two, interleaved
  EXPECT_EQ(l.hosts(), 3);
  EXPECT_EQ(l.per_host(), 2);
  EXPECT_TRUE(l.hierarchical());
  EXPECT_EQ(l.host_of_rank(), (std::vector<int>{0, 1, 0, 1, 2, 2}));
  EXPECT_EQ(l.ranks_on(1), (std::vector<int>{1, 3}));
  EXPECT_EQ(l.local_of(3), 1);
  EXPECT_EQ(l.cross_ranks(0), (std::vector<int>{0, 1, 4}));
  EXPECT_EQ(l.cross_ranks(1), (std::vector<int>{2, 3, 5}));
  EXPECT_EQ(l.ring_order(), (std::vector<int>{0, 2, 1, 3, 4, 5}));
  EXPECT_THROW(l.cross_ranks(2), InvalidArgument);
}

TEST(HostLayoutTest, OneHostOneRankPerHostOrUnevenHostsHaveNoHierarchy) {
  EXPECT_FALSE(HostLayout({0, 0, 0, 0}).hierarchical());
  EXPECT_EQ(HostLayout({0, 0, 0, 0}).per_host(), 4);
  EXPECT_FALSE(HostLayout::one_per_host(4).hierarchical());
  EXPECT_EQ(HostLayout::one_per_host(4).hosts(), 4);
  const HostLayout uneven({0, 0, 0, 1, 1});
  EXPECT_FALSE(uneven.hierarchical());
  EXPECT_EQ(uneven.per_host(), 0);
  EXPECT_EQ(uneven.ring_order(), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(HostLayout({}).world(), 1);
  EXPECT_THROW(HostLayout({0, -1}), InvalidArgument);
}

TEST(SplitBySharesTest, EqualOrNoSharesCutAsBlockOfDoes) {
  for (std::int64_t count : {0, 1, 5, 7, 1000, 1001}) {
    for (int n = 1; n <= 5; ++n) {
      const auto none = split_by_shares(count, n, {});
      const auto equal = split_by_shares(count, n, std::vector<std::int64_t>(n, 3));
      for (int i = 0; i < n; ++i) {
        EXPECT_EQ(none[i], block_of(count, n, i).count);
        EXPECT_EQ(equal[i], block_of(count, n, i).count) << count << " over " << n;
      }
    }
  }
}

TEST(SplitBySharesTest, UnequalSharesCutInProportionAndSumToTheCount) {
  EXPECT_EQ(split_by_shares(100, 2, {1, 3}), (std::vector<std::int64_t>{25, 75}));
  EXPECT_EQ(split_by_shares(10, 3, {1, 1, 2}), (std::vector<std::int64_t>{3, 2, 5}));  // 2.5 2.5 5
  EXPECT_EQ(split_by_shares(7, 3, {5, 0, 2}), (std::vector<std::int64_t>{5, 0, 2}));
  EXPECT_EQ(split_by_shares(0, 3, {5, 0, 2}), (std::vector<std::int64_t>{0, 0, 0}));
  // No overflow where count * share passes 2^63.
  const std::int64_t big = std::int64_t{1} << 60;
  EXPECT_EQ(split_by_shares(big, 2, {std::int64_t{1} << 40, std::int64_t{3} << 40}),
            (std::vector<std::int64_t>{big / 4, big / 4 * 3}));
  for (std::int64_t count : {1, 2, 3, 999}) {
    const auto parts = split_by_shares(count, 3, {2, 7, 1});
    EXPECT_EQ(std::accumulate(parts.begin(), parts.end(), std::int64_t{0}), count);
  }
  EXPECT_THROW(split_by_shares(10, 2, {0, 0}), InvalidArgument);
  EXPECT_THROW(split_by_shares(10, 2, {1, -1}), InvalidArgument);
  EXPECT_THROW(split_by_shares(10, 3, {1, 1}), InvalidArgument);
}

TEST(RingPatternTest, NamedBlocksApartAndOutOfOrderGiveTheSum) {
  // Four ranks whose blocks lie in reverse order with gaps, one of them empty.
  const std::vector<Block> blocks = {{30, 5}, {20, 0}, {9, 7}, {0, 3}};
  Buffers buf(4, std::vector<std::int64_t>(40));
  for (int r = 0; r < 4; ++r) {
    for (std::int64_t i = 0; i < 40; ++i) buf[r][i] = input(r, i);
  }
  simulate_ring(buf, {2, 0, 3, 1}, blocks, true, true);  // members in another order too
  for (int r = 0; r < 4; ++r) {
    for (const Block& b : blocks) {
      for (std::int64_t i = b.offset; i < b.offset + b.count; ++i) {
        ASSERT_EQ(buf[r][i], input(0, i) + input(1, i) + input(2, i) + input(3, i));
      }
    }
    EXPECT_EQ(buf[r][4], input(r, 4)) << "outside every block, nothing moves";
  }
  EXPECT_THROW(RingPattern({0, 1}, 0, std::vector<Block>{{0, 1}}), InvalidArgument);
  EXPECT_THROW(RingPattern({0, 1}, 0, std::vector<Block>{{0, 1}, {-1, 1}}), InvalidArgument);
}

TEST(HierPatternTest, EveryRankGetsTheSumForEveryLayoutAndCount) {
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 1, 1}, {0, 0, 1, 1, 2, 2}, {0, 0, 0, 1, 1, 1}, {0, 1, 0, 1}, {4, 2, 2, 4, 9, 9}};
  for (const auto& hosts : layouts) {
    for (std::int64_t count : {0, 1, 2, 3, 5, 7, 13, 1000}) run_hier(hosts, count);
  }
}

TEST(HierPatternTest, UnequalHostSharesCutEachChunkInProportion) {
  for (std::int64_t count : {0, 1, 7, 1000}) {
    run_hier({0, 0, 1, 1}, count, {1, 3});
    run_hier({0, 0, 1, 1, 2, 2}, count, {5, 0, 2});  // a host may own nothing
    run_hier({0, 0, 0, 1, 1, 1}, count, {2, 1});
  }
  const HostLayout l({0, 0, 1, 1});
  const HierPattern p(l, 2, 1000, {1, 3});  // host 1, local rank 0: chunk [0, 500)
  EXPECT_EQ(p.own_chunk().offset, 0);
  EXPECT_EQ(p.own_chunk().count, 500);
  ASSERT_EQ(p.cross_blocks().size(), 2u);
  EXPECT_EQ(p.cross_blocks()[0].count, 125);
  EXPECT_EQ(p.cross_blocks()[1].offset, 125);
  EXPECT_EQ(p.owned().count, 375);
  EXPECT_EQ(p.cross_pieces(1)[0].offset, 500);
}

TEST(HierPatternTest, RefusesALayoutWithoutHierarchyAndBadShares) {
  EXPECT_THROW(HierPattern(HostLayout({0, 0, 0}), 0, 10), InvalidArgument);
  EXPECT_THROW(HierPattern(HostLayout({0, 0, 1}), 0, 10), InvalidArgument);
  EXPECT_THROW(HierPattern(HostLayout({0, 0, 1, 1}), 0, 10, {1, 2, 3}), InvalidArgument);
  EXPECT_THROW(HierPattern(HostLayout({0, 0, 1, 1}), 4, 10), InvalidArgument);
}

TEST(HierPatternTest, RowBlocksNameTheRanksBlocksOfACrossOrLocalGroup) {
  const HostLayout l({0, 1, 0, 1, 2, 2});
  const auto cross = cross_row_blocks(l, 1, 10);  // ranks 2, 3, 5
  ASSERT_EQ(cross.size(), 3u);
  EXPECT_EQ(cross[0].offset, 20);
  EXPECT_EQ(cross[1].offset, 30);
  EXPECT_EQ(cross[2].offset, 50);
  const auto local = local_row_blocks(l, 1, 10);  // ranks 1, 3
  ASSERT_EQ(local.size(), 2u);
  EXPECT_EQ(local[0].offset, 10);
  EXPECT_EQ(local[1].offset, 30);
  EXPECT_EQ(local[1].count, 10);
}

}  // namespace
}  // namespace c10d::inline v1::algorithms
