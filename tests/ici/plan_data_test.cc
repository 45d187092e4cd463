// The torus plans move and reduce the right bytes: each is run with real data by run_plan over
// the in-process transport (threads as ranks), on tori with and without wraparound, and every
// rank's result is checked against its closed form.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>

#include "backends/tpu_ici/plan_executor.h"
#include "backends/tpu_ici/torus_plans.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::tpu_ici {
namespace {

using Body = std::function<void(const algorithms::Context&, const Torus&)>;

void on_every_rank(const Torus& torus, const Body& body) {
  const int n = torus.size();
  auto world = std::make_shared<transport::InProcWorld>(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      transport::InProcTransport t(world, r);
      const algorithms::Context ctx{t, transport::make_tag(0, 1),
                                    transport::Clock::now() + std::chrono::seconds(20)};
      body(ctx, torus);
    });
  }
  for (auto& t : threads) t.join();
}

std::span<std::byte> bytes(std::vector<std::int32_t>& v) {
  return {reinterpret_cast<std::byte*>(v.data()), v.size() * sizeof(std::int32_t)};
}

class PlanDataTest : public ::testing::TestWithParam<std::pair<const char*, const char*>> {
 protected:
  Torus torus() const {
    std::vector<int> dims;
    parse_dims(GetParam().first, dims);
    const int n = std::accumulate(dims.begin(), dims.end(), 1, std::multiplies<>());
    return make_torus({.topology = GetParam().first, .wrap = GetParam().second}, n);
  }
};

TEST_P(PlanDataTest, AllReduceSumsEveryElement) {
  constexpr std::int64_t kCount = 1037;
  on_every_rank(torus(), [&](const algorithms::Context& ctx, const Torus& t) {
    std::vector<std::int32_t> v(kCount);
    for (std::int64_t i = 0; i < kCount; ++i)
      v[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(ctx.rank() * 1000 + i);
    run_plan(ctx, multi_axis_all_reduce(t, ctx.rank(), kCount, 4), bytes(v), {}, DType::kInt32,
             {.op = ReduceOp::kSum});
    const std::int64_t n = t.size();
    for (std::int64_t i = 0; i < kCount; ++i) {
      ASSERT_EQ(v[static_cast<std::size_t>(i)], 1000 * n * (n - 1) / 2 + n * i)
          << "rank " << ctx.rank() << " element " << i;
    }
  });
}

TEST_P(PlanDataTest, AllGatherAndReduceScatterPlaceEveryBlock) {
  constexpr std::int64_t kBlock = 11;
  on_every_rank(torus(), [&](const algorithms::Context& ctx, const Torus& t) {
    const int n = t.size();
    std::vector<std::int32_t> out(static_cast<std::size_t>(n * kBlock), -1);
    for (std::int64_t i = 0; i < kBlock; ++i) {
      out[static_cast<std::size_t>(ctx.rank() * kBlock + i)] = ctx.rank() * 100 + 1;
    }
    run_plan(ctx, torus_all_gather(t, ctx.rank(), kBlock * 4), bytes(out), {}, DType::kInt32, {});
    for (std::size_t i = 0; i < out.size(); ++i) {
      ASSERT_EQ(out[i], static_cast<std::int32_t>(i / kBlock) * 100 + 1) << "rank " << ctx.rank();
    }
    std::vector<std::int32_t> in(static_cast<std::size_t>(n * kBlock));
    for (std::size_t i = 0; i < in.size(); ++i) {
      in[i] = static_cast<std::int32_t>(ctx.rank() + 7 * i);
    }
    run_plan(ctx, torus_reduce_scatter(t, ctx.rank(), kBlock, 4), bytes(in), {}, DType::kInt32,
             {.op = ReduceOp::kSum});
    for (std::int64_t i = 0; i < kBlock; ++i) {
      const std::int64_t at = ctx.rank() * kBlock + i;
      ASSERT_EQ(in[static_cast<std::size_t>(at)], n * (n - 1) / 2 + n * 7 * at)
          << "rank " << ctx.rank();
    }
  });
}

TEST_P(PlanDataTest, BroadcastAndAllToAllDeliverEveryByte) {
  on_every_rank(torus(), [&](const algorithms::Context& ctx, const Torus& t) {
    const int n = t.size();
    const int root = n / 2;
    std::vector<std::int32_t> data(1000, ctx.rank() == root ? 0 : -1);
    if (ctx.rank() == root) std::iota(data.begin(), data.end(), 0);
    run_plan(ctx, torus_broadcast(t, ctx.rank(), root, 4000, 512), bytes(data), {}, DType::kUInt8,
             {});
    for (int i = 0; i < 1000; ++i) ASSERT_EQ(data[static_cast<std::size_t>(i)], i);

    // Rank r sends r * 100 + d, d + 1 times, to rank d (uneven splits).
    std::vector<std::int64_t> sc(static_cast<std::size_t>(n)), so(sc.size()), rc(sc.size()),
        ro(sc.size());
    std::vector<std::int32_t> in, out;
    for (int d = 0; d < n; ++d) {
      so[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(in.size()) * 4;
      sc[static_cast<std::size_t>(d)] = (d + 1) * 4;
      in.insert(in.end(), static_cast<std::size_t>(d + 1), ctx.rank() * 100 + d);
      ro[static_cast<std::size_t>(d)] = static_cast<std::int64_t>(d) * (ctx.rank() + 1) * 4;
      rc[static_cast<std::size_t>(d)] = (ctx.rank() + 1) * 4;
    }
    out.assign(static_cast<std::size_t>(n * (ctx.rank() + 1)), -1);
    std::memcpy(out.data() + ro[static_cast<std::size_t>(ctx.rank())] / 4,
                in.data() + so[static_cast<std::size_t>(ctx.rank())] / 4,
                static_cast<std::size_t>(rc[static_cast<std::size_t>(ctx.rank())]));
    run_plan(ctx, routed_all_to_all(ctx.rank(), n, sc, so, rc, ro), bytes(out),
             {reinterpret_cast<const std::byte*>(in.data()), in.size() * 4}, DType::kUInt8, {});
    for (std::size_t i = 0; i < out.size(); ++i) {
      const int s = static_cast<int>(i) / (ctx.rank() + 1);
      ASSERT_EQ(out[i], s * 100 + ctx.rank()) << "rank " << ctx.rank() << " element " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(
    Tori, PlanDataTest,
    ::testing::Values(std::pair{"1", "all"}, std::pair{"2", "all"}, std::pair{"4", "all"},
                      std::pair{"5", "all"}, std::pair{"5", "none"}, std::pair{"2x3", "all"},
                      std::pair{"4x2", "1,0"}, std::pair{"2x2x2", "all"}, std::pair{"3x3", "none"},
                      // Unequal axes: lanes of unequal shares, a stage per phase.
                      std::pair{"4x6", "all"}, std::pair{"2x3x4", "all"}, std::pair{"2x8", "0,1"},
                      std::pair{"1x4x3", "0,1,1"}),
    [](const auto& p) {
      return std::string(p.param.first) + "_wrap_" + [](std::string wrap) {
        wrap.erase(std::remove(wrap.begin(), wrap.end(), ','), wrap.end());
        return wrap;
      }(p.param.second);
    });

}  // namespace
}  // namespace c10d::inline v1::tpu_ici
