// The ring and halving-doubling pattern arithmetic, run on simulated ranks: every rank's buffer
// is a vector, "sending" copies between them, and the result is checked against the closed form
// (the sum over ranks) for every world size and for counts that do not divide evenly.
#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "algorithms/halving_doubling_pattern.h"
#include "algorithms/ring_pattern.h"
#include "c10d/errors.h"

namespace c10d::inline v1::algorithms {
namespace {

using Buffers = std::vector<std::vector<std::int64_t>>;

// Rank r's input element i: distinct per rank and element, so a block reduced twice or from the
// wrong place shows.
std::int64_t input(int r, std::int64_t i) { return (r + 1) * 1000003 + i * 7; }

Buffers inputs(int n, std::int64_t count) {
  Buffers b(static_cast<std::size_t>(n),
            std::vector<std::int64_t>(static_cast<std::size_t>(count)));
  for (int r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < count; ++i) b[r][i] = input(r, i);
  }
  return b;
}

std::int64_t total(int n, std::int64_t i) {
  std::int64_t s = 0;
  for (int r = 0; r < n; ++r) s += input(r, i);
  return s;
}

void reduce(std::vector<std::int64_t>& acc, const std::vector<std::int64_t>& in, Block b) {
  for (std::int64_t i = b.offset; i < b.offset + b.count; ++i) acc[i] += in[i];
}

void copy(std::vector<std::int64_t>& dst, const std::vector<std::int64_t>& src, Block b) {
  for (std::int64_t i = b.offset; i < b.offset + b.count; ++i) dst[i] = src[i];
}

TEST(BlockTest, BlocksTileTheBufferAndDifferByAtMostOne) {
  for (std::int64_t count : {0, 1, 7, 8, 1000, 1 << 20}) {
    for (int n = 1; n <= 9; ++n) {
      std::int64_t next = 0;
      for (int r = 0; r < n; ++r) {
        Block b = block_of(count, n, r);
        EXPECT_EQ(b.offset, next);
        EXPECT_LE(b.count, count / n + 1);
        EXPECT_GE(b.count, count / n);
        next += b.count;
      }
      EXPECT_EQ(next, count);
    }
  }
}

TEST(RingPatternTest, NeighboursFollowTheOrder) {
  RingPattern p({2, 0, 3, 1}, 3, 100);
  EXPECT_EQ(p.position(), 2);
  EXPECT_EQ(p.right(), 1);
  EXPECT_EQ(p.left(), 0);
  EXPECT_THROW(RingPattern({0, 0, 1}, 0, 10), InvalidArgument);
  EXPECT_THROW(RingPattern({0, 1}, 2, 10), InvalidArgument);
}

// Runs reduce-scatter then all-gather on simulated ranks with the given ring order.
void run_ring(const std::vector<int>& order, std::int64_t count) {
  const int n = static_cast<int>(order.size());
  std::vector<RingPattern> pats;
  for (int r = 0; r < n; ++r) pats.emplace_back(order, r, count);
  Buffers buf = inputs(n, count);
  for (int s = 0; s < n - 1; ++s) {
    Buffers sent = buf;  // every rank sends what it held at the start of the step
    for (int r = 0; r < n; ++r) {
      const RingPattern& p = pats[r];
      const Block got = p.reduce_scatter_recv(s);
      // The left neighbour's send block at this step is the block we receive.
      const RingPattern& left = pats[p.left()];
      ASSERT_EQ(left.reduce_scatter_send(s).offset, got.offset);
      reduce(buf[r], sent[p.left()], got);
    }
  }
  for (int r = 0; r < n; ++r) {
    const Block own = pats[r].own();
    EXPECT_EQ(own.offset, block_of(count, n, r).offset) << "rank " << r << " owns its own block";
    for (std::int64_t i = own.offset; i < own.offset + own.count; ++i) {
      ASSERT_EQ(buf[r][i], total(n, i)) << "rank " << r << " element " << i;
    }
  }
  for (int s = 0; s < n - 1; ++s) {
    Buffers sent = buf;
    for (int r = 0; r < n; ++r) {
      const RingPattern& p = pats[r];
      ASSERT_EQ(pats[p.left()].all_gather_send(s).offset, p.all_gather_recv(s).offset);
      copy(buf[r], sent[p.left()], p.all_gather_recv(s));
    }
  }
  for (int r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(buf[r][i], total(n, i));
  }
}

TEST(RingPatternTest, ReduceScatterThenAllGatherGivesTheSumForEveryWorldSize) {
  for (int n = 1; n <= 8; ++n) {
    for (std::int64_t count : {0, 1, 7, 1000}) {
      std::vector<int> order(n);
      std::iota(order.begin(), order.end(), 0);
      run_ring(order, count);
    }
  }
}

TEST(RingPatternTest, AReorderedRingStillLeavesEachRankItsOwnBlock) {
  run_ring({3, 1, 4, 0, 2}, 1001);
  run_ring({5, 4, 3, 2, 1, 0}, 37);
}

void run_halving_doubling(int n, std::int64_t count) {
  std::vector<HalvingDoublingPattern> pats;
  for (int r = 0; r < n; ++r) pats.emplace_back(n, r, count);
  Buffers buf = inputs(n, count);
  const Block all{0, count};
  // Fold.
  Buffers sent = buf;
  for (int r = 0; r < n; ++r) {
    if (pats[r].fold_role() == HalvingDoublingPattern::FoldRole::kReceive) {
      ASSERT_EQ(pats[pats[r].fold_peer()].fold_peer(), r);
      reduce(buf[r], sent[pats[r].fold_peer()], all);
    }
  }
  const int steps = pats[0].steps();
  for (int k = 0; k < steps; ++k) {
    sent = buf;
    for (int r = 0; r < n; ++r) {
      if (!pats[r].participates()) continue;
      const auto e = pats[r].halving_step(k);
      const auto mirror = pats[e.peer].halving_step(k);
      ASSERT_EQ(mirror.peer, r);
      ASSERT_EQ(mirror.send.offset, e.recv.offset);
      ASSERT_EQ(mirror.send.count, e.recv.count);
      reduce(buf[r], sent[e.peer], e.recv);
    }
  }
  for (int r = 0; r < n; ++r) {
    if (!pats[r].participates()) continue;
    const Block own = pats[r].owned();
    for (std::int64_t i = own.offset; i < own.offset + own.count; ++i) {
      ASSERT_EQ(buf[r][i], total(n, i)) << "n " << n << " rank " << r << " element " << i;
    }
  }
  for (int k = 0; k < steps; ++k) {
    sent = buf;
    for (int r = 0; r < n; ++r) {
      if (!pats[r].participates()) continue;
      const auto e = pats[r].doubling_step(k);
      copy(buf[r], sent[e.peer], e.recv);
    }
  }
  // Unfold.
  sent = buf;
  for (int r = 0; r < n; ++r) {
    if (pats[r].fold_role() == HalvingDoublingPattern::FoldRole::kSendAndSitOut) {
      copy(buf[r], sent[pats[r].fold_peer()], all);
    }
  }
  for (int r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < count; ++i) ASSERT_EQ(buf[r][i], total(n, i)) << "n " << n;
  }
}

TEST(HalvingDoublingPatternTest, GivesTheSumForEveryWorldSizeNotOnlyPowersOfTwo) {
  for (int n = 1; n <= 13; ++n) {
    for (std::int64_t count : {0, 1, 7, 1000}) run_halving_doubling(n, count);
  }
}

TEST(HalvingDoublingPatternTest, FoldPairsAndVirtualRanks) {
  HalvingDoublingPattern p(6, 0, 10);  // pof2 4, rem 2: ranks 0..3 fold in pairs
  EXPECT_EQ(p.pof2(), 4);
  EXPECT_EQ(p.rem(), 2);
  EXPECT_FALSE(p.participates());
  EXPECT_EQ(HalvingDoublingPattern(6, 1, 10).vrank(), 0);
  EXPECT_EQ(HalvingDoublingPattern(6, 3, 10).vrank(), 1);
  EXPECT_EQ(HalvingDoublingPattern(6, 4, 10).vrank(), 2);
  EXPECT_EQ(HalvingDoublingPattern(6, 5, 10).vrank(), 3);
  EXPECT_EQ(p.real_rank(1), 3);
  EXPECT_THROW(HalvingDoublingPattern(4, 4, 10), InvalidArgument);
}

}  // namespace
}  // namespace c10d::inline v1::algorithms
