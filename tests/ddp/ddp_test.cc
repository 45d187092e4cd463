// DistributedDataParallel and optimizer_step with every rank a thread over the in-process
// transport, each test in eager and in lazy mode (pending graphs are per thread, so every
// rank's thread runs its own steps; multi-process training is tests/ddp/train_fmnist_test.cc's).
// In lazy mode the default hook becomes a collective IR node, any other hook reads the bucket.
//
// The reference is always one process holding the whole batch: DDP's averaged gradients (and
// optimizer_step's updated parameters) must match it to 1e-5.
#include "c10d/ddp.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../rank_threads.h"
#include "backends/common/transport_process_group.h"
#include "c10d/errors.h"
#include "c10d/lazy.h"
#include "c10d/nn.h"
#include "c10d/optim.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::ddp {
namespace {

using namespace std::chrono_literals;

class DdpTest : public ::testing::TestWithParam<bool> {
 protected:
  DdpTest() : was_lazy_(lazy::is_lazy()) { lazy::set_lazy(GetParam()); }
  ~DdpTest() override { lazy::set_lazy(was_lazy_); }

  // Runs fn(rank, group) on `n` threads; rethrows the first error.
  static void run_ranks(int n, const std::function<void(int, std::shared_ptr<ProcessGroup>)>& fn) {
    auto world = std::make_shared<transport::InProcWorld>(n);
    test::run_rank_threads(n, [&](int r) {
      backends::TransportProcessGroupOptions o;
      o.timeout = 30s;
      fn(r, backends::make_transport_process_group(
                std::make_shared<transport::InProcTransport>(world, r), o));
    });
  }

 private:
  bool was_lazy_;
};

// A small MLP; `hidden` lets a test give one rank a different model.
std::shared_ptr<nn::Sequential> mlp(std::int64_t hidden = 8, std::uint64_t seed = 7) {
  lazy::Generator gen(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(6, hidden, gen));
  m->push_back(std::make_shared<nn::Tanh>());
  m->push_back(std::make_shared<nn::Linear>(hidden, 4, gen));
  return m;
}

// The whole batch: 12 samples of 6 features, labels in 0..3.
struct Batch {
  Tensor x, y;
};
Batch whole_batch() {
  lazy::Generator gen(99);
  Batch b;
  b.x = lazy::normal({12, 6}, gen);
  std::vector<std::int64_t> labels;
  for (int i = 0; i < 12; ++i) labels.push_back((i * 7) % 4);
  b.y = Tensor::from_vector(labels, DType::kInt64);
  return b;
}
// Rank r's contiguous share of `b` among n ranks.
Batch shard(const Batch& b, int r, int n) {
  const std::int64_t per = 12 / n;
  return {lazy::slice_rows(b.x, r * per, (r + 1) * per),
          lazy::slice_rows(b.y, r * per, (r + 1) * per)};
}

// Gradients of the mean cross-entropy over the whole batch, in one process.
std::vector<std::vector<float>> reference_grads(int micro_batches = 1) {
  auto m = mlp();
  const Batch b = whole_batch();
  for (int k = 0; k < micro_batches; ++k) lazy::backward(lazy::cross_entropy(m->forward(b.x), b.y));
  std::vector<std::vector<float>> out;
  for (const auto& p : m->parameters()) {
    const Tensor g = lazy::grad(p);
    out.emplace_back(g.data<float>(), g.data<float>() + g.numel());
  }
  return out;
}

void expect_grads_near(const nn::Module& m, const std::vector<std::vector<float>>& want, double tol,
                       int rank) {
  const auto params = m.parameters();
  ASSERT_EQ(params.size(), want.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor g = lazy::grad(params[i]);
    ASSERT_TRUE(g.defined()) << "rank " << rank << " parameter " << i;
    ASSERT_EQ(static_cast<std::size_t>(g.numel()), want[i].size());
    for (std::size_t k = 0; k < want[i].size(); ++k) {
      EXPECT_NEAR(g.data<float>()[k], want[i][k], tol)
          << "rank " << rank << " parameter " << i << " element " << k;
    }
  }
}

TEST_P(DdpTest, AveragedGradientsEqualTheWholeBatchGradient) {
  const auto want = reference_grads();
  for (int n : {2, 3}) {
    for (bool view : {false, true}) {
      run_ranks(n, [&](int r, std::shared_ptr<ProcessGroup> pg) {
        auto m = mlp();
        DDPOptions o;
        o.gradient_as_bucket_view = view;
        o.first_bucket_cap_bytes = 64;  // several buckets even for this small model
        o.bucket_cap_bytes = 160;
        DistributedDataParallel ddp(m, pg, o);
        const Batch b = shard(whole_batch(), r, n);
        for (int iteration = 0; iteration < 2; ++iteration) {  // before and after the rebuild
          m->zero_grad();
          ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
          expect_grads_near(*m, want, 1e-5, r);
          EXPECT_GT(ddp.last_stats().buckets, 1);
        }
      });
    }
  }
}

TEST_P(DdpTest, NoSyncAccumulatesLocallyThenAveragesTheSum) {
  const auto want = reference_grads(/*micro_batches=*/2);
  run_ranks(2, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    auto m = mlp();
    DistributedDataParallel ddp(m, pg);
    const Batch b = shard(whole_batch(), r, 2);
    {
      auto guard = ddp.no_sync();
      ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
      EXPECT_EQ(ddp.last_stats().buckets, 0);  // nothing was sent
    }
    ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
    expect_grads_near(*m, want, 1e-5, r);
  });
}

TEST_P(DdpTest, BucketsAreRebuiltInReadyOrderIdenticallyOnEveryRank) {
  std::mutex mu;
  std::vector<std::vector<std::vector<std::string>>> layouts(3);
  run_ranks(3, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    auto m = mlp();
    DDPOptions o;
    o.first_bucket_cap_bytes = 16;
    o.bucket_cap_bytes = 140;
    DistributedDataParallel ddp(m, pg, o);
    // Before the first iteration: parameters in reverse order.
    EXPECT_EQ(ddp.bucket_layout().front().front(), "2.bias");
    const Batch b = shard(whole_batch(), r, 3);
    ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
    std::lock_guard lock(mu);
    layouts[static_cast<std::size_t>(r)] = ddp.bucket_layout();
  });
  EXPECT_EQ(layouts[0], layouts[1]);
  EXPECT_EQ(layouts[0], layouts[2]);
  std::size_t params = 0;
  for (const auto& bucket : layouts[0]) params += bucket.size();
  EXPECT_EQ(params, 4u);
}

TEST_P(DdpTest, MismatchedModelsAreRejectedOnEveryRankNamingTheParameter) {
  std::mutex mu;
  std::vector<std::string> errors(3);
  run_ranks(3, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    try {
      DistributedDataParallel ddp(mlp(r == 2 ? 9 : 8), pg);
    } catch (const InvalidArgument& e) {
      std::lock_guard lock(mu);
      errors[static_cast<std::size_t>(r)] = e.what();
    }
  });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("parameter #0 is '0.weight float32 [8, 6]' on rank 0"), std::string::npos)
        << e;
    EXPECT_NE(e.find("'0.weight float32 [9, 6]' on rank 2"), std::string::npos) << e;
  }
}

TEST_P(DdpTest, ParametersStartFromRankZeros) {
  run_ranks(2, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    auto m = mlp(8, /*seed=*/static_cast<std::uint64_t>(100 + r));  // different inits
    DistributedDataParallel ddp(m, pg);
    const auto want = mlp(8, 100)->parameters();
    const auto got = m->parameters();
    for (std::size_t i = 0; i < got.size(); ++i) {
      for (std::int64_t k = 0; k < got[i].numel(); ++k) {
        ASSERT_EQ(got[i].data<float>()[k], want[i].data<float>()[k]) << "rank " << r;
      }
    }
  });
}

TEST_P(DdpTest, CompressionHooksStayCloseToFullPrecision) {
  const auto want = reference_grads();
  for (auto [hook, tol] : {std::pair{fp16_compress_hook(), 2e-3}, {bf16_compress_hook(), 2e-2}}) {
    run_ranks(2, [&](int r, std::shared_ptr<ProcessGroup> pg) {
      auto m = mlp();
      DistributedDataParallel ddp(m, pg);
      ddp.register_comm_hook(hook);
      const Batch b = shard(whole_batch(), r, 2);
      ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
      expect_grads_near(*m, want, tol, r);
    });
  }
}

TEST_P(DdpTest, UserHookSeesEveryBucketAndItsResultIsUsed) {
  run_ranks(2, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    auto m = mlp();
    DistributedDataParallel ddp(m, pg);
    int calls = 0;
    ddp.register_comm_hook([&](ProcessGroup&, GradBucket& bucket) {
      ++calls;
      float* d = bucket.buffer.data<float>();
      for (std::int64_t i = 0; i < bucket.buffer.numel(); ++i) d[i] = 42.0f;  // no reduction
      auto f = std::make_shared<Future>();
      f->mark_completed({bucket.buffer});
      return f;
    });
    const Batch b = shard(whole_batch(), r, 2);
    ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
    EXPECT_EQ(calls, ddp.last_stats().buckets);
    for (const auto& p : m->parameters()) EXPECT_EQ(lazy::grad(p).data<float>()[0], 42.0f);
  });
}

// A model with a branch that a forward may skip.
class Branchy : public nn::Module {
 public:
  explicit Branchy(lazy::Generator& gen) : nn::Module("Branchy") {
    used_ = register_module("used", std::make_shared<nn::Linear>(6, 4, gen));
    unused_ = register_module("unused", std::make_shared<nn::Linear>(6, 4, gen));
  }
  Tensor forward(const Tensor& x) override { return used_->forward(x); }

 private:
  std::shared_ptr<nn::Linear> used_, unused_;
};

TEST_P(DdpTest, UnusedParametersNeedFindUnusedParameters) {
  run_ranks(2, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    lazy::Generator gen(3);
    auto m = std::make_shared<Branchy>(gen);
    DDPOptions o;
    o.find_unused_parameters = true;
    DistributedDataParallel ddp(m, pg, o);
    const Batch b = shard(whole_batch(), r, 2);
    ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
    for (const auto& [name, p] : m->named_parameters()) {
      const Tensor g = lazy::grad(p);
      ASSERT_TRUE(g.defined()) << name;
      if (name.rfind("unused", 0) == 0) {
        EXPECT_EQ(g.data<float>()[0], 0.0f) << name;
      }
    }
  });
  run_ranks(1, [&](int, std::shared_ptr<ProcessGroup> pg) {
    lazy::Generator gen(3);
    auto m = std::make_shared<Branchy>(gen);
    DistributedDataParallel ddp(m, pg);
    const Batch b = whole_batch();
    try {
      ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
      ADD_FAILURE() << "an unused parameter went unnoticed";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("'unused.weight' got no gradient"), std::string::npos)
          << e.what();
    }
  });
}

TEST_P(DdpTest, OptimizerStepMatchesSgdOnTheWholeBatch) {
  // Reference: one process, whole batch, two SGD steps with momentum.
  auto ref = mlp();
  optim::SGD ref_opt(ref->parameters(), {.lr = 0.5, .momentum = 0.9});
  const Batch whole = whole_batch();
  for (int step = 0; step < 2; ++step) {
    ref_opt.zero_grad();
    lazy::backward(lazy::cross_entropy(ref->forward(whole.x), whole.y));
    ref_opt.step();
  }
  lazy::mark_step();  // the ranks' threads read the reference: computed here, once
  run_ranks(3, [&](int r, std::shared_ptr<ProcessGroup> pg) {
    auto m = mlp();
    optim::SGD opt(m->parameters(), {.lr = 0.5, .momentum = 0.9});
    const Batch b = shard(whole, r, 3);
    for (int step = 0; step < 2; ++step) {
      opt.zero_grad();
      lazy::backward(lazy::cross_entropy(m->forward(b.x), b.y));
      optimizer_step(opt, pg);
    }
    const auto got = m->parameters();
    const auto want = ref->parameters();
    for (std::size_t i = 0; i < got.size(); ++i) {
      for (std::int64_t k = 0; k < got[i].numel(); ++k) {
        ASSERT_NEAR(got[i].data<float>()[k], want[i].data<float>()[k], 1e-5)
            << "rank " << r << " parameter " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Modes, DdpTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Lazy" : "Eager"; });

class LazyDdpTest : public DdpTest {};

TEST_P(LazyDdpTest, TheDefaultHookIsACollectiveNodeOfTheNextStep) {
  const auto want = reference_grads();
  for (int n : {1, 2}) {
    run_ranks(n, [&](int r, std::shared_ptr<ProcessGroup> pg) {
      auto m = mlp();
      DDPOptions o;
      o.first_bucket_cap_bytes = 64;
      DistributedDataParallel ddp(m, pg, o);
      const Batch b = shard(whole_batch(), r, n);
      const lazy::CollectiveTime before = lazy::collective_time();
      ddp.backward(lazy::cross_entropy(ddp(b.x), b.y));
      const Tensor g = lazy::grad(m->parameters().front());
      ASSERT_TRUE(g.impl()->is_pending()) << "backward ran the graph";
      const std::string graph = lazy::dump_graph({g});
      // Over one rank the average is the gradient: nothing to reduce.
      EXPECT_EQ(graph.find("all_reduce[op=sum, scale=0.5]") != std::string::npos, n == 2) << graph;
      lazy::mark_step();
      const lazy::CollectiveTime after = lazy::collective_time();
      EXPECT_EQ(after.collectives - before.collectives, n == 2 ? ddp.last_stats().buckets : 0);
      EXPECT_GE(ddp.last_stats().buckets, 2);
      EXPECT_EQ(ddp.last_stats().comm_seconds > 0, n == 2);
      EXPECT_EQ(ddp.last_stats().comm_seconds, after.seconds - before.seconds);
      expect_grads_near(*m, want, 1e-5, r);
    });
  }
}

INSTANTIATE_TEST_SUITE_P(Lazy, LazyDdpTest, ::testing::Values(true));

TEST(AssignBucketsTest, FirstBucketSmallThenCappedRunsNeverMixingDtypes) {
  using V = std::vector<std::vector<int>>;
  const std::vector<DType> f32(5, DType::kFloat32);
  EXPECT_EQ(assign_buckets({4, 4, 4, 4, 4}, f32, {4, 3, 2, 1, 0}, 8, 12), (V{{4, 3}, {2, 1, 0}}));
  // A parameter over the cap gets a bucket of its own.
  EXPECT_EQ(assign_buckets({4, 40, 4, 4, 4}, f32, {0, 1, 2, 3, 4}, 8, 12),
            (V{{0}, {1}, {2, 3, 4}}));
  std::vector<DType> mixed = f32;
  mixed[2] = DType::kFloat64;
  EXPECT_EQ(assign_buckets({4, 4, 4, 4, 4}, mixed, {0, 1, 2, 3, 4}, 100, 100),
            (V{{0, 1}, {2}, {3, 4}}));
  EXPECT_THROW(assign_buckets({4, 4}, {DType::kFloat32, DType::kFloat32}, {0, 0}, 8, 8),
               InvalidArgument);
}

}  // namespace
}  // namespace c10d::inline v1::ddp
