// Torus arithmetic: parsing and presets, neighbours and wraparound, dimension-order routes and
// detours around down links, the torus ring order.
#include "backends/tpu_ici/topology.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "c10d/errors.h"

namespace c10d::inline v1::tpu_ici {
namespace {

TEST(TopologyTest, ParsesAxisSizes) {
  std::vector<int> dims;
  EXPECT_EQ(parse_dims("4x4x4", dims), "");
  EXPECT_EQ(dims, (std::vector<int>{4, 4, 4}));
  EXPECT_EQ(parse_dims("8", dims), "");
  EXPECT_EQ(dims, (std::vector<int>{8}));
  EXPECT_NE(parse_dims("4xx2", dims), "");
  EXPECT_NE(parse_dims("0x2", dims), "");
  EXPECT_NE(parse_dims("", dims), "");
}

TEST(TopologyTest, PresetsSetBandwidthAndWraparound) {
  const Torus v4 = make_torus({.preset = "v4", .topology = "4x4x2"}, 32);
  EXPECT_EQ(v4.link_bandwidth(), 4.5e10);
  EXPECT_EQ(v4.hop_latency(), 1e-6);
  EXPECT_TRUE(v4.wraps(0));
  EXPECT_FALSE(v4.wraps(2));
  const Torus v5e = make_torus({.preset = "v5e", .topology = "8x16"}, 128);
  EXPECT_FALSE(v5e.wraps(0));
  EXPECT_TRUE(v5e.wraps(1));
  const Torus v5p = make_torus({.preset = "v5p", .topology = "4x4x8"}, 128);
  EXPECT_EQ(v5p.link_bandwidth(), 9e10);
  EXPECT_TRUE(v5p.wraps(2));
  const Torus custom = make_torus({.preset = "v5p",
                                   .topology = "4x4",
                                   .wrap = "0,1",
                                   .link_bandwidth = 1e9,
                                   .hop_latency = 2e-6},
                                  16);
  EXPECT_FALSE(custom.wraps(0));
  EXPECT_TRUE(custom.wraps(1));
  EXPECT_EQ(custom.link_bandwidth(), 1e9);
  EXPECT_EQ(custom.hop_latency(), 2e-6);
}

TEST(TopologyTest, RejectsWhatASliceCannotBe) {
  EXPECT_THROW(make_torus({.topology = "2x4"}, 6), InvalidArgument);
  EXPECT_THROW(make_torus({.preset = "v5e", .topology = "32x2"}, 64), InvalidArgument);
  EXPECT_THROW(make_torus({.preset = "v5e", .topology = "2x2x2"}, 8), InvalidArgument);
  EXPECT_THROW(make_torus({.preset = "v6"}, 4), InvalidArgument);
  EXPECT_THROW(make_torus({.topology = "4x4", .wrap = "1"}, 16), InvalidArgument);
  EXPECT_THROW(make_torus({.topology = "4x4", .down_links = "0-5"}, 16), InvalidArgument);
  EXPECT_NO_THROW(make_torus({}, 5));  // a 1-D ring of the world size
}

TEST(TopologyTest, NeighboursWrapOnlyWhereTheAxisWraps) {
  const Torus t({4, 3}, {true, false}, 1e9, 1e-6);
  EXPECT_EQ(t.coords(7), (std::vector<int>{3, 1}));
  EXPECT_EQ(t.rank_of({3, 1}), 7);
  EXPECT_EQ(t.neighbour(3, 0, +1), 0);  // wraps
  EXPECT_EQ(t.neighbour(0, 0, -1), 3);
  EXPECT_EQ(t.neighbour(8, 1, +1), -1);  // axis 1 does not
  EXPECT_EQ(t.neighbour(0, 1, -1), -1);
  EXPECT_EQ(t.neighbour(0, 1, +1), 4);
  const Torus pair({2}, {true}, 1e9, 1e-6);  // two chips never wrap: one link each way
  EXPECT_FALSE(pair.wraps(0));
  EXPECT_EQ(pair.neighbour(0, 0, +1), 1);
  EXPECT_EQ(pair.neighbour(0, 0, -1), -1);
}

TEST(TopologyTest, RoutesInDimensionOrderTheShortWayRound) {
  const Torus t({8, 4}, {true, true}, 1e9, 1e-6);
  // (0,0) -> (6,1): axis 0 goes - twice (wrapping), then axis 1 + once.
  EXPECT_EQ(t.route(0, t.rank_of({6, 1})),
            (std::vector<Hop>{make_hop(0, -1), make_hop(0, -1), make_hop(1, +1)}));
  // A tie (4 either way) goes +.
  EXPECT_EQ(t.route(0, 4), std::vector<Hop>(4, make_hop(0, +1)));
  EXPECT_TRUE(t.route(5, 5).empty());
}

TEST(TopologyTest, RoutesAroundADownLinkOrNamesIt) {
  Torus ring({6}, {true}, 1e9, 1e-6);
  ring.set_link_down(1, 2);
  // 1 -> 2 now goes the long way: 1 -> 0 -> 5 -> 4 -> 3 -> 2.
  EXPECT_EQ(ring.route(1, 2), std::vector<Hop>(5, make_hop(0, -1)));
  Torus line({6}, {false}, 1e9, 1e-6);
  line.set_link_down(2, 3);
  try {
    line.route(0, 5);
    FAIL() << "expected NetworkError";
  } catch (const NetworkError& e) {
    EXPECT_NE(std::string(e.what()).find("link (2)->(3) (rank 2 -> rank 3, axis 0 +) is down"),
              std::string::npos)
        << e.what();
  }
  Torus grid({3, 3}, {false, false}, 1e9, 1e-6);
  grid.set_link_down(0, 1);
  // (0,0) -> (2,1) takes axis 1 first instead: 3 hops, avoiding 0->1.
  const auto detour = grid.route(0, grid.rank_of({2, 1}));
  EXPECT_EQ(detour.size(), 3u);
  EXPECT_EQ(detour.front(), make_hop(1, +1));
}

TEST(TopologyTest, RingOrderStepsBetweenNeighbours) {
  const Torus t({4, 3, 2}, {true, false, false}, 1e9, 1e-6);
  const auto order = t.ring_order();
  ASSERT_EQ(order.size(), 24u);
  std::vector<bool> seen(24, false);
  for (std::size_t i = 0; i < order.size(); ++i) {
    seen[static_cast<std::size_t>(order[i])] = true;
    if (i + 1 < order.size()) {
      EXPECT_EQ(t.route(order[i], order[i + 1]).size(), 1u) << i;
    }
  }
  EXPECT_EQ(std::count(seen.begin(), seen.end(), true), 24);
}

}  // namespace
}  // namespace c10d::inline v1::tpu_ici
