// The multi-axis all_reduce's split of its vector among its lanes (axis_shares.h): shares in
// proportion to what each lane's first axis carries, so the lanes' large phases end together;
// whole element counts that add up exactly; and where a stage per phase pays for its latency.
#include "backends/tpu_ici/axis_shares.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <string>

#include "c10d/errors.h"

namespace c10d::inline v1::tpu_ici {
namespace {

double sum_of(const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }

// The time each lane's first phase keeps its axis busy, per byte of the vector (units of 1/W).
std::vector<double> first_phase_times(const std::vector<AxisRing>& axes) {
  const std::vector<double> shares = axis_shares(axes);
  std::vector<double> times;
  for (std::size_t i = 0; i < axes.size(); ++i) times.push_back(shares[i] * ring_cost(axes[i]));
  return times;
}

void expect_first_phases_end_together(const std::vector<AxisRing>& axes) {
  const std::vector<double> times = first_phase_times(axes);
  for (std::size_t i = 1; i < times.size(); ++i) {
    EXPECT_NEAR(times[i], times[0], 1e-12) << "lane " << i;
  }
  EXPECT_NEAR(sum_of(axis_shares(axes)), 1.0, 1e-12);
}

TEST(AxisSharesTest, ARingCostsWhatItsLinksCarryPerByte) {
  // Bidirectional: (X-1)/X; folded (no wraparound, or 2 chips): twice that.
  EXPECT_DOUBLE_EQ(ring_cost({16, true}), 15.0 / 16);
  EXPECT_DOUBLE_EQ(ring_cost({24, true}), 23.0 / 24);
  EXPECT_DOUBLE_EQ(ring_cost({6, false}), 2 * 5.0 / 6);
  EXPECT_DOUBLE_EQ(ring_cost({2, true}), 1.0);  // an axis of 2 never wraps
  EXPECT_DOUBLE_EQ(ring_cost({2, false}), 1.0);
}

TEST(AxisSharesTest, EqualAxesShareEqually) {
  for (const auto& axes :
       {std::vector<AxisRing>{{8, true}, {8, true}, {8, true}},
        std::vector<AxisRing>{{4, true}, {4, true}, {4, true}},
        std::vector<AxisRing>{{2, true}, {2, true}}, std::vector<AxisRing>{{5, false}}}) {
    const std::vector<double> shares = axis_shares(axes);
    ASSERT_EQ(shares.size(), axes.size());
    for (double s : shares) EXPECT_NEAR(s, 1.0 / static_cast<double>(axes.size()), 1e-12);
  }
}

TEST(AxisSharesTest, V5p16x16x24GivesTheLongAxisALittleLess) {
  const std::vector<AxisRing> axes{{16, true}, {16, true}, {24, true}};
  const std::vector<double> shares = axis_shares(axes);
  // In proportion to 16/15, 16/15, 24/23.
  const double sum = 16.0 / 15 + 16.0 / 15 + 24.0 / 23;
  EXPECT_NEAR(shares[0], 16.0 / 15 / sum, 1e-12);
  EXPECT_NEAR(shares[1], 16.0 / 15 / sum, 1e-12);
  EXPECT_NEAR(shares[2], 24.0 / 23 / sum, 1e-12);
  EXPECT_LT(shares[2], shares[0]);
  expect_first_phases_end_together(axes);
}

TEST(AxisSharesTest, UnequalAndDegenerateAxesEndTheirFirstPhasesTogether) {
  int i = 0;
  for (const auto& axes : {std::vector<AxisRing>{{4, true}, {4, true}, {8, true}},
                           std::vector<AxisRing>{{2, false}, {8, true}},
                           std::vector<AxisRing>{{2, true}, {2, true}, {64, true}},
                           std::vector<AxisRing>{{3, true}, {6, false}, {2, false}},
                           std::vector<AxisRing>{{16, true}, {24, true}}}) {
    SCOPED_TRACE("case " + std::to_string(i++));
    expect_first_phases_end_together(axes);
  }
  // 2x8 (v5p: the axis of 2 does not wrap): costs 1 and 7/8, so shares 7/15 and 8/15.
  const std::vector<double> shares = axis_shares(std::vector<AxisRing>{{2, false}, {8, true}});
  EXPECT_NEAR(shares[0], 7.0 / 15, 1e-12);
  EXPECT_NEAR(shares[1], 8.0 / 15, 1e-12);
}

TEST(AxisSharesTest, APhaseTakesHalfABidirectionalRingOrAFoldedOnesTwoHopSteps) {
  EXPECT_EQ(ring_steps({16, true}), 8);
  EXPECT_EQ(ring_steps({24, true}), 12);
  EXPECT_EQ(ring_steps({5, true}), 2);
  EXPECT_EQ(step_hops({24, true}), 1);
  EXPECT_EQ(ring_steps({2, true}), 1);  // an axis of 2 never wraps: one step, one hop
  EXPECT_EQ(step_hops({2, true}), 1);
  EXPECT_EQ(ring_steps({6, false}), 5);  // folded: 0 2 4 5 3 1, edges of up to 2 hops
  EXPECT_EQ(step_hops({6, false}), 2);
}

// v5p: 9e10 B/s one way, 1 us per hop.
bool staged(const std::vector<AxisRing>& axes, double bytes, double bandwidth = 9e10) {
  return stage_per_phase(axes, axis_shares(axes), bytes, bandwidth, 1e-6);
}

TEST(AxisSharesTest, UnequalAxesStageEachPhaseOnlyWhereTheBandwidthTermPaysForIt) {
  // 16x16x24: 72 hops staged against 56 in lock step, E L = 16 us; the staged bandwidth term is
  // about 0.672 of the vector over W = 180 GB/s, so the crossing 2 E L = 32 us is near 8 MiB.
  const std::vector<AxisRing> v5p{{16, true}, {16, true}, {24, true}};
  EXPECT_FALSE(staged(v5p, 1 << 10));
  EXPECT_FALSE(staged(v5p, 4 << 20));
  EXPECT_TRUE(staged(v5p, 16 << 20));
  EXPECT_TRUE(staged(v5p, 1 << 30));
  // 2x8: the axis of 2 takes 1 hop, the ring of 8 takes 4; E L = 6 us.
  const std::vector<AxisRing> two_by_eight{{2, false}, {8, true}};
  EXPECT_FALSE(staged(two_by_eight, 512 << 10));
  EXPECT_TRUE(staged(two_by_eight, 4 << 20));
  // v5e 8x16: the folded ring of 8 takes 7 steps of 2 hops; in lock step its steps meet the
  // ring of 16's, so lock step takes more hops than the stages (58 against 56).
  EXPECT_TRUE(staged({{8, false}, {16, true}}, 1 << 10, 4.5e10));
}

TEST(AxisSharesTest, EqualAxesAlwaysStageEachPhase) {
  for (double bytes : {0.0, 1024.0, 1e9}) {
    EXPECT_TRUE(staged({{8, true}, {8, true}, {8, true}}, bytes));
    EXPECT_TRUE(staged({{4, true}, {4, true}}, bytes));
  }
}

TEST(AxisSharesTest, AnAxisOfOneChipHasNoRing) {
  EXPECT_THROW(axis_shares(std::vector<AxisRing>{{16, true}, {1, false}}), InvalidArgument);
  EXPECT_TRUE(axis_shares({}).empty());
}

TEST(AxisSharesTest, SplitCountsAddUpAndStayWithinOneOfTheirShare) {
  const std::vector<double> shares =
      axis_shares(std::vector<AxisRing>{{16, true}, {16, true}, {24, true}});
  for (std::int64_t count : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}, std::int64_t{3},
                             std::int64_t{1037}, std::int64_t{268435456}, std::int64_t{1} << 40}) {
    const std::vector<std::int64_t> counts = split_by_shares(count, shares);
    ASSERT_EQ(counts.size(), shares.size());
    EXPECT_EQ(std::accumulate(counts.begin(), counts.end(), std::int64_t{0}), count);
    for (std::size_t i = 0; i < counts.size(); ++i) {
      EXPECT_GE(counts[i], 0);
      EXPECT_LE(std::abs(static_cast<double>(counts[i]) - shares[i] * static_cast<double>(count)),
                1.0)
          << "count " << count << " lane " << i;
    }
  }
}

TEST(AxisSharesTest, LeftoverElementsGoToTheLargestRemaindersLowestLaneFirst) {
  // 4 x (0.25, 0.375, 0.375) = 1, 1.5, 1.5: floors 1, 1, 1; one left, lanes 1 and 2 tie.
  EXPECT_EQ(split_by_shares(4, std::vector<double>{0.25, 0.375, 0.375}),
            (std::vector<std::int64_t>{1, 2, 1}));
  // 10 x (0.125, 0.375, 0.5) = 1.25, 3.75, 5: the largest remainder first.
  EXPECT_EQ(split_by_shares(10, std::vector<double>{0.125, 0.375, 0.5}),
            (std::vector<std::int64_t>{1, 4, 5}));
  // 2 over three equal shares: one each to lanes 0 and 1.
  EXPECT_EQ(split_by_shares(2, std::vector<double>{1.0 / 3, 1.0 / 3, 1.0 / 3}),
            (std::vector<std::int64_t>{1, 1, 0}));
  EXPECT_EQ(split_by_shares(7, std::vector<double>{1.0}), (std::vector<std::int64_t>{7}));
  EXPECT_THROW(split_by_shares(-1, std::vector<double>{1.0}), InvalidArgument);
}

}  // namespace
}  // namespace c10d::inline v1::tpu_ici
