// The hierarchical collectives (hierarchical.h) over the in-process transport with pretend hosts
// (InProcWorld's host map), every rank a thread: 2 hosts of 2 ranks, 3 of 2, 2 of 3, and hosts
// whose ranks interleave; counts 0, 1, odd and large; the all_reduce both ways (through the
// hosts' leaders, and in rings); every reduce op on float32 and integers, unequal host shares,
// every root, in-place forms. And the host maps transports report.
#include "algorithms/hierarchical.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "algorithms/choice.h"
#include "c10d/errors.h"
#include "ranks.h"
#include "transport/inproc_transport.h"
#include "transport/sub_transport.h"

namespace c10d::inline v1::algorithms {
namespace {

using testing::context;
using testing::expected;
using testing::value;

// 2x2, 3x2, 2x3, and 2x2 with each host's ranks apart.
const std::vector<std::vector<int>> kLayouts = {
    {0, 0, 1, 1}, {0, 0, 1, 1, 2, 2}, {0, 0, 0, 1, 1, 1}, {0, 1, 0, 1}};

std::string name(const std::vector<int>& hosts) {
  std::string s;
  for (int h : hosts) s += std::to_string(h);
  return s;
}

// Runs fn(rank, transport, layout) on a thread per rank of a world with host map `hosts`.
void run_hosts(const std::vector<int>& hosts,
               const std::function<void(int, transport::Transport&, const HostLayout&)>& fn) {
  const int n = static_cast<int>(hosts.size());
  auto world = std::make_shared<transport::InProcWorld>(n, hosts);
  testing::run_ranks(
      n, [&](int r) { return std::make_unique<transport::InProcTransport>(world, r); },
      [&](int r, transport::Transport& t) { fn(r, t, HostLayout(t.host_of_rank())); });
}

template <typename T>
void check_all_reduce(const std::vector<int>& hosts, std::int64_t count, DType dtype, ReduceOp op,
                      const std::vector<std::int64_t>& shares = {}, int pieces = 0,
                      HierRoute route = HierRoute::kRings) {
  const int n = static_cast<int>(hosts.size());
  std::vector<std::vector<T>> out(n);
  run_hosts(hosts, [&](int r, transport::Transport& t, const HostLayout& layout) {
    std::vector<T> data(static_cast<std::size_t>(count));
    for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(value(r, i));
    hier_all_reduce(context(t), layout, dtype, {op, 0.5}, data.data(), count, shares, pieces,
                    route);
    out[r] = std::move(data);
  });
  for (int r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < count; ++i) {
      const double expect = expected(op, n, i);
      ASSERT_NEAR(static_cast<double>(out[r][i]), expect, 1e-5 * std::abs(expect))
          << "hosts " << name(hosts) << " count " << count << " rank " << r << " i " << i << " op "
          << reduce_op_name(op) << " dtype " << dtype_name(dtype) << " pieces " << pieces
          << " route " << static_cast<int>(route);
    }
  }
}

TEST(HierAllReduceTest, ClosedFormsForEveryLayoutCountAndOpBothWays) {
  for (const HierRoute route : {HierRoute::kRings, HierRoute::kLeaders}) {
    for (const auto& hosts : kLayouts) {
      for (std::int64_t count : {0, 1, 7, 1001}) {
        for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
          check_all_reduce<float>(hosts, count, DType::kFloat32, op, {}, 0, route);
        }
        check_all_reduce<std::int32_t>(hosts, count, DType::kInt32, ReduceOp::kSum, {}, 0, route);
        check_all_reduce<std::int64_t>(hosts, count, DType::kInt64, ReduceOp::kMax, {}, 0, route);
      }
    }
  }
}

// By size: the leaders up to kHierLeadersMaxBytes, the rings from one element more; the leaders
// from a count past recursive doubling's (halving-doubling between them).
TEST(HierAllReduceTest, BySizeAroundTheLeadersLimit) {
  const std::int64_t limit = kHierLeadersMaxBytes / 4;
  for (const auto& hosts : {kLayouts[0], kLayouts[1]}) {
    for (std::int64_t count : {limit, limit + 1}) {
      check_all_reduce<float>(hosts, count, DType::kFloat32, ReduceOp::kAvg, {}, 0,
                              HierRoute::kBySize);
    }
  }
}

TEST(HierAllReduceTest, LargeCountsRunTheRingsSegmentedPipeline) {
  // 3 MiB of float64 over 3x2: each cross piece spans several 1 MiB segments.
  check_all_reduce<double>({0, 0, 1, 1, 2, 2}, 3 << 17, DType::kFloat64, ReduceOp::kSum);
}

TEST(HierAllReduceTest, PiecesRunAsAPipelineWithTheSameResult) {
  EXPECT_EQ(hier_pieces(0), 1);
  EXPECT_EQ(hier_pieces(2 * kHierPieceBytes - 1), 1);
  EXPECT_EQ(hier_pieces(2 * kHierPieceBytes), 2);
  EXPECT_EQ(hier_pieces(std::int64_t{1} << 40), kHierMaxPieces);
  for (const auto& hosts : kLayouts) {
    // Fewer elements than pieces run unpiped; 1001 leaves pieces of unequal counts.
    for (std::int64_t count : {0, 1, 7, 1001}) {
      for (int pieces : {2, 3, 8}) {
        check_all_reduce<float>(hosts, count, DType::kFloat32, ReduceOp::kAvg, {}, pieces);
        check_all_reduce<std::int64_t>(hosts, count, DType::kInt64, ReduceOp::kMax, {}, pieces);
      }
    }
    check_all_reduce<float>(hosts, 1001, DType::kFloat32, ReduceOp::kPremulSum, {}, 4);
  }
  check_all_reduce<float>({0, 0, 1, 1, 2, 2}, 1001, DType::kFloat32, ReduceOp::kSum, {5, 0, 2}, 3);
  // 6 MiB of float64 on 2x2 in 3 pieces of several ring segments each.
  check_all_reduce<double>({0, 0, 1, 1}, 3 << 18, DType::kFloat64, ReduceOp::kSum, {}, 3);
}

// A rank that never joins: every other rank's pipeline ends at the deadline with an error, its
// second thread joined, whether its first failure is on the network or the local side.
TEST(HierAllReduceTest, APipelineWithAMissingRankFailsAtTheDeadline) {
  run_hosts({0, 0, 1, 1}, [&](int r, transport::Transport& t, const HostLayout& layout) {
    if (r == 3) return;
    std::vector<float> data(4096, 1.0F);
    EXPECT_THROW(hier_all_reduce(context(t, 1, std::chrono::milliseconds(300)), layout,
                                 DType::kFloat32, {}, data.data(), 4096, {}, 4),
                 Error)
        << "rank " << r;
  });
}

TEST(HierAllReduceTest, UnequalHostSharesGiveTheSameResult) {
  for (std::int64_t count : {0, 1, 7, 1001}) {
    check_all_reduce<float>({0, 0, 1, 1}, count, DType::kFloat32, ReduceOp::kSum, {1, 3});
    check_all_reduce<float>({0, 0, 1, 1, 2, 2}, count, DType::kFloat32, ReduceOp::kAvg, {5, 0, 2});
  }
}

TEST(HierAllGatherTest, EveryRanksBlockLandsInRankOrderInPlaceOrNot) {
  for (const auto& hosts : kLayouts) {
    const int n = static_cast<int>(hosts.size());
    for (std::int64_t block : {0, 1, 7, 1000}) {
      for (bool in_place : {false, true}) {
        std::vector<std::vector<std::byte>> out(n);
        run_hosts(hosts, [&](int r, transport::Transport& t, const HostLayout& layout) {
          std::vector<std::byte> in(static_cast<std::size_t>(block));
          std::vector<std::byte> o(static_cast<std::size_t>(n * block), std::byte{0xee});
          for (std::int64_t i = 0; i < block; ++i) {
            in[i] = o[r * block + i] = static_cast<std::byte>(r * 31 + i);
          }
          const std::span<const std::byte> own =
              in_place ? std::span<const std::byte>(o.data() + r * block, in.size())
                       : std::span<const std::byte>(in);
          hier_all_gather(context(t), layout, own, o);
          out[r] = std::move(o);
        });
        for (int r = 0; r < n; ++r) {
          for (int s = 0; s < n; ++s) {
            for (std::int64_t i = 0; i < block; ++i) {
              ASSERT_EQ(out[r][s * block + i], static_cast<std::byte>(s * 31 + i))
                  << "hosts " << name(hosts) << " block " << block << " rank " << r << " from "
                  << s;
            }
          }
        }
      }
    }
  }
}

// Rank r's element i of its block for rank d.
double rs_value(int r, int d, std::int64_t i) { return (r + 1) + static_cast<double>((d + i) % 5); }

template <typename T>
void check_reduce_scatter(const std::vector<int>& hosts, std::int64_t count, DType dtype,
                          ReduceOp op, bool in_place) {
  const int n = static_cast<int>(hosts.size());
  std::vector<std::vector<T>> out(n);
  std::vector<char> kept(n);
  run_hosts(hosts, [&](int r, transport::Transport& t, const HostLayout& layout) {
    std::vector<std::vector<T>> in(n, std::vector<T>(static_cast<std::size_t>(count)));
    std::vector<const void*> blocks;
    for (int d = 0; d < n; ++d) {
      for (std::int64_t i = 0; i < count; ++i) in[d][i] = static_cast<T>(rs_value(r, d, i));
      blocks.push_back(in[d].data());
    }
    const auto before = in;
    std::vector<T> separate(static_cast<std::size_t>(count));
    T* o = in_place ? in[r].data() : separate.data();
    hier_reduce_scatter(context(t), layout, dtype, {op, 0.5}, blocks, o, count);
    out[r].assign(o, o + count);
    kept[r] = in_place || in == before;
  });
  for (int r = 0; r < n; ++r) {
    EXPECT_TRUE(kept[r]) << "rank " << r << " input changed";
    for (std::int64_t i = 0; i < count; ++i) {
      double sum = 0, max = 0;
      for (int q = 0; q < n; ++q) {
        sum += rs_value(q, r, i);
        max = std::max(max, rs_value(q, r, i));
      }
      const double expect = op == ReduceOp::kMax         ? max
                            : op == ReduceOp::kAvg       ? sum / n
                            : op == ReduceOp::kPremulSum ? 0.5 * sum
                                                         : sum;
      ASSERT_NEAR(static_cast<double>(out[r][i]), expect, 1e-6 * expect)
          << "hosts " << name(hosts) << " count " << count << " rank " << r << " i " << i << " op "
          << reduce_op_name(op) << (in_place ? " in place" : "");
    }
  }
}

TEST(HierReduceScatterTest, ClosedFormsForEveryLayoutCountAndOpInPlaceOrNot) {
  for (const auto& hosts : kLayouts) {
    for (std::int64_t count : {0, 1, 7, 1000}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
        check_reduce_scatter<float>(hosts, count, DType::kFloat32, op, false);
      }
      check_reduce_scatter<float>(hosts, count, DType::kFloat32, ReduceOp::kSum, true);
      check_reduce_scatter<std::int64_t>(hosts, count, DType::kInt64, ReduceOp::kSum, false);
    }
  }
}

TEST(HierBroadcastTest, EveryRootsBytesReachEveryRank) {
  for (const auto& hosts : kLayouts) {
    const int n = static_cast<int>(hosts.size());
    // The largest cuts chunks of 1.5 MiB at 2 ranks per host: the cross groups' chain.
    for (std::int64_t bytes : {0, 1, 7, 1001, 3 << 20}) {
      if (bytes == (3 << 20) && n > 4) continue;  // one layout is enough for the chain
      for (int root = 0; root < n; ++root) {
        std::vector<char> ok(n);
        run_hosts(hosts, [&](int r, transport::Transport& t, const HostLayout& layout) {
          std::vector<std::byte> data(static_cast<std::size_t>(bytes), std::byte{0});
          if (r == root) {
            for (std::int64_t i = 0; i < bytes; ++i) data[i] = static_cast<std::byte>(i * 7 + root);
          }
          hier_broadcast(context(t), layout, data, root);
          ok[r] = 1;
          for (std::int64_t i = 0; i < bytes; ++i) {
            if (data[i] != static_cast<std::byte>(i * 7 + root)) ok[r] = 0;
          }
        });
        for (int r = 0; r < n; ++r) {
          EXPECT_TRUE(ok[r]) << "hosts " << name(hosts) << " bytes " << bytes << " root " << root
                             << " rank " << r;
        }
      }
    }
  }
}

TEST(HierarchicalTest, ALayoutWithoutHierarchyFailsOnEveryRankBeforeAnyMessage) {
  for (const std::vector<int>& hosts : {std::vector<int>{0, 0, 0}, std::vector<int>{0, 0, 1}}) {
    run_hosts(hosts, [&](int, transport::Transport& t, const HostLayout& layout) {
      float x = 1;
      EXPECT_THROW(hier_all_reduce(context(t), layout, DType::kFloat32, {}, &x, 1),
                   InvalidArgument);
      std::vector<std::byte> in(1), out(3);
      EXPECT_THROW(hier_all_gather(context(t), layout, in, out), InvalidArgument);
      std::vector<std::byte> data(4);
      EXPECT_THROW(hier_broadcast(context(t), layout, data, 0), InvalidArgument);
    });
  }
  // A layout of another world.
  run_hosts({0, 0, 1, 1}, [&](int, transport::Transport& t, const HostLayout&) {
    float x = 1;
    EXPECT_THROW(
        hier_all_reduce(context(t), HostLayout({0, 0, 1, 1, 2, 2}), DType::kFloat32, {}, &x, 1),
        InvalidArgument);
  });
}

// Bad shares fail before PREMUL_SUM scales the data: the caller's tensor is as it was.
TEST(HierarchicalTest, BadSharesFailBeforeTheDataIsTouched) {
  run_hosts({0, 0, 1, 1}, [&](int, transport::Transport& t, const HostLayout& layout) {
    std::vector<float> data(64, 3.0F);
    EXPECT_THROW(hier_all_reduce(context(t), layout, DType::kFloat32, {ReduceOp::kPremulSum, 0.5},
                                 data.data(), 64, {1, 2, 3}),
                 InvalidArgument);
    EXPECT_EQ(data, std::vector<float>(64, 3.0F));
  });
}

TEST(HostMapTest, TransportsSayWhatTheyKnowAndSubgroupsRenumber) {
  // In-process: every rank on one host unless the world says otherwise (numbered by first rank).
  auto one = std::make_shared<transport::InProcWorld>(3);
  EXPECT_EQ(transport::InProcTransport(one, 1).host_of_rank(), (std::vector<int>{0, 0, 0}));
  auto faked = std::make_shared<transport::InProcWorld>(6, std::vector<int>{5, 5, 2, 2, 7, 7});
  auto t = std::make_shared<transport::InProcTransport>(faked, 4);
  EXPECT_EQ(t->host_of_rank(), (std::vector<int>{0, 0, 1, 1, 2, 2}));
  // A subgroup of ranks 4, 2, 3 (its ranks 0, 1, 2): hosts 2, 1, 1 renumbered 0, 1, 1.
  EXPECT_EQ(transport::SubTransport(t, {4, 2, 3}).host_of_rank(), (std::vector<int>{0, 1, 1}));
  EXPECT_THROW(transport::InProcWorld(2, {0}), InvalidArgument);
  EXPECT_THROW(transport::InProcWorld(2, {0, -3}), InvalidArgument);
  EXPECT_EQ(transport::number_hosts({3, 3, 1, 3, 0}), (std::vector<int>{0, 0, 1, 0, 2}));
  EXPECT_EQ(transport::one_host_each(3), (std::vector<int>{0, 1, 2}));
}

}  // namespace
}  // namespace c10d::inline v1::algorithms
