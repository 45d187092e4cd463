// The float32 span and block kernels (src/lazy/kernels_f32.h): transcendentals against the C
// library in double over dense sweeps and the special values, and the properties the engines
// rely on: a value does not depend on where a span or block starts or ends. On a CPU with
// AVX-512 every check runs on both paths (the build's packets and the AVX-512 ones), with the
// same bounds, so the path this machine does not take stays tested too.
#include "lazy/kernels_f32.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

namespace c10d::lazy {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The paths f32_kernels() can take on this machine.
std::vector<F32Isa> isas() {
  if (f32_isa() == F32Isa::kAvx512) return {F32Isa::kBuild, F32Isa::kAvx512};
  return {F32Isa::kBuild};
}

const char* isa_name(F32Isa isa) { return isa == F32Isa::kAvx512 ? "avx512" : "build"; }

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

std::vector<float> run(OpKind op, const std::vector<float>& x, F32Isa isa = f32_isa()) {
  const F32Kernels k = f32_kernels(unary(op), isa);
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

// Checks op over sweep(lim) against ref within `bound` (relative, absolute below `floor`), on
// every path of isas().
template <class Ref>
void expect_accurate(OpKind op, float lim, Ref ref, double floor, double bound) {
  const std::vector<float> x = sweep(lim);
  for (F32Isa isa : isas()) {
    float worst_x = 0;
    const double err = max_error(x, run(op, x, isa), ref, floor, &worst_x);
    std::printf("%s (%s): max error %.3g (at x = %.9g), bound %.3g\n", op_name(op).data(),
                isa_name(isa), err, worst_x, bound);
    EXPECT_LE(err, bound) << op_name(op) << " (" << isa_name(isa) << ") at x = " << worst_x;
  }
}

TEST(KernelsF32, TanhWithinAMillionthRelative) {
  expect_accurate(
      OpKind::kTanh, 20, [](double v) { return std::tanh(v); }, 0, 1e-6);
  // Exact where it matters: odd, +-0 keeps its sign, saturates to +-1.
  for (F32Isa isa : isas()) {
    SCOPED_TRACE(isa_name(isa));
    const std::vector<float> s =
        run(OpKind::kTanh, {0.0f, -0.0f, kInf, -kInf, 30.0f, -30.0f, 1.0f}, isa);
    EXPECT_TRUE(s[0] == 0 && !std::signbit(s[0]));
    EXPECT_TRUE(s[1] == 0 && std::signbit(s[1]));
    EXPECT_EQ(s[2], 1.0f);
    EXPECT_EQ(s[3], -1.0f);
    EXPECT_EQ(s[4], 1.0f);
    EXPECT_EQ(s[5], -1.0f);
    EXPECT_EQ(run(OpKind::kTanh, {-1.0f}, isa)[0], -s[6]);
  }
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

// Eigen's log takes a denormal input as the smallest normal float (log gives -87.3 where the
// true value goes down to -103.3): the reference does the same.
TEST(KernelsF32, LogWithinAMillionthRelative) {
  expect_accurate(
      OpKind::kLog, 20,
      [](double v) {
        const double min_normal = std::numeric_limits<float>::min();
        return std::log(v > 0 && v < min_normal ? min_normal : v);
      },
      0, 1e-6);
}

// What f32_kernels() picks without a path named: the one f32_isa() names, for every op, and on
// a CPU with AVX-512 the AVX-512 kernels for the transcendentals only.
TEST(KernelsF32, ChoosesTheAvx512TranscendentalsWhereTheCpuHasThem) {
  std::printf("path: %s\n", isa_name(f32_isa()));
  for (OpKind op : {OpKind::kTanh, OpKind::kSigmoid, OpKind::kExp, OpKind::kLog, OpKind::kAdd,
                    OpKind::kMul, OpKind::kSqrt}) {
    const TileInstr ins = unary(op);
    const F32Kernels chosen = f32_kernels(ins);
    const F32Kernels build = f32_kernels(ins, F32Isa::kBuild);
    EXPECT_EQ(chosen.span, f32_kernels(ins, f32_isa()).span) << op_name(op);
    const bool transcendental =
        op == OpKind::kTanh || op == OpKind::kSigmoid || op == OpKind::kExp || op == OpKind::kLog;
    const bool avx512 = f32_isa() == F32Isa::kAvx512 && transcendental;
    EXPECT_EQ(chosen.span != build.span, avx512) << op_name(op);
    EXPECT_EQ(chosen.block != build.block, avx512) << op_name(op);
  }
}

// The AVX-512 path follows the same Eigen algorithms as the build's packets, so a process on
// a CPU with AVX-512 and one without compute the same values: same bits over the sweep and
// over every 997th float32 bit pattern (a NaN only needs to stay a NaN).
TEST(KernelsF32, BothPathsGiveTheSameBits) {
  if (f32_isa() != F32Isa::kAvx512) GTEST_SKIP() << "no AVX-512 on this CPU";
  std::vector<float> x = sweep(100);
  for (std::uint64_t u = 0; u <= 0xffffffffu; u += 997) {
    float f;
    const auto bits = static_cast<std::uint32_t>(u);
    std::memcpy(&f, &bits, sizeof f);
    x.push_back(f);
  }
  for (OpKind op : {OpKind::kTanh, OpKind::kSigmoid, OpKind::kExp, OpKind::kLog}) {
    const std::vector<float> build = run(op, x, F32Isa::kBuild);
    const std::vector<float> avx512 = run(op, x, F32Isa::kAvx512);
    for (std::size_t i = 0; i < x.size(); ++i) {
      if (std::isnan(build[i]) && std::isnan(avx512[i])) continue;
      ASSERT_EQ(std::memcmp(&build[i], &avx512[i], sizeof(float)), 0)
          << op_name(op) << " at x = " << x[i] << ": " << build[i] << " vs " << avx512[i];
    }
  }
}

// The block kernel and the span kernel at any offset and length give the same bits, so block
// and tile cuts never change a value (eager runs one op per kernel, lazy a fused chain).
TEST(KernelsF32, SameBitsWhereverASpanOrBlockStarts) {
  // |x| up to 12: sigmoid takes its exp branch for a packet with a lane below -9.
  std::vector<float> x(3 * kF32Block + 5), b(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = static_cast<float>(std::sin(0.37 * static_cast<double>(i)) * 12.0);
    b[i] = static_cast<float>(std::cos(0.11 * static_cast<double>(i)) * 3.0);
  }
  for (const auto& [op, isa] : [] {
         std::vector<std::pair<OpKind, F32Isa>> cases;
         for (OpKind op : {OpKind::kTanh, OpKind::kSigmoid, OpKind::kExp, OpKind::kLog,
                           OpKind::kDiv, OpKind::kAdd}) {
           for (F32Isa isa : isas()) cases.emplace_back(op, isa);
         }
         return cases;
       }()) {
    TileInstr ins = unary(op);
    ins.b = 1;
    const F32Kernels k = f32_kernels(ins, isa);
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
          << op_name(op) << " (" << isa_name(isa) << ") element " << i;
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
