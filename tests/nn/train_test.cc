// End to end: an MLP learns XOR in lazy and in eager mode, both modes give the same losses,
// and a repeated lazy training step (forward, backward, optimizer, mark_step) compiles nothing
// after its second run.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../lazy/autograd_testing.h"
#include "c10d/nn.h"
#include "c10d/optim.h"

namespace c10d::inline v1 {
namespace {

using testing::make;
using testing::values;

struct TrainResult {
  std::vector<double> losses;
  int correct = 0;
};

enum class Opt { kSgd, kAdam };

// 2-hidden-2 tanh MLP on the four XOR points, full batch, cross entropy.
TrainResult train_xor(bool lazy_mode, Opt which, int steps,
                      std::vector<lazy::Metrics>* metrics = nullptr, double dropout = 0,
                      std::int64_t hidden = 8) {
  const bool previous = lazy::is_lazy();
  lazy::set_lazy(lazy_mode);
  lazy::Generator gen(1234);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(2, hidden, gen));
  net->push_back(std::make_shared<nn::Tanh>());
  if (dropout > 0) {
    net->push_back(std::make_shared<nn::Dropout>(dropout, std::make_shared<lazy::Generator>(5)));
  }
  net->push_back(std::make_shared<nn::Linear>(hidden, 2, gen));
  std::unique_ptr<optim::Optimizer> opt;
  if (which == Opt::kSgd) {
    opt = std::make_unique<optim::SGD>(net->parameters(),
                                       optim::SGDOptions{.lr = 0.5, .momentum = 0.9});
  } else {
    opt = std::make_unique<optim::Adam>(net->parameters(), optim::AdamOptions{.lr = 0.05});
  }
  const Tensor x = make({0, 0, 0, 1, 1, 0, 1, 1}, {4, 2}, DType::kFloat32);
  const Tensor y = make({0, 1, 1, 0}, {4}, DType::kInt64);
  lazy::mark_step();  // the parameters' initial values
  TrainResult run;
  for (int s = 0; s < steps; ++s) {
    opt->zero_grad();
    Tensor loss = lazy::cross_entropy(net->forward(x), y);
    lazy::backward(loss);
    opt->step();
    lazy::mark_step();
    run.losses.push_back(testing::item(loss));
    if (metrics != nullptr) metrics->push_back(lazy::metrics());
  }
  net->eval();
  {
    lazy::NoGradGuard no_grad;
    const auto pred = values(lazy::argmax(net->forward(x), 1));
    const std::vector<double> want = {0, 1, 1, 0};
    for (std::size_t i = 0; i < 4; ++i) run.correct += pred[i] == want[i] ? 1 : 0;
  }
  lazy::set_lazy(previous);
  return run;
}

TEST(TrainTest, MlpLearnsXorLazyAndEagerWithSgdAndAdam) {
  for (bool lazy_mode : {true, false}) {
    for (Opt which : {Opt::kSgd, Opt::kAdam}) {
      SCOPED_TRACE(
          fmt::format("{} {}", lazy_mode ? "lazy" : "eager", which == Opt::kSgd ? "sgd" : "adam"));
      const TrainResult run = train_xor(lazy_mode, which, 200);
      EXPECT_LT(run.losses.back(), 0.05);
      EXPECT_LT(run.losses.back(), run.losses.front());
      EXPECT_EQ(run.correct, 4);
    }
  }
}

TEST(TrainTest, LazyAndEagerTrainingGiveTheSameLosses) {
  for (Opt which : {Opt::kSgd, Opt::kAdam}) {
    const TrainResult lazy_run = train_xor(true, which, 50);
    const TrainResult eager_run = train_xor(false, which, 50);
    ASSERT_EQ(lazy_run.losses.size(), eager_run.losses.size());
    for (std::size_t i = 0; i < lazy_run.losses.size(); ++i) {
      EXPECT_NEAR(lazy_run.losses[i], eager_run.losses[i], 1e-4 * (1 + eager_run.losses[i]))
          << "step " << i;
    }
  }
}

TEST(TrainTest, RepeatedLazyStepCompilesNothingAfterStepTwo) {
  for (Opt which : {Opt::kSgd, Opt::kAdam}) {
    for (double dropout : {0.0, 0.25}) {
      SCOPED_TRACE(fmt::format("{} dropout {}", which == Opt::kSgd ? "sgd" : "adam", dropout));
      lazy::reset_metrics();
      std::vector<lazy::Metrics> m;
      // A width no other test uses, so the programs are not in the cache already.
      train_xor(true, which, 8, &m, dropout, /*hidden=*/7);
      ASSERT_EQ(m.size(), 8u);
      EXPECT_GT(m[1].compiles, 0);
      // Step 1 (fresh optimizer state) and step 2 may compile; none after.
      EXPECT_EQ(m.back().compiles, m[1].compiles);
      // Nothing in forward, backward or step() reads a value: one graph run per step, its
      // mark_step.
      EXPECT_EQ(m.back().forced_syncs, 0);
      EXPECT_EQ(m.back().steps - m[0].steps, 7);
    }
  }
}

}  // namespace
}  // namespace c10d::inline v1
