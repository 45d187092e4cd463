// Finite-difference checks of every differentiable op's backward rule, in float64 with central
// differences, in lazy and in eager mode, including broadcast operands.
//
// For f(inputs) with output y, the test takes loss = sum(y * w) with fixed random weights w (so
// the gradient flowing into the rule is not all ones), runs backward(loss), and compares each
// input's .grad with (loss(x + eps) - loss(x - eps)) / (2 eps) element by element.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>

#include "autograd_testing.h"
#include "c10d/lazy.h"

namespace c10d::inline v1 {
namespace {

using lazy::Shape;
using testing::make;
using testing::values;

struct Input {
  std::vector<double> values;
  Shape shape;
  bool differentiable = true;
  DType dtype = DType::kFloat64;  // non-float inputs (labels, conditions) are not perturbed
};

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

constexpr double kEps = 1e-6;

double weighted_loss(const Fn& f, const std::vector<Input>& inputs, const std::vector<double>& w) {
  lazy::NoGradGuard no_grad;
  std::vector<Tensor> ts;
  for (const auto& in : inputs) ts.push_back(make(in.values, in.shape, in.dtype));
  Tensor y = f(ts);
  return testing::item(lazy::sum(lazy::mul(y, make(w, y.shape()))));
}

void gradcheck(const std::string& what, const Fn& f, std::vector<Input> inputs) {
  SCOPED_TRACE(what);
  std::vector<Tensor> leaves;
  for (const auto& in : inputs) {
    Tensor t = make(in.values, in.shape, in.dtype);
    if (in.differentiable) lazy::set_requires_grad(t);
    leaves.push_back(t);
  }
  Tensor y = f(leaves);
  ASSERT_TRUE(lazy::requires_grad(y));
  const auto w = testing::uniform_values(static_cast<std::size_t>(y.numel()), 0.5, 1.5, 7);
  Tensor loss = lazy::sum(lazy::mul(y, make(w, y.shape())));
  lazy::backward(loss);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].differentiable) {
      EXPECT_FALSE(lazy::grad(leaves[i]).defined());
      continue;
    }
    Tensor g = lazy::grad(leaves[i]);
    ASSERT_TRUE(g.defined()) << "input " << i << " got no gradient";
    ASSERT_EQ(g.shape(), inputs[i].shape) << "input " << i;
    ASSERT_EQ(g.dtype(), DType::kFloat64);
    const std::vector<double> analytic = values(g);
    for (std::size_t j = 0; j < inputs[i].values.size(); ++j) {
      auto plus = inputs;
      auto minus = inputs;
      plus[i].values[j] += kEps;
      minus[i].values[j] -= kEps;
      const double numeric = (weighted_loss(f, plus, w) - weighted_loss(f, minus, w)) / (2 * kEps);
      EXPECT_NEAR(analytic[j], numeric, 1e-6 + 1e-5 * std::abs(numeric))
          << "input " << i << " element " << j;
    }
  }
}

Input in(Shape shape, std::uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return {testing::uniform_values(n, lo, hi, seed), std::move(shape)};
}

// Values in +-[0.2, 1.5): nowhere near a kink at 0, and distinct between operands.
Input kinked(Shape shape, std::uint32_t seed) {
  std::size_t n = 1;
  for (auto d : shape) n *= static_cast<std::size_t>(d);
  return {testing::away_from_zero(n, 0.2, 1.5, seed), std::move(shape)};
}

Input positive(Shape shape, std::uint32_t seed) { return in(std::move(shape), seed, 0.5, 2.0); }

Fn binary(Tensor (*op)(const Tensor&, const Tensor&)) {
  return [op](const std::vector<Tensor>& t) { return op(t[0], t[1]); };
}
Fn unary(Tensor (*op)(const Tensor&)) {
  return [op](const std::vector<Tensor>& t) { return op(t[0]); };
}

class GradcheckTest : public testing::BothModes {};

TEST_P(GradcheckTest, AddSubMulDivWithBroadcasting) {
  const std::vector<std::pair<Shape, Shape>> shapes = {
      {{2, 3}, {2, 3}}, {{2, 3}, {3}}, {{4, 1}, {1, 3}}, {{2, 1, 3}, {4, 3}}, {{2, 3}, {}}};
  for (const auto& [sa, sb] : shapes) {
    gradcheck("add", binary(lazy::add), {in(sa, 1), in(sb, 2)});
    gradcheck("sub", binary(lazy::sub), {in(sa, 3), in(sb, 4)});
    gradcheck("mul", binary(lazy::mul), {in(sa, 5), in(sb, 6)});
    gradcheck("div", binary(lazy::div), {in(sa, 7), positive(sb, 8)});
  }
}

TEST_P(GradcheckTest, ScalarOperators) {
  gradcheck("tensor-scalar operators",
            [](const std::vector<Tensor>& t) {
              return (2.0 - t[0]) * 3.0 + t[0] / 4.0 - 1.0 + 5.0 / (t[0] + 3.0) + (-t[0]);
            },
            {in({2, 3}, 9)});
}

TEST_P(GradcheckTest, MaximumMinimum) {
  gradcheck("maximum", binary(lazy::maximum), {kinked({2, 3}, 10), kinked({2, 3}, 11)});
  gradcheck("maximum broadcast", binary(lazy::maximum), {kinked({2, 3}, 12), kinked({3}, 13)});
  gradcheck("minimum", binary(lazy::minimum), {kinked({2, 3}, 14), kinked({2, 3}, 15)});
  gradcheck("minimum broadcast", binary(lazy::minimum), {kinked({4, 1}, 16), kinked({3}, 17)});
}

TEST_P(GradcheckTest, UnaryMath) {
  gradcheck("neg", unary(lazy::neg), {in({2, 3}, 20)});
  gradcheck("abs", unary(lazy::abs), {kinked({2, 3}, 21)});
  gradcheck("exp", unary(lazy::exp), {in({2, 3}, 22)});
  gradcheck("log", unary(lazy::log), {positive({2, 3}, 23)});
  gradcheck("sqrt", unary(lazy::sqrt), {positive({2, 3}, 24)});
  gradcheck("tanh", unary(lazy::tanh), {in({2, 3}, 25)});
  gradcheck("sigmoid", unary(lazy::sigmoid), {in({2, 3}, 26, -3, 3)});
  gradcheck("relu", unary(lazy::relu), {kinked({3, 4}, 27)});
}

TEST_P(GradcheckTest, PowByEveryKindOfExponent) {
  for (double e : {2.0, 3.0, 1.0, 0.0}) {
    gradcheck("pow " + std::to_string(e),
              [e](const std::vector<Tensor>& t) { return lazy::pow(t[0], e); }, {in({2, 3}, 30)});
  }
  for (double e : {0.5, -1.5, 2.7}) {
    gradcheck("pow " + std::to_string(e),
              [e](const std::vector<Tensor>& t) { return lazy::pow(t[0], e); },
              {positive({2, 3}, 31)});
  }
}

TEST_P(GradcheckTest, WhereWithBroadcastOperands) {
  Input cond{{1, 0, 1}, {3}, false, DType::kBool};
  gradcheck("where", [](const std::vector<Tensor>& t) { return lazy::where(t[0], t[1], t[2]); },
            {cond, in({2, 3}, 32), in({2, 1}, 33)});
  // A condition computed from the operand itself: the comparison carries no gradient.
  gradcheck("where(x > 0, x, 0.1 x)",
            [](const std::vector<Tensor>& t) {
              return lazy::where(lazy::gt(t[0], lazy::scalar(0.0, DType::kFloat64)), t[0],
                                 t[0] * 0.1);
            },
            {kinked({2, 3}, 34)});
}

TEST_P(GradcheckTest, CastThroughFloat64) {
  gradcheck("cast f64->f64",
            [](const std::vector<Tensor>& t) { return lazy::cast(t[0], DType::kFloat64); },
            {in({2, 3}, 35)});
}

TEST_P(GradcheckTest, ReductionsOverEveryAxisChoice) {
  using Axes = std::vector<std::int64_t>;
  for (const Axes& axes : {Axes{}, Axes{0}, Axes{-1}, Axes{0, 2}, Axes{1}}) {
    for (bool keep : {false, true}) {
      const std::string tag = fmt::format("axes [{}] keepdim {}", fmt::join(axes, ","), keep);
      gradcheck("sum " + tag,
                [=](const std::vector<Tensor>& t) { return lazy::sum(t[0], axes, keep); },
                {in({2, 3, 4}, 40)});
      gradcheck("mean " + tag,
                [=](const std::vector<Tensor>& t) { return lazy::mean(t[0], axes, keep); },
                {in({2, 3, 4}, 41)});
      gradcheck("max " + tag,
                [=](const std::vector<Tensor>& t) { return lazy::max(t[0], axes, keep); },
                {in({2, 3, 4}, 42)});
    }
  }
}

TEST_P(GradcheckTest, MatmulPlainBatchedAndBroadcast) {
  const std::vector<std::pair<Shape, Shape>> shapes = {{{3, 4}, {4, 5}},
                                                       {{2, 3, 4}, {2, 4, 5}},
                                                       {{2, 3, 4}, {4, 5}},
                                                       {{3, 4}, {2, 4, 5}},
                                                       {{2, 1, 3, 4}, {3, 4, 2}}};
  for (const auto& [sa, sb] : shapes) {
    gradcheck(fmt::format("matmul [{}] x [{}]", fmt::join(sa, ","), fmt::join(sb, ",")),
              binary(lazy::matmul), {in(sa, 50), in(sb, 51)});
  }
}

TEST_P(GradcheckTest, ShapeOps) {
  gradcheck("transpose default", [](const std::vector<Tensor>& t) { return lazy::transpose(t[0]); },
            {in({3, 4}, 60)});
  gradcheck("transpose 0,2",
            [](const std::vector<Tensor>& t) { return lazy::transpose(t[0], 0, 2); },
            {in({2, 3, 4}, 61)});
  gradcheck("reshape",
            [](const std::vector<Tensor>& t) {
              return lazy::reshape(t[0], {3, -1});
            },
            {in({2, 6}, 62)});
  gradcheck("slice_rows middle",
            [](const std::vector<Tensor>& t) { return lazy::slice_rows(t[0], 1, 3); },
            {in({5, 3}, 63)});
  gradcheck("slice_rows all",
            [](const std::vector<Tensor>& t) { return lazy::slice_rows(t[0], 0, 4); },
            {in({4, 2}, 64)});
  gradcheck("slice_rows head",
            [](const std::vector<Tensor>& t) { return lazy::slice_rows(t[0], 0, 2); },
            {in({4, 2}, 65)});
  gradcheck("concat axis 0",
            [](const std::vector<Tensor>& t) {
              return lazy::concat({t[0], t[1], t[2]}, 0);
            },
            {in({2, 3}, 66), in({1, 3}, 67), in({3, 3}, 68)});
  gradcheck("concat axis 1",
            [](const std::vector<Tensor>& t) {
              return lazy::concat({t[0], t[1]}, 1);
            },
            {in({2, 3}, 69), in({2, 2}, 70)});
  gradcheck("concat axis -1 of 3-D",
            [](const std::vector<Tensor>& t) {
              return lazy::concat({t[0], t[1]}, -1);
            },
            {in({2, 2, 3}, 71), in({2, 2, 1}, 72)});
  gradcheck("broadcast_to [3]->[2,3]",
            [](const std::vector<Tensor>& t) {
              return lazy::broadcast_to(t[0], {2, 3});
            },
            {in({3}, 73)});
  gradcheck("broadcast_to [2,1]->[3,2,4]",
            [](const std::vector<Tensor>& t) {
              return lazy::broadcast_to(t[0], {3, 2, 4});
            },
            {in({2, 1}, 74)});
}

TEST_P(GradcheckTest, SoftmaxLogSoftmaxCrossEntropy) {
  for (std::int64_t axis : {-1, 0}) {
    gradcheck("softmax", [=](const std::vector<Tensor>& t) { return lazy::softmax(t[0], axis); },
              {in({3, 4}, 80, -2, 2)});
    gradcheck("log_softmax",
              [=](const std::vector<Tensor>& t) { return lazy::log_softmax(t[0], axis); },
              {in({3, 4}, 81, -2, 2)});
  }
  Input labels{{2, 0, 3}, {3}, false, DType::kInt64};
  gradcheck("cross_entropy",
            [](const std::vector<Tensor>& t) { return lazy::cross_entropy(t[0], t[1]); },
            {in({3, 4}, 82, -2, 2), labels});
}

TEST_P(GradcheckTest, ComposedGraphsAndReuse) {
  // A leaf used on several paths accumulates them.
  gradcheck("x*x + x",
            [](const std::vector<Tensor>& t) { return lazy::add(lazy::mul(t[0], t[0]), t[0]); },
            {in({2, 3}, 90)});
  // One Linear-tanh-Linear-cross_entropy network, every parameter at once.
  Input labels{{1, 0, 2, 1}, {4}, false, DType::kInt64};
  gradcheck("mlp",
            [](const std::vector<Tensor>& t) {
              Tensor h = lazy::tanh(lazy::add(lazy::matmul(t[0], lazy::transpose(t[1])), t[2]));
              Tensor logits = lazy::add(lazy::matmul(h, lazy::transpose(t[3])), t[4]);
              return lazy::cross_entropy(logits, t[5]);
            },
            {in({4, 3}, 91), in({5, 3}, 92), in({5}, 93), in({3, 5}, 94), in({3}, 95), labels});
}

INSTANTIATE_TEST_SUITE_P(Modes, GradcheckTest, ::testing::Bool(), testing::mode_name);

}  // namespace
}  // namespace c10d::inline v1
