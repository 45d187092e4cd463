// The ICI process group on threads: torus algorithms give exact answers, every Work reports
// its simulated duration, and the fabric's times equal the timing-only simulator's for the
// same schedules.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <mutex>
#include <string>
#include <vector>

#include "backends/tpu_ici/timing_sim.h"
#include "backends/tpu_ici/torus_plans.h"
#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/tensor.h"
#include "core/work_control.h"
#include "ici_threads.h"

namespace c10d::inline v1::tpu_ici {
namespace {

using namespace std::chrono_literals;
using testing::joined;
using testing::run_ranks;

TEST(ProcessGroupIciTest, AllReduceSumsOnA2x4Torus) {
  ProcessGroupICIOptions options;
  options.topology = "2x4";
  const auto errors = run_ranks(8, options, [](int rank, ProcessGroup& pg) {
    std::vector<float> v(1000);
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(rank + i);
    Tensor t = Tensor::from_vector(v, DType::kFloat32);
    auto work = pg.all_reduce({t});
    work->wait(30s);
    for (std::size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(t.data<float>()[i], static_cast<float>(28 + 8 * i)) << "element " << i;
    }
    const auto seconds = ici_simulated_seconds(*work);
    ASSERT_TRUE(seconds.has_value());
    EXPECT_GT(*seconds, 0);
  });
  EXPECT_TRUE(errors.empty()) << joined(errors);
}

// The fabric (real bytes, one router thread per chip) and the simulator (every chip in one
// loop, no data) run the same plan; on a schedule without contention they agree to the
// rounding of a double. 4x2 has unequal axes: 256 KiB runs its two lanes in lock step as one,
// 1 MiB a stage per phase with a clock per lane (axis_shares.h, ici_transport.h).
TEST(ProcessGroupIciTest, FabricTimeEqualsTheSimulatorsForTheSamePlan) {
  const Torus torus = make_torus({.topology = "4x2"}, 8);
  for (const auto& [count, stages] : {std::pair{std::int64_t{1} << 16, std::size_t{1}},
                                      std::pair{std::int64_t{1} << 18, std::size_t{4}}}) {
    SCOPED_TRACE(count);
    ASSERT_EQ(multi_axis_all_reduce(torus, 0, count, sizeof(float)).stages.size(), stages);
    ProcessGroupICIOptions options;
    options.topology = "4x2";
    options.preset = "";
    std::vector<double> seconds(8, -1);
    const auto errors = run_ranks(8, options, [&](int rank, ProcessGroup& pg) {
      Tensor t = Tensor::from_vector(std::vector<float>(static_cast<std::size_t>(count), 1.0f),
                                     DType::kFloat32);
      auto work = pg.all_reduce({t});
      work->wait(30s);
      EXPECT_EQ(t.data<float>()[count - 1], 8.0f);
      seconds[static_cast<std::size_t>(rank)] = ici_simulated_seconds(*work).value_or(-1);
    });
    ASSERT_TRUE(errors.empty()) << joined(errors);
    const SimResult sim = simulate(
        torus, [&](int r) { return multi_axis_all_reduce(torus, r, count, sizeof(float)); });
    for (int r = 0; r < 8; ++r) {
      EXPECT_NEAR(seconds[static_cast<std::size_t>(r)],
                  sim.chip_seconds[static_cast<std::size_t>(r)], 1e-12)
          << "rank " << r;
    }
  }
}

TEST(ProcessGroupIciTest, EveryCollectiveReportsItsSimulatedTimeAndLinks) {
  ProcessGroupICIOptions options;
  options.topology = "2x2";
  const auto errors = run_ranks(4, options, [](int rank, ProcessGroup& pg) {
    Tensor in = Tensor::from_vector(std::vector<std::int32_t>(64, rank), DType::kInt32);
    Tensor out = Tensor::from_vector(std::vector<std::int32_t>(256, -1), DType::kInt32);
    auto ag = pg.all_gather_into_tensor(out, in);
    ag->wait(30s);
    for (int i = 0; i < 256; ++i) ASSERT_EQ(out.data<std::int32_t>()[i], i / 64);
    auto b = pg.barrier();
    b->wait(30s);
    EXPECT_GT(ici_simulated_seconds(*ag).value_or(0), 0);
    EXPECT_GT(ici_simulated_seconds(*b).value_or(0), 0);
    const std::string report = ici_link_report(pg);
    EXPECT_NE(report.find("axis 0"), std::string::npos) << report;
    EXPECT_NE(report.find("busy"), std::string::npos) << report;
  });
  EXPECT_TRUE(errors.empty()) << joined(errors);
}

// A down link on a wrapping torus: the rings' messages across it detour through the other
// chips, the answer is the same, and the collective takes longer.
TEST(ProcessGroupIciTest, CollectivesRouteAroundADownLink) {
  constexpr std::int64_t kCount = 1 << 18;
  std::vector<double> seconds;
  for (const char* down : {"", "0-1"}) {
    ProcessGroupICIOptions options;
    options.topology = "4x2";
    options.down_links = down;
    double slowest = 0;
    std::mutex mu;
    const auto errors = run_ranks(8, options, [&](int rank, ProcessGroup& pg) {
      Tensor t = Tensor::from_vector(std::vector<std::int32_t>(kCount, rank), DType::kInt32);
      auto work = pg.all_reduce({t});
      work->wait(30s);
      EXPECT_EQ(t.data<std::int32_t>()[kCount - 1], 28);
      std::lock_guard lock(mu);
      slowest = std::max(slowest, ici_simulated_seconds(*work).value_or(0));
    });
    ASSERT_TRUE(errors.empty()) << joined(errors);
    seconds.push_back(slowest);
  }
  EXPECT_GT(seconds[1], seconds[0] * 1.2) << seconds[0] << " s vs " << seconds[1] << " s";
}

// A down link that cuts a line without wraparound: no route exists, so the first rank that
// needs one fails naming the link, and the abort reaches every other rank well before the
// op's timeout (no hang).
TEST(ProcessGroupIciTest, ACollectiveThatCannotRouteFailsOnEveryRankNamingTheLink) {
  ProcessGroupICIOptions options;
  options.topology = "4";
  options.wrap = "none";
  options.down_links = "1-2";
  options.timeout = 20s;
  const auto start = std::chrono::steady_clock::now();
  std::atomic<int> named{0};
  const auto errors = run_ranks(4, options, [&](int rank, ProcessGroup& pg) {
    Tensor t = Tensor::from_vector(std::vector<float>(1000, 1.0f), DType::kFloat32);
    auto work = pg.all_reduce({t});
    try {
      work->wait(30s);
      ADD_FAILURE() << "rank " << rank << ": the all_reduce succeeded";
    } catch (const NetworkError& e) {
      if (std::string(e.what()).find("link (1)->(2)") != std::string::npos ||
          std::string(e.what()).find("link (2)->(1)") != std::string::npos) {
        ++named;
      }
    }
  });
  EXPECT_TRUE(errors.empty()) << joined(errors);
  EXPECT_EQ(named.load(), 4);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

// Without C10D_DEBUG, rank 2 calls broadcast where the others call all_reduce, or passes half
// the size: the torus plans' messages carry their call, so a receive fails naming both calls and
// both ranks, and the abort floods the torus: every rank fails well before the op's timeout,
// with those words, and none returns success.
TEST(ProcessGroupIciTest, ARankThatCallsAnotherCollectiveFailsEveryRankNamingBothCalls) {
  for (const bool broadcast : {true, false}) {
    SCOPED_TRACE(broadcast ? "broadcast" : "half the size");
    const std::string others = "all_reduce(float32, count 1024, sum) #1";
    const std::string rank2 = broadcast ? "broadcast(float32, count 1024, root 0) #1"
                                        : "all_reduce(float32, count 512, sum) #1";
    ProcessGroupICIOptions options;
    options.topology = "2x2";
    options.timeout = 20s;
    const auto start = std::chrono::steady_clock::now();
    std::vector<std::string> failures(4);
    const auto errors = run_ranks(4, options, [&](int rank, ProcessGroup& pg) {
      Tensor t = Tensor::from_vector(std::vector<float>(1024, 1.0f), DType::kFloat32);
      pg.all_reduce({t})->wait(30s);  // #0 agrees
      std::shared_ptr<Work> work;
      if (rank != 2) {
        work = pg.all_reduce({t});
      } else if (broadcast) {
        work = pg.broadcast({t});
      } else {
        work = pg.all_reduce({Tensor::from_vector(std::vector<float>(512, 1.0f), DType::kFloat32)});
      }
      try {
        work->wait(30s);
        ADD_FAILURE() << "rank " << rank << ": the mismatched collective succeeded";
      } catch (const Error& e) {
        failures[static_cast<std::size_t>(rank)] = e.what();
      }
    });
    EXPECT_TRUE(errors.empty()) << joined(errors);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
    for (int r = 0; r < 4; ++r) {
      const std::string& f = failures[static_cast<std::size_t>(r)];
      const auto has = [&](const std::string& part) { return f.find(part) != std::string::npos; };
      const bool named =
          has(": its " + others + " received a frame of rank 2's " + rank2) ||
          (has("rank 2: its " + rank2 + " received a frame of rank ") && has("'s " + others));
      EXPECT_TRUE(named) << "rank " << r << ": " << f;
    }
  }
}

TEST(ProcessGroupIciTest, OtherBackendsHaveNoSimulatedTime) {
  Work work("all_reduce", 0);
  core::WorkControl::finish(work);
  EXPECT_FALSE(ici_simulated_seconds(work).has_value());
}

}  // namespace
}  // namespace c10d::inline v1::tpu_ici
