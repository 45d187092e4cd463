// The backward engine's contract: hooks fire once per leaf, in the order gradients become
// final, with the final gradient; accumulation across backward() calls; no_grad and detach;
// freed graphs; errors; deep graphs. Every test runs lazy and eager.
#include <gtest/gtest.h>

#include <algorithm>
#include <thread>

#include "autograd_testing.h"
#include "c10d/errors.h"
#include "c10d/lazy.h"
#include "lazy/autograd.h"

namespace c10d::inline v1 {
namespace {

using testing::make;
using testing::values;

Tensor leaf(std::vector<double> v, std::vector<std::int64_t> shape) {
  Tensor t = make(v, std::move(shape));
  lazy::set_requires_grad(t);
  return t;
}

void expect_values(const Tensor& t, const std::vector<double>& want, double tol = 1e-12) {
  ASSERT_TRUE(t.defined());
  auto got = values(t);
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
}

class AutogradEngineTest : public testing::BothModes {};

TEST_P(AutogradEngineTest, HooksFireOnceEachInReverseOrderOfUse) {
  Tensor x = make({1, 2, 3}, {3});
  Tensor p1 = leaf({2, 2, 2}, {3});
  Tensor p2 = leaf({3, 3, 3}, {3});
  Tensor p3 = leaf({4, 4, 4}, {3});
  std::vector<std::string> fired;
  std::vector<Tensor> seen;
  auto hook_for = [&](std::string name) {
    return [&, name](const Tensor&, const Tensor& g) {
      fired.push_back(name);
      seen.push_back(g);
    };
  };
  lazy::add_grad_hook(p1, hook_for("p1"));
  lazy::add_grad_hook(p2, hook_for("p2"));
  lazy::add_grad_hook(p3, hook_for("p3"));
  Tensor loss = lazy::sum(lazy::mul(lazy::mul(lazy::mul(x, p1), p2), p3));
  lazy::backward(loss);
  EXPECT_EQ(fired, (std::vector<std::string>{"p3", "p2", "p1"}));
  // d/dp3 = x p1 p2, d/dp2 = x p1 p3, d/dp1 = x p2 p3.
  expect_values(seen[0], {6, 12, 18});
  expect_values(seen[1], {8, 16, 24});
  expect_values(seen[2], {12, 24, 36});
  expect_values(lazy::grad(p1), {12, 24, 36});
}

TEST_P(AutogradEngineTest, HookOfALeafUsedAtTwoDepthsFiresOnceWithTheWholeGradient) {
  // w is used by the first and the last op; its hook must wait for both paths.
  Tensor x = make({1, -2}, {1, 2});
  Tensor w = leaf({0.5, -1, 2, 0.25}, {2, 2});
  Tensor b = leaf({0.1, 0.2}, {2});
  std::vector<std::string> fired;
  std::vector<double> at_hook;
  lazy::add_grad_hook(w, [&](const Tensor&, const Tensor& g) {
    fired.push_back("w");
    at_hook = values(g);  // reading inside the hook: the value must already be complete
  });
  lazy::add_grad_hook(b, [&](const Tensor&, const Tensor&) { fired.push_back("b"); });
  Tensor h = lazy::tanh(lazy::add(lazy::matmul(x, w), b));
  Tensor loss = lazy::sum(lazy::matmul(h, w));
  lazy::backward(loss);
  EXPECT_EQ(fired, (std::vector<std::string>{"b", "w"}));
  const auto final_grad = values(lazy::grad(w));
  ASSERT_EQ(at_hook.size(), final_grad.size());
  for (std::size_t i = 0; i < final_grad.size(); ++i) EXPECT_DOUBLE_EQ(at_hook[i], final_grad[i]);
}

TEST_P(AutogradEngineTest, HookMayReplaceTheGradientAndCanBeRemoved) {
  Tensor w = leaf({1, 2}, {2});
  int calls = 0;
  const int id = lazy::add_grad_hook(w, [&](const Tensor& l, const Tensor& g) {
    ++calls;
    lazy::set_grad(l, lazy::mul(g, lazy::scalar(10.0, DType::kFloat64)));
  });
  lazy::backward(lazy::sum(lazy::mul(w, w)));
  expect_values(lazy::grad(w), {20, 40});
  lazy::remove_grad_hook(w, id);
  lazy::set_grad(w, Tensor());
  lazy::backward(lazy::sum(lazy::mul(w, w)));
  EXPECT_EQ(calls, 1);
  expect_values(lazy::grad(w), {2, 4});
  EXPECT_THROW(lazy::remove_grad_hook(w, id), InvalidArgument);
}

TEST_P(AutogradEngineTest, GradAccumulatesOverTwoBackwardCalls) {
  Tensor w = leaf({1, 2, 3}, {3});
  lazy::backward(lazy::sum(lazy::mul(w, w)));
  Tensor first = lazy::grad(w);
  expect_values(first, {2, 4, 6});
  lazy::backward(lazy::sum(lazy::mul(w, make({1, 1, 1}, {3}))));
  expect_values(lazy::grad(w), {3, 5, 7});
  // The handle taken after the first pass is the one accumulated into (torch's in-place .grad).
  expect_values(first, {3, 5, 7});
  lazy::set_grad(w, Tensor());
  EXPECT_FALSE(lazy::grad(w).defined());
}

TEST_P(AutogradEngineTest, NoGradRecordsNothingAndIsPerThread) {
  Tensor w = leaf({1, 2}, {2});
  EXPECT_TRUE(lazy::grad_enabled());
  {
    lazy::NoGradGuard no_grad;
    EXPECT_FALSE(lazy::grad_enabled());
    {
      lazy::NoGradGuard nested;
      EXPECT_FALSE(lazy::grad_enabled());
    }
    EXPECT_FALSE(lazy::grad_enabled());
    bool other_thread = false;
    std::thread([&] { other_thread = lazy::grad_enabled(); }).join();
    EXPECT_TRUE(other_thread);
    Tensor y = lazy::sum(lazy::mul(w, w));
    EXPECT_FALSE(lazy::requires_grad(y));
    EXPECT_EQ(y.impl()->autograd_meta(), nullptr);
    EXPECT_THROW(lazy::backward(y), InvalidArgument);
  }
  EXPECT_TRUE(lazy::grad_enabled());
  EXPECT_TRUE(lazy::requires_grad(lazy::mul(w, w)));
}

TEST_P(AutogradEngineTest, DetachAndNonDifferentiableOpsCutTheGraph) {
  Tensor w = leaf({1, -2}, {2});
  EXPECT_FALSE(lazy::requires_grad(lazy::detach(lazy::mul(w, w))));
  EXPECT_FALSE(lazy::requires_grad(lazy::gt(w, lazy::scalar(0.0, DType::kFloat64))));
  EXPECT_FALSE(lazy::requires_grad(lazy::argmax(w, 0)));
  // A detached factor is a constant: d/dw sum(w * detach(w)) = detach(w).
  lazy::backward(lazy::sum(lazy::mul(w, lazy::detach(w))));
  expect_values(lazy::grad(w), {1, -2});
}

TEST_P(AutogradEngineTest, SecondBackwardNeedsRetainGraph) {
  Tensor w = leaf({1, 2}, {2});
  Tensor loss = lazy::sum(lazy::exp(w));
  lazy::backward(loss, {}, /*retain_graph=*/true);
  lazy::backward(loss);
  expect_values(lazy::grad(w), {2 * std::exp(1.0), 2 * std::exp(2.0)}, 1e-9);
  EXPECT_THROW(lazy::backward(loss), InvalidArgument);
}

TEST_P(AutogradEngineTest, NonScalarRootNeedsGradOutput) {
  Tensor w = leaf({1, 2, 3}, {3});
  Tensor y = lazy::mul(w, w);
  EXPECT_THROW(lazy::backward(y), InvalidArgument);
  EXPECT_THROW(lazy::backward(y, make({1, 1}, {2})), InvalidArgument);
  lazy::backward(y, make({1, 0, -1}, {3}));
  expect_values(lazy::grad(w), {2, 0, -6});
  // A leaf may be the root.
  lazy::set_grad(w, Tensor());
  lazy::backward(w, make({5, 6, 7}, {3}));
  expect_values(lazy::grad(w), {5, 6, 7});
}

TEST_P(AutogradEngineTest, GradientOfACastComesBackInTheLeafDtype) {
  Tensor w = leaf({0.5, -1.25, 3}, {3});
  Tensor y = lazy::cast(w, DType::kFloat32);
  lazy::backward(lazy::sum(lazy::mul(y, y)));
  ASSERT_EQ(lazy::grad(w).dtype(), DType::kFloat64);
  expect_values(lazy::grad(w), {1, -2.5, 6}, 1e-6);
}

TEST_P(AutogradEngineTest, BadRequestsAreRejected) {
  Tensor ints = make({1, 2}, {2}, DType::kInt64);
  EXPECT_THROW(lazy::set_requires_grad(ints), InvalidArgument);
  Tensor w = leaf({1, 2}, {2});
  Tensor y = lazy::mul(w, w);
  EXPECT_THROW(lazy::set_requires_grad(y, false), InvalidArgument);
  EXPECT_THROW(lazy::add_grad_hook(y, [](const Tensor&, const Tensor&) {}), InvalidArgument);
  EXPECT_THROW(lazy::add_grad_hook(make({1}, {1}), [](const Tensor&, const Tensor&) {}),
               InvalidArgument);
  EXPECT_THROW(lazy::set_grad(w, make({1, 2, 3}, {3})), InvalidArgument);
  // A leaf that stops requiring grad gets no gradient.
  Tensor v = leaf({1, 2}, {2});
  lazy::set_requires_grad(v, false);
  lazy::backward(lazy::sum(lazy::mul(w, v)));
  EXPECT_FALSE(lazy::grad(v).defined());
  expect_values(lazy::grad(w), {1, 2});
}

TEST_P(AutogradEngineTest, ReachableLeavesNamesWhatABackwardWouldReach) {
  // DDP's find_unused_parameters: w2 takes no part in the loss.
  Tensor w1 = leaf({1, 2}, {2});
  Tensor w2 = leaf({3, 4}, {2});
  Tensor w3 = leaf({5, 6}, {2});
  Tensor loss = lazy::sum(lazy::add(lazy::mul(w1, w3), lazy::mul(w1, w1)));
  std::vector<const TensorImpl*> got;
  for (const Tensor& t : lazy::autograd::reachable_leaves({loss})) got.push_back(t.impl().get());
  std::sort(got.begin(), got.end());
  std::vector<const TensorImpl*> want = {w1.impl().get(), w3.impl().get()};
  std::sort(want.begin(), want.end());
  EXPECT_EQ(got, want);
  EXPECT_EQ(lazy::autograd::reachable_leaves({w2}).size(), 1u);
  EXPECT_TRUE(lazy::autograd::reachable_leaves({make({1}, {1})}).empty());
}

TEST_P(AutogradEngineTest, ThreadsWithTheirOwnGraphsRunSideBySide) {
  // Ranks run as threads (DDP's tests) each record and differentiate their own graphs.
  std::vector<int> wrong(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t, &wrong] {
      for (int i = 0; i < 50; ++i) {
        const double a = t + 1, b = 0.5 * i;
        Tensor w = leaf({a, b}, {2});
        lazy::backward(lazy::sum(lazy::mul(lazy::mul(w, w), w)));
        const auto g = values(lazy::grad(w));
        if (g[0] != 3 * a * a || g[1] != 3 * b * b) ++wrong[static_cast<std::size_t>(t)];
      }
      lazy::mark_step();
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST_P(AutogradEngineTest, DeepChainNeedsNoRecursion) {
  // Deep enough that a recursive walk or destructor chain would exhaust the stack. Eager only:
  // a lazy IR chain this deep is the core's test, not autograd's.
  if (GetParam()) GTEST_SKIP() << "eager only";
  Tensor w = leaf({1}, {1});
  Tensor y = w;
  for (int i = 0; i < 100000; ++i) y = y * 1.0;
  lazy::backward(lazy::sum(y));
  expect_values(lazy::grad(w), {1});
}

INSTANTIATE_TEST_SUITE_P(Modes, AutogradEngineTest, ::testing::Bool(), testing::mode_name);

}  // namespace
}  // namespace c10d::inline v1
