// Every op against hand-computed values, in eager and in lazy mode (the test parameter).
#include <cmath>
#include <functional>
#include <string>

#include "c10d/errors.h"
#include "lazy_testing.h"

namespace c10d::inline v1::lazy {
namespace {

using testing::expect_near;
using testing::f32;
using testing::f64;
using testing::i32;
using testing::i64;
using testing::values;

class OpsTest : public ::testing::TestWithParam<bool> {
 protected:
  OpsTest() : mode_(GetParam()) {}
  testing::ModeGuard mode_;
};

TEST_P(OpsTest, ArithmeticBroadcastsLikeNumpy) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor row = f32({10, 20, 30}, {3});
  Tensor col = f32({100, 200}, {2, 1});
  expect_near(values(add(a, row)), {11, 22, 33, 14, 25, 36});
  expect_near(values(sub(a, col)), {-99, -98, -97, -196, -195, -194});
  expect_near(values(mul(a, row)), {10, 40, 90, 40, 100, 180});
  expect_near(values(div(a, col)), {0.01, 0.02, 0.03, 0.02, 0.025, 0.03});
  expect_near(values(maximum(a, f32({3}, {1}))), {3, 3, 3, 4, 5, 6});
  expect_near(values(minimum(a, f32({3}, {1}))), {1, 2, 3, 3, 3, 3});
  EXPECT_EQ(add(col, row).shape(), (std::vector<std::int64_t>{2, 3}));
}

TEST_P(OpsTest, UnaryMath) {
  Tensor x = f32({-1.5f, 0.25f, 2});
  expect_near(values(neg(x)), {1.5, -0.25, -2});
  expect_near(values(abs(x)), {1.5, 0.25, 2});
  expect_near(values(relu(x)), {0, 0.25, 2});
  expect_near(values(exp(x)), {std::exp(-1.5), std::exp(0.25), std::exp(2.0)});
  expect_near(values(tanh(x)), {std::tanh(-1.5), std::tanh(0.25), std::tanh(2.0)});
  expect_near(values(sigmoid(x)),
              {1 / (1 + std::exp(1.5)), 1 / (1 + std::exp(-0.25)), 1 / (1 + std::exp(-2.0))});
  Tensor p = f32({0.25f, 4, 9});
  expect_near(values(log(p)), {std::log(0.25), std::log(4.0), std::log(9.0)});
  expect_near(values(sqrt(p)), {0.5, 2, 3});
  expect_near(values(pow(p, 2)), {0.0625, 16, 81});
  expect_near(values(pow(p, 0.5)), {0.5, 2, 3});
  expect_near(values(pow(p, -1)), {4, 0.25, 1.0 / 9});
  expect_near(values(pow(p, 1.5)), {0.125, 8, 27});
}

TEST_P(OpsTest, ComparisonsGiveBoolAndWhereSelects) {
  Tensor a = f32({1, 2, 3});
  Tensor b = f32({3, 2, 1});
  EXPECT_EQ(lt(a, b).dtype(), DType::kBool);
  expect_near(values(eq(a, b)), {0, 1, 0});
  expect_near(values(ne(a, b)), {1, 0, 1});
  expect_near(values(lt(a, b)), {1, 0, 0});
  expect_near(values(le(a, b)), {1, 1, 0});
  expect_near(values(gt(a, b)), {0, 0, 1});
  expect_near(values(ge(a, b)), {0, 1, 1});
  expect_near(values(where(gt(a, b), a, f32({-1}, {1}))), {-1, -1, 3});
}

TEST_P(OpsTest, IntegerArithmeticAndPromotion) {
  Tensor a = i64({7, -8, 9});
  Tensor b = i32({2, 3, -4}, {3});
  Tensor s = add(a, b);
  EXPECT_EQ(s.dtype(), DType::kInt64);
  expect_near(values(s), {9, -5, 5});
  expect_near(values(mul(a, b)), {14, -24, -36});
  Tensor q = div(a, b);  // true division, as torch
  EXPECT_EQ(q.dtype(), DType::kFloat32);
  expect_near(values(q), {3.5, -8.0 / 3, -2.25});
  Tensor mixed = add(b, f32({0.5f, 0.5f, 0.5f}));
  EXPECT_EQ(mixed.dtype(), DType::kFloat32);
  expect_near(values(mixed), {2.5, 3.5, -3.5});
  EXPECT_EQ(add(f32({1}), f64({1}, {1})).dtype(), DType::kFloat64);
  EXPECT_EQ(exp(a).dtype(), DType::kFloat32);
  expect_near(values(abs(a)), {7, 8, 9});
}

TEST_P(OpsTest, ScalarOperandsTakeTheTensorDtype) {
  Tensor x = f32({1, 2});
  Tensor y = (x * 0.5 + 1.0) / 2.0 - 0.25;
  EXPECT_EQ(y.dtype(), DType::kFloat32);
  expect_near(values(y), {0.5, 0.75});
  expect_near(values(2.0 - x), {1, 0});
  expect_near(values(6.0 / x), {6, 3});
  expect_near(values(3.0 * x), {3, 6});
  expect_near(values(1.0 + x), {2, 3});
  Tensor n = i64({3, 4});
  EXPECT_EQ((n * 2.0).dtype(), DType::kInt64);
  EXPECT_EQ((n * 0.5).dtype(), DType::kFloat32);
  expect_near(values(n * 0.5), {1.5, 2});
  expect_near(values(-x), {-1, -2});
  expect_near(values(x + x), {2, 4});
  expect_near(values(x - x * x), {0, -2});
  expect_near(values(x / x), {1, 1});
}

TEST_P(OpsTest, CastConvertsEveryWay) {
  Tensor x = f32({-1.75f, 0, 2.5f});
  expect_near(values(cast(x, DType::kInt32)), {-1, 0, 2});
  expect_near(values(cast(x, DType::kBool)), {1, 0, 1});
  expect_near(values(cast(cast(x, DType::kFloat16), DType::kFloat32)), {-1.75, 0, 2.5});
  expect_near(values(cast(cast(x, DType::kBFloat16), DType::kFloat64)), {-1.75, 0, 2.5});
  expect_near(values(cast(i64({1, 2}), DType::kFloat64)), {1, 2});
}

TEST_P(OpsTest, Reductions) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  expect_near(values(sum(a)), {21});
  expect_near(values(sum(a, {0})), {5, 7, 9});
  expect_near(values(sum(a, {-1})), {6, 15});
  expect_near(values(mean(a, {1})), {2, 5});
  expect_near(values(max(a, {0})), {4, 5, 6});
  expect_near(values(max(a)), {6});
  Tensor k = sum(a, {1}, true);
  EXPECT_EQ(k.shape(), (std::vector<std::int64_t>{2, 1}));
  Tensor am = argmax(f32({1, 9, 3, 7, 2, 8}, {2, 3}), 1);
  EXPECT_EQ(am.dtype(), DType::kInt64);
  expect_near(values(am), {1, 2});
  EXPECT_EQ(argmax(a, 0, true).shape(), (std::vector<std::int64_t>{1, 3}));
  // Axes that are not one block: [2, 3, 4] over {0, 2}.
  std::vector<float> v(24);
  for (int i = 0; i < 24; ++i) v[static_cast<std::size_t>(i)] = static_cast<float>(i);
  Tensor c = f32(v, {2, 3, 4});
  expect_near(values(sum(c, {0, 2})), {0 + 1 + 2 + 3 + 12 + 13 + 14 + 15, 92, 124});
  expect_near(values(mean(c, {2, 0})), {7.5, 11.5, 15.5});
  EXPECT_EQ(sum(c, {0, 2}, true).shape(), (std::vector<std::int64_t>{1, 3, 1}));
  Tensor ints = sum(i32({1, 2, 3}, {3}));
  EXPECT_EQ(ints.dtype(), DType::kInt64);
  expect_near(values(ints), {6});
  expect_near(values(sum(cast(f32({1, 0, 1}), DType::kBool))), {2});
}

TEST_P(OpsTest, MatmulPlainAndBatched) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = f32({1, 0, 0, 1, 1, 1}, {3, 2});
  expect_near(values(matmul(a, b)), {4, 5, 10, 11});
  Tensor ba = f32({1, 2, 3, 4, 5, 6, 7, 8}, {2, 2, 2});
  Tensor eye = f32({0, 1, 1, 0}, {2, 2});
  Tensor r = matmul(ba, eye);  // a 2-D operand broadcasts over the batch
  EXPECT_EQ(r.shape(), (std::vector<std::int64_t>{2, 2, 2}));
  expect_near(values(r), {2, 1, 4, 3, 6, 5, 8, 7});
  expect_near(values(matmul(ba, ba)), {7, 10, 15, 22, 67, 78, 91, 106});
}

TEST_P(OpsTest, ShapeOps) {
  Tensor a = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor t = transpose(a);
  EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{3, 2}));
  expect_near(values(t), {1, 4, 2, 5, 3, 6});
  Tensor c3 = reshape(a, {1, 2, 3});
  expect_near(values(transpose(c3, 0, 2)), {1, 4, 2, 5, 3, 6});
  Tensor r = reshape(a, {3, -1});
  EXPECT_EQ(r.shape(), (std::vector<std::int64_t>{3, 2}));
  expect_near(values(r), {1, 2, 3, 4, 5, 6});
  expect_near(values(slice_rows(a, 1, 2)), {4, 5, 6});
  expect_near(values(slice_rows(r, 1, 3) * 2.0), {6, 8, 10, 12});
  expect_near(values(concat({a, f32({7, 8, 9}, {1, 3})}, 0)), {1, 2, 3, 4, 5, 6, 7, 8, 9});
  expect_near(values(concat({a, f32({7, 8}, {2, 1})}, 1)), {1, 2, 3, 7, 4, 5, 6, 8});
  Tensor bt = broadcast_to(f32({1, 2}, {2, 1}), {2, 3});
  expect_near(values(bt), {1, 1, 1, 2, 2, 2});
}

TEST_P(OpsTest, CreationOps) {
  expect_near(values(zeros({2, 2})), {0, 0, 0, 0});
  expect_near(values(ones({3}, DType::kInt64)), {1, 1, 1});
  expect_near(values(full({2}, 2.5, DType::kFloat64)), {2.5, 2.5});
  expect_near(values(arange(0, 5)), {0, 1, 2, 3, 4});
  expect_near(values(arange(1, 2, 0.25, DType::kFloat64)), {1, 1.25, 1.5, 1.75});
  Tensor s = scalar(3.5);
  EXPECT_TRUE(s.shape().empty());
  expect_near(values(s), {3.5});
}

TEST_P(OpsTest, RandomIsSeededAndAdvances) {
  Generator g1(42), g2(42);
  Tensor u1 = uniform({1000}, g1, -2, 3);
  Tensor u2 = uniform({1000}, g2, -2, 3);
  EXPECT_EQ(values(u1), values(u2));
  Tensor u3 = uniform({1000}, g1, -2, 3);
  EXPECT_NE(values(u1), values(u3));
  double lo = 10, hi = -10, total = 0;
  for (double v : values(u1)) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    total += v;
  }
  EXPECT_GE(lo, -2);
  EXPECT_LT(hi, 3);
  EXPECT_NEAR(total / 1000, 0.5, 0.2);
  Generator g3(7);
  const std::vector<double> n = values(normal({20000}, g3, 1.0, 2.0));
  double m = 0, var = 0;
  for (double v : n) m += v;
  m /= static_cast<double>(n.size());
  for (double v : n) var += (v - m) * (v - m);
  var /= static_cast<double>(n.size());
  EXPECT_NEAR(m, 1.0, 0.05);
  EXPECT_NEAR(var, 4.0, 0.15);
  EXPECT_EQ(g3.advance(0), 20000u);
}

TEST_P(OpsTest, AssignRebindsEveryHandleAndDetachShares) {
  Tensor p = f32({1, 2, 3});
  Tensor alias = p;       // shares the impl
  Tensor old = p * 10.0;  // reads p's old value
  assign(p, p + 1.0);
  expect_near(values(alias), {2, 3, 4});
  expect_near(values(old), {10, 20, 30});
  Tensor d = detach(p);
  expect_near(values(d), {2, 3, 4});
  EXPECT_NE(d.impl(), p.impl());
}

// Shapes from user values whose bytes do not fit an int64, or with negative dimensions, are
// refused when the op is recorded, before any buffer is planned from them (a wrapped size made
// a small buffer that the kernel then overran).
TEST_P(OpsTest, ShapesFromUserValuesThatCannotBeAllocatedAreRefused) {
  const std::int64_t huge = std::int64_t{1} << 62;
  EXPECT_THROW(zeros({huge}, DType::kFloat32), InvalidArgument);
  EXPECT_THROW(full({huge, 4}, 1.0, DType::kFloat32), InvalidArgument);
  Generator gen(1);
  EXPECT_THROW(uniform({huge}, gen), InvalidArgument);
  EXPECT_THROW(one_hot(i64({1, 2}), huge), InvalidArgument);
  EXPECT_THROW(broadcast_to(f32({1, 2, 3}), {huge, 3}), InvalidArgument);
  EXPECT_THROW(broadcast_to(f32({1, 2, 3}), {-2, 3}), InvalidArgument);
  EXPECT_THROW(arange(0, 1e300, 1), InvalidArgument);
  EXPECT_THROW(arange(-1e308, 1e308, 1e-300), InvalidArgument);
  // Within bounds they still work.
  expect_near(values(broadcast_to(f32({1, 2}), {2, 2})), {1, 2, 1, 2});
}

// A shape whose element count passes an int64 is refused, naming the op, the shape and the
// dtype, before anything multiplies its dimensions past the type (zeros counted its elements in
// an int64 before any check: signed overflow, which UBSan stops at). A 0 after such dimensions
// does not make the shape fit: what comes before it must.
TEST_P(OpsTest, ShapesWhoseElementCountPassesInt64AreRefusedNamingTheShape) {
  const std::int64_t big = std::int64_t{1} << 40;
  const auto refused = [](const std::function<void()>& op, const std::string& part) {
    try {
      op();
      ADD_FAILURE() << "no InvalidArgument; expected one saying: " << part;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  const std::string shape = "[1099511627776, 1099511627776]";
  refused(
      [&] {
        zeros({big, big});
      },
      "zeros: shape " + shape + " of float32 would take more than 2^63 - 1 bytes");
  refused([&] { ones({big, big}, DType::kInt64); }, "ones: shape " + shape + " of int64");
  Generator gen(1);
  refused([&] { normal({big, big}, gen); }, "normal: shape " + shape + " of float32");
  refused(
      [&] {
        zeros({big, big, 0});
      },
      "zeros: shape [1099511627776, 1099511627776, 0] of float32 takes more than 2^63 - 1 "
      "bytes in its dimensions before the 0");
  refused([&] { reshape(zeros({0}), {big, big, 0, -1}); }, "reshape: cannot view");
  refused([&] { Tensor::empty({big, big}, DType::kFloat32); }, "empty: shape " + shape);
  // Empty shapes whose dimensions before the 0 fit are still made.
  EXPECT_EQ(zeros({big, 0}).numel(), 0);
  EXPECT_EQ(zeros({0, std::int64_t{1} << 62}).numel(), 0);
}

INSTANTIATE_TEST_SUITE_P(Modes, OpsTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Lazy" : "Eager"; });

}  // namespace
}  // namespace c10d::inline v1::lazy
