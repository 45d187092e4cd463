// SGD, Adam and AdamW against torch's update rules computed by hand (a scalar reference in
// double, written out below from torch/optim/{sgd,adam,adamw}.py's single-tensor code), for
// several steps with changing gradients; skipped parameters; optimizer state round trips.
#include "c10d/optim.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>

#include "../lazy/autograd_testing.h"
#include "c10d/errors.h"

namespace c10d::inline v1 {
namespace {

using testing::make;
using testing::values;

const std::vector<double> kInit = {1.0, -2.0, 0.5};

// The gradient given at step s (1-based): changes sign and size so momentum matters.
std::vector<double> grad_at(int s) { return {0.3 * s, -0.2 + 0.05 * s, s % 2 == 0 ? 1.0 : -0.7}; }

Tensor param() {
  Tensor p = make(kInit, {3});
  lazy::set_requires_grad(p);
  return p;
}

struct SgdRef {
  optim::SGDOptions o;
  std::vector<double> p = kInit, buf;
  void step(const std::vector<double>& g) {
    if (buf.empty()) buf.assign(p.size(), 0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + o.weight_decay * p[i];
      if (o.momentum != 0) {
        buf[i] = first ? d : o.momentum * buf[i] + (1 - o.dampening) * d;
        d = o.nesterov ? d + o.momentum * buf[i] : buf[i];
      }
      p[i] -= o.lr * d;
    }
    first = false;
  }
  bool first = true;
};

struct AdamRef {
  optim::AdamOptions o;
  bool decoupled = false;
  std::vector<double> p = kInit, m = {0, 0, 0}, v = {0, 0, 0};
  int t = 0;
  void step(const std::vector<double>& g_in) {
    ++t;
    const double bc1 = 1 - std::pow(o.beta1, t), bc2 = 1 - std::pow(o.beta2, t);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double g = g_in[i];
      if (decoupled) {
        p[i] *= 1 - o.lr * o.weight_decay;
      } else {
        g += o.weight_decay * p[i];
      }
      m[i] = o.beta1 * m[i] + (1 - o.beta1) * g;
      v[i] = o.beta2 * v[i] + (1 - o.beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(bc2) + o.eps;
      p[i] -= o.lr / bc1 * m[i] / denom;
    }
  }
};

void expect_near(const Tensor& t, const std::vector<double>& want, const std::string& what) {
  const auto got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], 1e-12 * (1 + std::abs(want[i]))) << what << " element " << i;
  }
}

template <typename Opt, typename Ref>
void run_against(Opt& opt, Ref& ref, const Tensor& p, const std::string& what, int steps = 4) {
  for (int s = 1; s <= steps; ++s) {
    lazy::set_grad(p, make(grad_at(s), {3}));
    opt.step();
    ref.step(grad_at(s));
    lazy::mark_step();
    expect_near(p, ref.p, what + " step " + std::to_string(s));
  }
}

class OptimTest : public testing::BothModes {};

TEST_P(OptimTest, SgdPlainStepIsPMinusLrG) {
  Tensor p = param();
  optim::SGD sgd({p}, {.lr = 0.1});
  lazy::set_grad(p, make({1, 2, 3}, {3}));
  sgd.step();
  expect_near(p, {0.9, -2.2, 0.2}, "plain");
}

TEST_P(OptimTest, SgdMatchesTorchForEveryOptionMix) {
  const std::vector<optim::SGDOptions> cases = {
      {.lr = 0.1},
      {.lr = 0.1, .momentum = 0.9},
      {.lr = 0.05, .momentum = 0.9, .dampening = 0.1},
      {.lr = 0.1, .momentum = 0.9, .nesterov = true},
      {.lr = 0.1, .momentum = 0.8, .nesterov = true, .weight_decay = 0.01},
      {.lr = 0.2, .weight_decay = 0.1},
  };
  for (const auto& o : cases) {
    Tensor p = param();
    optim::SGD sgd({p}, o);
    SgdRef ref{o};
    run_against(sgd, ref, p,
                fmt::format("sgd momentum {} dampening {} nesterov {} wd {}", o.momentum,
                            o.dampening, o.nesterov, o.weight_decay));
  }
}

TEST_P(OptimTest, AdamAndAdamWMatchTorchWithBiasCorrection) {
  for (double wd : {0.0, 0.05}) {
    const optim::AdamOptions o{
        .lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .weight_decay = wd};
    Tensor p = param();
    optim::Adam adam({p}, o);
    AdamRef ref{o};
    run_against(adam, ref, p, fmt::format("adam wd {}", wd), 5);
    Tensor q = param();
    optim::AdamW adamw(
        {q}, {.lr = o.lr, .beta1 = o.beta1, .beta2 = o.beta2, .eps = o.eps, .weight_decay = wd});
    AdamRef refw{o, /*decoupled=*/true};
    run_against(adamw, refw, q, fmt::format("adamw wd {}", wd), 5);
  }
  // Step 1 by hand: m = 0.1 g, v = 0.01 g^2, m_hat = g, v_hat = g^2, so p -= lr * sign(g).
  Tensor p = param();
  optim::Adam adam({p}, {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.99, .eps = 0});
  lazy::set_grad(p, make({2, -3, 0.5}, {3}));
  adam.step();
  expect_near(p, {0.99, -1.99, 0.49}, "adam step 1");
  EXPECT_EQ(optim::AdamWOptions{}.weight_decay, 0.01);
}

TEST_P(OptimTest, ParametersWithoutGradientAreLeftAlone) {
  Tensor p = param();
  Tensor q = param();
  optim::SGD sgd({p, q}, {.lr = 0.1, .momentum = 0.9});
  lazy::set_grad(p, make({1, 1, 1}, {3}));
  sgd.step();
  expect_near(q, kInit, "untouched");
  expect_near(p, {0.9, -2.1, 0.4}, "stepped");
  sgd.zero_grad();
  EXPECT_FALSE(lazy::grad(p).defined());
  EXPECT_THROW(optim::SGD({p, p}, {}), InvalidArgument);
  EXPECT_THROW(optim::SGD({make({1}, {1})}, {}), InvalidArgument);
  EXPECT_THROW(optim::SGD({p}, {.lr = 0.1, .nesterov = true}), InvalidArgument);
}

TEST_P(OptimTest, ChangingTheLearningRateEveryStepRecompilesNothing) {
  // A schedule: lr enters the program as data, so steps after the second reuse one program.
  Tensor p = make({0.25, -1.5, 3.0, 0.125, 7.0}, {5});
  lazy::set_requires_grad(p);
  optim::SGD sgd({p}, {.lr = 0.1, .momentum = 0.5});
  SgdRef ref{{.lr = 0.1, .momentum = 0.5}};
  ref.p = values(p);
  std::int64_t compiles_after_2 = 0;
  for (int s = 1; s <= 6; ++s) {
    sgd.set_lr(0.1 / s);
    ref.o.lr = 0.1 / s;
    const std::vector<double> g = {0.1 * s, -0.2, 0.3, 1.0 / s, -0.05 * s};
    lazy::set_grad(p, make(g, {5}));
    sgd.step();
    ref.step(g);
    lazy::mark_step();
    expect_near(p, ref.p, "step " + std::to_string(s));
    if (s == 2) compiles_after_2 = lazy::metrics().compiles;
  }
  EXPECT_EQ(lazy::metrics().compiles, compiles_after_2);
  EXPECT_EQ(sgd.steps(), 6);
  EXPECT_THROW(sgd.set_lr(-1), InvalidArgument);
}

TEST_P(OptimTest, StateDictResumesWhereItLeftOff) {
  const optim::AdamOptions o{.lr = 0.01};
  Tensor p = param();
  optim::Adam adam({p}, o);
  AdamRef ref{o};
  run_against(adam, ref, p, "before save", 2);
  const auto state = adam.state_dict();
  std::vector<std::string> names;
  for (const auto& [n, t] : state) names.push_back(n);
  EXPECT_EQ(names, (std::vector<std::string>{"step", "0.exp_avg", "0.exp_avg_sq"}));
  // A fresh optimizer over the same parameter continues the same trajectory.
  optim::Adam resumed({p}, o);
  resumed.load_state_dict(state);
  EXPECT_EQ(resumed.steps(), 2);
  for (int s = 3; s <= 4; ++s) {
    lazy::set_grad(p, make(grad_at(s), {3}));
    resumed.step();
    ref.step(grad_at(s));
    lazy::mark_step();
    expect_near(p, ref.p, "after load step " + std::to_string(s));
  }
  auto bad = state;
  bad[1].second = make({1, 2}, {2});
  EXPECT_THROW(resumed.load_state_dict(bad), InvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Modes, OptimTest, ::testing::Bool(), testing::mode_name);

}  // namespace
}  // namespace c10d::inline v1
