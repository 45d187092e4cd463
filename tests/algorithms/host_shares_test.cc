// The per-host shares of the hierarchical all_reduce's cross rings (algorithms/host_shares.h).
#include "algorithms/host_shares.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "c10d/errors.h"

namespace c10d::inline v1::algorithms {
namespace {

double fraction(const std::vector<std::int64_t>& s, std::size_t i) {
  return static_cast<double>(s[i]) /
         static_cast<double>(std::accumulate(s.begin(), s.end(), std::int64_t{0}));
}

TEST(HostSharesTest, EdgeRatesAreTheSlowerOfTheTwoLinksTheyCross) {
  EXPECT_EQ(ring_edge_rates({2, 2, 0.5}), (std::vector<double>{2, 0.5, 0.5}));
  EXPECT_EQ(ring_edge_rates({1, 3}), (std::vector<double>{1, 1}));
  EXPECT_THROW(ring_edge_rates({1, 0}), InvalidArgument);
}

TEST(HostSharesTest, EqualRatesKeepEqualSharesExactly) {
  for (int h = 1; h <= 8; ++h) {
    EXPECT_TRUE(balanced_shares(std::vector<double>(static_cast<std::size_t>(h), 3.0)).empty());
  }
}

TEST(HostSharesTest, TwoHostsCannotBeHelped) {
  // Each edge carries (1 - s0) + (1 - s1) = 1 chunk whatever the shares.
  EXPECT_TRUE(balanced_shares({1, 4}).empty());
  EXPECT_DOUBLE_EQ(ring_time({1, 3}, {1, 4}), ring_time({}, {1, 4}));
}

TEST(HostSharesTest, OneSlowHostOfThreeOwnsEverythingAndTheRingTakesThreeQuarters) {
  // Links 2, 2, 0.5 both ways: edges 2, 0.5, 0.5. Equal shares: the slow edges carry 4/3 chunk
  // each (8/3 time units). The exact equaliser would give host 0 a share of -1/3: clamped to 0,
  // host 2 takes everything and each slow edge carries one chunk (2 time units), the least any
  // split allows (host 2 must send and receive a chunk over its 0.5 link).
  const std::vector<double> e = ring_edge_rates({2, 2, 0.5});
  const auto s = balanced_shares(e);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_NEAR(fraction(s, 0), 0.0, 1e-4);
  EXPECT_NEAR(fraction(s, 2), 1.0, 0.01);
  EXPECT_NEAR(ring_time({}, e), 8.0 / 3, 1e-12);
  EXPECT_NEAR(ring_time(s, e), 2.0, 1e-3);
}

TEST(HostSharesTest, WhereNoShareClampsEveryEdgeTakesTheSameTime) {
  // Four hosts, one link at 0.6 of the rest: a mild imbalance that an interior solution meets.
  const std::vector<double> e = ring_edge_rates({1, 1, 1, 0.6});
  const auto s = balanced_shares(e);
  ASSERT_EQ(s.size(), 4u);
  const double t = ring_time(s, e);
  EXPECT_LT(t, ring_time({}, e) * (1 - kMinShareGain));
  // Five hosts with distinct rates: no edge takes longer than t, and no split does better.
  const std::vector<double> e5{1.0, 0.9, 0.3, 1.2, 0.6};
  const auto s5 = balanced_shares(e5);
  ASSERT_EQ(s5.size(), 5u);
  const double t5 = ring_time(s5, e5);
  double sum = 0;
  for (std::size_t p = 0; p < 5; ++p) {
    const double v = 2 - fraction(s5, p) - fraction(s5, (p + 1) % 5);
    EXPECT_LE(v / e5[p], t5 + 1e-6);
    sum += fraction(s5, p);
    EXPECT_GE(fraction(s5, p), 0.0);
  }
  EXPECT_NEAR(sum, 1.0, 1e-9);
  // No other split of a grid does better (the LP's optimum, checked by brute force).
  double best = ring_time({}, e5);
  for (int a = 0; a <= 20; ++a) {
    for (int b = 0; a + b <= 20; ++b) {
      for (int c = 0; a + b + c <= 20; ++c) {
        for (int d = 0; a + b + c + d <= 20; ++d) {
          best = std::min(best, ring_time({a, b, c, d, 20 - a - b - c - d}, e5));
        }
      }
    }
  }
  EXPECT_LE(t5, best + 1e-6);
}

TEST(HostSharesTest, SmallGainsKeepEqualSharesAndNoiseDoesNotFlipThem) {
  EXPECT_TRUE(balanced_shares({1.0, 1.0, 0.97}).empty());
  const std::vector<double> e = ring_edge_rates({2, 2, 0.5});
  const auto s = next_shares({}, e);
  ASSERT_FALSE(s.empty());
  // A few percent of noise either way keeps what the group has.
  EXPECT_EQ(next_shares(s, {2.1, 0.48, 0.52}), s);
  EXPECT_EQ(next_shares({}, {1.0, 0.97, 1.02}), std::vector<std::int64_t>{});
  // Links that became equal return to equal shares.
  EXPECT_EQ(next_shares(s, {1.0, 1.0, 1.0}), std::vector<std::int64_t>{});
}

TEST(HostSharesTest, RatesParseWithUnitsOrAsWeights) {
  EXPECT_EQ(parse_host_rates("V", "2gbit,2gbit,500mbit", 3), (std::vector<double>{2e9, 2e9, 5e8}));
  EXPECT_EQ(parse_host_rates("V", "1,1.5", 2), (std::vector<double>{1, 1.5}));
  EXPECT_THROW(parse_host_rates("V", "1,2", 3), InvalidArgument);
  EXPECT_THROW(parse_host_rates("V", "1,0", 2), InvalidArgument);
  EXPECT_THROW(parse_host_rates("V", "1,2x", 2), InvalidArgument);
  EXPECT_THROW(parse_host_rates("V", "1,", 2), InvalidArgument);
  EXPECT_THROW(parse_host_rates("V", "gbit,1", 2), InvalidArgument);
}

}  // namespace
}  // namespace c10d::algorithms
