// The all_reduce IR node over the in-process transport, ranks as threads: values, scale, and
// program order of two collectives in one step (a control edge keeps the first one even when
// nothing reads its result).
#include <latch>
#include <thread>

#include "backends/common/transport_process_group.h"
#include "lazy_testing.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::lazy {
namespace {

using namespace std::chrono_literals;

// Runs fn(rank, group) on `n` threads, each with its own process group; rethrows the first error.
void run_ranks(int n, const std::function<void(int, std::shared_ptr<ProcessGroup>)>& fn) {
  auto world = std::make_shared<transport::InProcWorld>(n);
  std::latch done(n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::shared_ptr<ProcessGroup> pg;
      try {
        pg = backends::make_transport_process_group(
            std::make_shared<transport::InProcTransport>(world, r),
            {.backend_name = "inproc", .timeout = 20s});
        fn(r, pg);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
      done.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

class CollectiveTest : public ::testing::TestWithParam<bool> {};

TEST_P(CollectiveTest, TwoCollectivesRunInProgramOrderWithScale) {
  const bool lazy = GetParam();
  testing::ModeGuard mode(lazy);
  constexpr int kWorld = 3;
  run_ranks(kWorld, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    Tensor x = full({5}, r + 1.0);
    Tensor y = full({2, 2}, 10.0 * (r + 1), DType::kFloat64);
    // Sum of 2(r+1) over ranks, averaged: 2 * (1+2+3) / 3 = 4.
    std::vector<Tensor> avg = all_reduce({x * 2.0}, ReduceOp::kSum, 1.0 / kWorld, pg);
    // Max of 10(r+1) + 1 = 31, and a second tensor in the same collective.
    std::vector<Tensor> mx = all_reduce({y + 1.0, x}, ReduceOp::kMax, 1.0, pg);
    if (lazy) {
      EXPECT_TRUE(avg[0].impl()->is_pending());
      mark_step();
    }
    testing::expect_near(testing::values(avg[0]), std::vector<double>(5, 4.0));
    testing::expect_near(testing::values(mx[0]), std::vector<double>(4, 31.0));
    testing::expect_near(testing::values(mx[1]), std::vector<double>(5, 3.0));
  });
}

TEST_P(CollectiveTest, AnUnreadCollectiveStillRunsBeforeTheNextOne) {
  const bool lazy = GetParam();
  testing::ModeGuard mode(lazy);
  run_ranks(2, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    Tensor x = full({3}, r + 1.0);
    { all_reduce({x}, ReduceOp::kSum, 1.0, pg); }  // result dropped
    std::vector<Tensor> second = all_reduce({x * 10.0}, ReduceOp::kSum, 1.0, pg);
    if (lazy) {
      const std::string g = dump_graph(second);
      EXPECT_NE(g.find("all_reduce[op=sum, scale=1]"), std::string::npos) << g;
    }
    testing::expect_near(testing::values(second[0]), std::vector<double>(3, 30.0));
    // Both ran on this rank, in order: the group's sequence is in step with the peer's.
    std::vector<Tensor> third = all_reduce({x}, ReduceOp::kMax, 1.0, pg);
    testing::expect_near(testing::values(third[0]), std::vector<double>(3, 2.0));
  });
}

TEST_P(CollectiveTest, TensorsOfOneDtypeTravelAsOneFlatCollective) {
  const bool lazy = GetParam();
  testing::ModeGuard mode(lazy);
  run_ranks(2, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    const auto sequence = [&] {
      Tensor t = Tensor::from_vector(std::vector<float>{1.0f}, DType::kFloat32);
      auto w = pg->all_reduce({t});
      w->wait();
      return w->sequence();
    };
    const std::uint64_t first = sequence();
    const CollectiveTime before = collective_time();
    // Odd sizes (so the ranges need padding to stay aligned), an empty one, and a float64.
    Tensor a = full({5}, r + 1.0);
    Tensor b = full({0}, 1.0);
    Tensor c = full({3, 7}, 10.0 * (r + 1));
    Tensor d = full({2}, r + 1.0, DType::kFloat64);
    std::vector<Tensor> sum = all_reduce({a, b, c, d}, ReduceOp::kSum, 0.5, pg);
    std::vector<Tensor> mx = all_reduce({a, c}, ReduceOp::kMax, 0.5, pg);
    if (lazy) mark_step();
    testing::expect_near(testing::values(sum[0]), std::vector<double>(5, 1.5));
    EXPECT_EQ(sum[1].numel(), 0);
    testing::expect_near(testing::values(sum[2]), std::vector<double>(21, 15.0));
    testing::expect_near(testing::values(sum[3]), std::vector<double>(2, 1.5));
    // A max scales its result: 0.5 * max(r + 1).
    testing::expect_near(testing::values(mx[0]), std::vector<double>(5, 1.0));
    testing::expect_near(testing::values(mx[1]), std::vector<double>(21, 10.0));
    // The float32 run of each node was one collective, the float64 one another: 3 in all.
    EXPECT_EQ(sequence(), first + 4);
    const CollectiveTime after = collective_time();
    EXPECT_EQ(after.collectives - before.collectives, 2);
    EXPECT_GT(after.seconds, before.seconds);
    EXPECT_GE(after.seconds - before.seconds, after.wait_seconds - before.wait_seconds);
  });
}

// With overlap, a collective is waited for by the first step that reads its result, through a
// reshape or a slice too. Rank 1 comes late, so a reader that did not wait would see rank 0's
// own premultiplied values.
TEST_P(CollectiveTest, TheFirstReaderOfACollectiveWaitsForIt) {
  const bool lazy = GetParam();
  testing::ModeGuard mode(lazy);
  const bool was = overlap_collectives();
  for (const bool overlap : {true, false}) {
    set_overlap_collectives(overlap);
    run_ranks(2, [&](int r, std::shared_ptr<ProcessGroup> pg) {
      if (r == 1) std::this_thread::sleep_for(50ms);
      Tensor x = full({4, 3}, r + 1.0);
      Tensor y = full({6}, 10.0 * (r + 1));
      std::vector<Tensor> avg = all_reduce({x, y}, ReduceOp::kSum, 0.5, pg);
      Tensor unrelated = matmul(full({3, 3}, 1.0), full({3, 3}, 2.0));  // runs before the reader
      Tensor rows = slice_rows(reshape(avg[0], {2, 6}), 1, 2) * 2.0;
      Tensor last = avg[1] + 1.0;
      if (lazy) mark_step();
      testing::expect_near(testing::values(rows), std::vector<double>(6, 3.0));
      testing::expect_near(testing::values(last), std::vector<double>(6, 16.0));
      testing::expect_near(testing::values(unrelated), std::vector<double>(9, 6.0));
    });
  }
  set_overlap_collectives(was);
}

// A matmul whose only reader is the collective computes straight into its flat buffer, scaled
// there when the scale is a power of two; the bits must be those of eager mode, where the
// collective copies and scales the matmul's own result. Covered: a home matmul with scale 1/2
// and 1/3 (the node scales the range itself), a matmul read by another op too, one that is a
// root, and the same matmul twice in one node (neither may be computed in place).
TEST(CollectiveHomeTest, MatmulsReducedInPlaceGiveTheBitsOfEagerMode) {
  constexpr int kWorld = 2;
  std::vector<std::vector<std::vector<float>>> got[2];  // [mode][rank] -> values
  for (const bool lazy : {false, true}) {
    testing::ModeGuard mode(lazy);
    got[lazy].resize(kWorld);
    run_ranks(kWorld, [&](int r, std::shared_ptr<ProcessGroup> pg) {
      Generator gen(10 + static_cast<std::uint64_t>(r));
      std::vector<Tensor> out;
      for (const double scale : {0.5, 1.0 / 3.0}) {
        const Tensor a = normal({7, 5}, gen), b = normal({5, 9}, gen);  // new values each time
        // Only `root` outlives this block as a handle: the other matmuls are read by the graph
        // alone, so they are not roots of the step.
        const Tensor root = matmul(a, b + 1.0);
        std::vector<Tensor> reduced;
        Tensor seen;
        {
          const Tensor shared = matmul(transpose(b), transpose(a));
          const Tensor twice = matmul(a, full({5, 3}, 0.25));
          seen = shared * 2.0;
          reduced =
              all_reduce({matmul(a, b), shared, root, twice, twice}, ReduceOp::kSum, scale, pg);
        }
        out.insert(out.end(), reduced.begin(), reduced.end());
        out.push_back(seen);
        out.push_back(root);
      }
      if (lazy) mark_step();
      for (const Tensor& t : out) {
        got[lazy][static_cast<std::size_t>(r)].emplace_back(t.data<float>(),
                                                            t.data<float>() + t.numel());
      }
    });
  }
  for (int r = 0; r < kWorld; ++r) {
    const auto& eager = got[0][static_cast<std::size_t>(r)];
    const auto& lazy = got[1][static_cast<std::size_t>(r)];
    ASSERT_EQ(eager.size(), lazy.size());
    for (std::size_t i = 0; i < eager.size(); ++i) {
      ASSERT_EQ(eager[i].size(), lazy[i].size());
      for (std::size_t k = 0; k < eager[i].size(); ++k) {
        ASSERT_EQ(eager[i][k], lazy[i][k]) << "rank " << r << " tensor " << i << " element " << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CollectiveTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Lazy" : "Eager"; });

}  // namespace
}  // namespace c10d::inline v1::lazy
