// The float32 span and block kernels (src/lazy/kernels_f32.h): transcendentals against the C
// library in double over dense sweeps and the special values, and the properties the engines
// rely on: a value does not depend on where a span or block starts or ends.
#include "lazy/kernels_f32.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

namespace c10d::lazy {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TileInstr unary(OpKind op) {
  TileInstr ins{};
  ins.op = op;
  ins.dtype = DType::kFloat32;
  ins.in_dtype = DType::kFloat32;
  ins.a = 0;
  return ins;
}

// Inputs: a dense uniform sweep over [-lim, lim], magnitudes from 1e-38 (denormals below) to
// 1e38 in both signs at 200 points per decade, and the special values. The count is odd, so
// the span kernel's zero-padded tail is exercised too.
std::vector<float> sweep(float lim) {
  std::vector<float> x;
  for (double v = -lim; v <= lim; v += lim / 200000.0) x.push_back(static_cast<float>(v));
  for (double e = -45; e <= 38; e += 0.005) {
    x.push_back(static_cast<float>(std::pow(10.0, e)));
    x.push_back(-static_cast<float>(std::pow(10.0, e)));
  }
  for (float v : {0.0f, -0.0f, kInf, -kInf, kNaN, std::numeric_limits<float>::denorm_min(),
                  std::numeric_limits<float>::min(), std::numeric_limits<float>::max()}) {
    x.push_back(v);
  }
  if (x.size() % 2 == 0) x.push_back(1.0f);
  return x;
}

std::vector<float> run(OpKind op, const std::vector<float>& x) {
  const F32Kernels k = f32_kernels(unary(op));
  EXPECT_NE(k.span, nullptr);
  std::vector<float> y(x.size());
  k.span(x.data(), nullptr, 0, y.data(), static_cast<std::int64_t>(x.size()));
  return y;
}

// Largest error of y against ref(x) computed in double, in units of max(|ref|, floor): a
// relative error, absolute below `floor`. NaN must map to NaN, and +-inf to the reference.
template <class Ref>
double max_error(const std::vector<float>& x, const std::vector<float>& y, Ref ref, double floor,
                 float* worst_x) {
  double worst = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double r = ref(static_cast<double>(x[i]));
    if (std::isnan(r)) {
      EXPECT_TRUE(std::isnan(y[i])) << "x = " << x[i] << " gave " << y[i];
      continue;
    }
    if (static_cast<double>(y[i]) == r) continue;  // exact, infinities included
    const double e = std::abs(static_cast<double>(y[i]) - r) / std::max(std::abs(r), floor);
    EXPECT_FALSE(std::isnan(e)) << "x = " << x[i] << " gave " << y[i] << ", want " << r;
    if (e > worst) {
      worst = e;
      *worst_x = x[i];
    }
  }
  return worst;
}

// Checks op over sweep(lim) against ref within `bound` (relative, absolute below `floor`).
template <class Ref>
void expect_accurate(OpKind op, float lim, Ref ref, double floor, double bound) {
  const std::vector<float> x = sweep(lim);
  float worst_x = 0;
  const double err = max_error(x, run(op, x), ref, floor, &worst_x);
  std::printf("%s: max error %.3g (at x = %.9g), bound %.3g\n", op_name(op).data(), err, worst_x,
              bound);
  EXPECT_LE(err, bound) << op_name(op) << " at x = " << worst_x;
}

TEST(KernelsF32, TanhWithinAMillionthRelative) {
  expect_accurate(
      OpKind::kTanh, 20, [](double v) { return std::tanh(v); }, 0, 1e-6);
  // Exact where it matters: odd, +-0 keeps its sign, saturates to +-1.
  const std::vector<float> s = run(OpKind::kTanh, {0.0f, -0.0f, kInf, -kInf, 30.0f, -30.0f, 1.0f});
  EXPECT_TRUE(s[0] == 0 && !std::signbit(s[0]));
  EXPECT_TRUE(s[1] == 0 && std::signbit(s[1]));
  EXPECT_EQ(s[2], 1.0f);
  EXPECT_EQ(s[3], -1.0f);
  EXPECT_EQ(s[4], 1.0f);
  EXPECT_EQ(s[5], -1.0f);
  EXPECT_EQ(run(OpKind::kTanh, {-1.0f})[0], -s[6]);
}

// Eigen's logistic is accurate in absolute terms (floor 1): its relative error grows where
// sigmoid(x) is small (8e-4 at x = -8.9, where the value is 1.4e-4).
TEST(KernelsF32, SigmoidWithinAMillionthAbsolute) {
  expect_accurate(
      OpKind::kSigmoid, 20, [](double v) { return 1 / (1 + std::exp(-v)); }, 1, 1e-6);
}

TEST(KernelsF32, ExpWithinAMillionthRelative) {
  // Below -87.3 exp leaves float32's normal range; Eigen's exp stops at 2.9e-39 for inputs
  // below -88.4 (floor 1e-30: an absolute error of 1e-36 there).
  expect_accurate(
      OpKind::kExp, 88, [](double v) { return v > 88.72 ? INFINITY : std::exp(v); }, 1e-30, 1e-6);
}

// The block kernel and the span kernel at any offset and length give the same bits, so block
// and tile cuts never change a value (eager runs one op per kernel, lazy a fused chain).
TEST(KernelsF32, SameBitsWhereverASpanOrBlockStarts) {
  std::vector<float> x(3 * kF32Block + 5), b(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 9.0);
    b[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)) * 3.0);
  }
  for (OpKind op : {OpKind::kTanh, OpKind::kSigmoid, OpKind::kExp, OpKind::kDiv, OpKind::kAdd}) {
    TileInstr ins = unary(op);
    ins.b = 1;
    const F32Kernels k = f32_kernels(ins);
    ASSERT_NE(k.block, nullptr);
    const auto n = static_cast<std::int64_t>(x.size());
    std::vector<float> whole(x.size()), pieces(x.size());
    k.span(x.data(), b.data(), 0, whole.data(), n);
    k.block(x.data() + 3, b.data() + 3, 0, pieces.data() + 3);
    for (std::int64_t s : {std::int64_t{0}, std::int64_t{1}, std::int64_t{2}}) {
      k.span(x.data() + s, b.data() + s, 0, pieces.data() + s, 1);
    }
    const std::int64_t rest = 3 + kF32Block;
    k.span(x.data() + rest, b.data() + rest, 0, pieces.data() + rest, n - rest);
    for (std::size_t i = 0; i < x.size(); ++i) {
      ASSERT_EQ(std::memcmp(&whole[i], &pieces[i], sizeof(float)), 0)
          << op_name(op) << " element " << i;
    }
  }
}

TEST(KernelsF32, OnlyFloat32OpsItCovers) {
  TileInstr ins = unary(OpKind::kTanh);
  ins.dtype = ins.in_dtype = DType::kFloat64;
  EXPECT_EQ(f32_kernels(ins).span, nullptr);
  ins = unary(OpKind::kPow);
  ins.real = 3;
  EXPECT_EQ(f32_kernels(ins).span, nullptr);
  ins.real = 2;
  EXPECT_NE(f32_kernels(ins).span, nullptr);
  ins = unary(OpKind::kCast);
  EXPECT_EQ(f32_kernels(ins).span, nullptr);
}

}  // namespace
}  // namespace c10d::lazy
