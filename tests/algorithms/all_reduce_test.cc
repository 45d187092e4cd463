// Ring and halving-doubling all-reduce over the in-process transport, every rank a thread: swept
// over world size, dtype, reduce op, count and segment size (small segments force the pipelined
// path), checked against closed forms; a reordered ring; a peer that dies mid-collective.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <mutex>
#include <thread>

#include "algorithms/halving_doubling_all_reduce.h"
#include "algorithms/ring_all_reduce.h"
#include "algorithms/ring_pattern.h"
#include "c10d/errors.h"
#include "core/half.h"
#include "ranks.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::algorithms {
namespace {

using testing::context;
using testing::expected;
using testing::run_ranks;
using testing::value;

using namespace std::chrono_literals;

template <typename T>
void check_sum_avg_max(int n, std::int64_t count, std::int64_t segment_bytes, DType dtype) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
    if (!is_floating_point(dtype) && (op == ReduceOp::kAvg || op == ReduceOp::kPremulSum)) {
      continue;
    }
    std::vector<std::vector<T>> out(n);
    run_ranks(n, [&](int r, transport::Transport& t) {
      std::vector<T> data(static_cast<std::size_t>(count));
      for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(value(r, i));
      Reduction red{op, 0.5};
      ring_all_reduce(context(t), dtype, red, data.data(), count, {{}, segment_bytes});
      out[r] = std::move(data);
    });
    for (int r = 0; r < n; ++r) {
      for (std::int64_t i = 0; i < count; ++i) {
        const double expect = expected(op, n, i);
        ASSERT_NEAR(static_cast<double>(out[r][i]), expect, 1e-5 * std::abs(expect))
            << "n " << n << " rank " << r << " i " << i << " op " << reduce_op_name(op) << " dtype "
            << dtype_name(dtype);
      }
    }
  }
}

TEST(RingAllReduceTest, ClosedFormsForEveryWorldSizeCountAndSegmentSize) {
  for (int n = 1; n <= 8; ++n) {
    for (std::int64_t count : {0, 1, 7, 1000}) {
      check_sum_avg_max<float>(n, count, 512 << 10, DType::kFloat32);
      check_sum_avg_max<float>(n, count, 12, DType::kFloat32);  // 3-element segments
    }
  }
}

TEST(HalvingDoublingAllReduceTest, ClosedFormsForEveryWorldSizeNotOnlyPowersOfTwo) {
  for (int n = 1; n <= 9; ++n) {
    for (std::int64_t count : {0, 1, 7, 1000}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
        std::vector<std::vector<float>> out(n);
        run_ranks(n, [&](int r, transport::Transport& t) {
          std::vector<float> data(static_cast<std::size_t>(count));
          for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(value(r, i));
          halving_doubling_all_reduce(context(t), DType::kFloat32, {op, 0.5}, data.data(), count);
          out[r] = std::move(data);
        });
        for (int r = 0; r < n; ++r) {
          for (std::int64_t i = 0; i < count; ++i) {
            const double expect = expected(op, n, i);
            ASSERT_NEAR(out[r][i], expect, 1e-5 * expect)
                << "n " << n << " rank " << r << " i " << i << " op " << reduce_op_name(op);
          }
        }
      }
    }
  }
}

TEST(RingAllReduceTest, OtherDtypes) {
  for (int n : {2, 3, 5}) {
    check_sum_avg_max<double>(n, 1001, 64, DType::kFloat64);
    check_sum_avg_max<std::int32_t>(n, 1001, 64, DType::kInt32);
    check_sum_avg_max<std::int64_t>(n, 33, 16, DType::kInt64);
  }
}

TEST(RingAllReduceTest, Float16AccumulatesInFloat32AndRoundsBack) {
  const int n = 4;
  const std::int64_t count = 300;
  std::vector<std::vector<std::uint16_t>> out(n);
  run_ranks(n, [&](int r, transport::Transport& t) {
    std::vector<std::uint16_t> data(count);
    for (std::int64_t i = 0; i < count; ++i) {
      data[i] = core::float_to_half(static_cast<float>(value(r, i)));
    }
    ring_all_reduce(context(t), DType::kFloat16, {ReduceOp::kSum, 1.0}, data.data(), count,
                    {{}, 64});
    out[r] = data;
  });
  for (int r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < count; ++i) {
      double expect = 0;
      for (int q = 0; q < n; ++q) expect += value(q, i);
      ASSERT_EQ(core::half_to_float(out[r][i]), static_cast<float>(expect));
    }
  }
}

TEST(RingAllReduceTest, AReorderedRingGivesTheSameResult) {
  const int n = 5;
  const std::vector<int> order = {3, 0, 4, 2, 1};
  std::vector<std::vector<float>> out(n);
  run_ranks(n, [&](int r, transport::Transport& t) {
    std::vector<float> data(997);
    for (std::int64_t i = 0; i < 997; ++i) data[i] = static_cast<float>(value(r, i));
    ring_all_reduce(context(t), DType::kFloat32, {}, data.data(), 997, {order, 40});
    out[r] = data;
  });
  for (int r = 0; r < n; ++r) {
    for (std::int64_t i = 0; i < 997; ++i) {
      ASSERT_EQ(out[r][i], static_cast<float>(15 + 5 * (i % 5)));
    }
  }
}

TEST(RingAllReduceTest, BadReductionFailsOnEveryRankBeforeAnyMessage) {
  int failures = 0;
  std::mutex mu;
  run_ranks(3, [&](int, transport::Transport& t) {
    std::vector<float> data(10, 1.0f);
    try {
      ring_all_reduce(context(t), DType::kFloat32, {ReduceOp::kBxor, 1.0}, data.data(), 10);
    } catch (const InvalidArgument& e) {
      std::lock_guard<std::mutex> lock(mu);
      ++failures;
      EXPECT_NE(std::string(e.what()).find("float32"), std::string::npos) << e.what();
    }
  });
  EXPECT_EQ(failures, 3);
}

// The algorithm's promise: its neighbours of a dead rank fail naming it; a rank further round
// the ring fails by its deadline at the latest (the ProcessGroup aborts the rest at once).
TEST(RingAllReduceTest, APeerThatDiesFailsItsNeighboursNamingItAndNobodyHangs) {
  const int n = 4;
  auto world = std::make_shared<transport::InProcWorld>(n);
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      transport::InProcTransport t(world, r);
      std::vector<float> data(1 << 16, 1.0f);
      if (r == 2) {
        world->fail_rank(2, std::make_exception_ptr(NetworkError("killed")));
        return;
      }
      Context ctx{t, transport::make_tag(0, 1), transport::Clock::now() + 2s};
      try {
        ring_all_reduce(ctx, DType::kFloat32, {}, data.data(), 1 << 16, {{}, 4096});
        errors[r] = "no error";
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r : {1, 3}) {  // rank 1 sends to 2, rank 3 receives from 2
    EXPECT_NE(errors[r].find("rank 2"), std::string::npos) << "rank " << r << ": " << errors[r];
  }
  EXPECT_NE(errors[0], "no error");
}

}  // namespace
}  // namespace c10d::inline v1::algorithms
