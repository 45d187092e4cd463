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
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "lazy/kernels.h"

namespace c10d::inline v1::lazy {
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

// Register chains (f32_chain, run_f32_chain) against the per-instruction kernels they replace.

// A random chain of covered instructions over `n_in` inputs: operands mostly recent registers
// (so most chains fit the slots), immediates on either side, ops drawn from `ops` after a
// first tanh or sigmoid (f32_chain() takes only chains with a compute-bound op).
std::vector<TileInstr> random_chain(std::mt19937& rng, std::size_t n_in, std::size_t len,
                                    const std::vector<OpKind>& ops) {
  std::vector<TileInstr> chain;
  auto pick = [&](std::size_t regs) {
    const std::size_t back = std::min<std::size_t>(regs, 1 + rng() % 4);
    return static_cast<int>(regs - 1 - rng() % back);
  };
  for (std::size_t j = 0; j < len; ++j) {
    const std::size_t regs = n_in + j;
    TileInstr ins =
        unary(j == 0 ? (rng() % 2 ? OpKind::kTanh : OpKind::kSigmoid) : ops[rng() % ops.size()]);
    ins.a = pick(regs);
    if (ins.op == OpKind::kPow) ins.real = 2;
    const bool binary = ins.op == OpKind::kAdd || ins.op == OpKind::kSub ||
                        ins.op == OpKind::kMul || ins.op == OpKind::kDiv ||
                        ins.op == OpKind::kMaximum || ins.op == OpKind::kMinimum;
    if (binary) {
      ins.b = pick(regs);
      ins.imm = std::uniform_real_distribution<double>(-3, 3)(rng);
      switch (rng() % 4) {
        case 0:
          ins.b_imm = true;
          break;
        case 1:
          ins.a_imm = true;
          ins.b = ins.a;  // the register operand of an immediate-left op is b
          break;
        default:
          break;
      }
    }
    chain.push_back(ins);
  }
  return chain;
}

// Runs `instrs` over `n` elements per instruction (f32_step's kernels on `isa`), every register
// computed into a buffer of its own.
std::vector<std::vector<float>> run_steps(const std::vector<TileInstr>& instrs,
                                          std::vector<std::vector<float>> regs, std::int64_t n,
                                          F32Isa isa) {
  const std::size_t n_in = regs.size();
  std::vector<F32Step> steps;
  for (const TileInstr& ins : instrs) {
    F32Step s = f32_step(ins);
    s.kernels = f32_kernels(ins, isa);
    steps.push_back(s);
    regs.emplace_back(static_cast<std::size_t>(n));
  }
  std::vector<void*> ptrs;
  for (auto& r : regs) ptrs.push_back(r.data());
  run_f32_chain(steps, ptrs.data(), n_in, n);
  return regs;
}

TEST(KernelsF32, RegisterChainGivesThePerInstructionBits) {
  std::mt19937 rng(20261124);
  using K = OpKind;
  const std::vector<std::vector<OpKind>> mixes = {
      {K::kAdd, K::kSub, K::kMul, K::kDiv, K::kMaximum, K::kMinimum},
      {K::kTanh, K::kSigmoid, K::kExp, K::kLog, K::kMul, K::kAdd},
      {K::kNeg, K::kAbs, K::kRelu, K::kPow, K::kSqrt, K::kDiv, K::kSub, K::kTanh},
      {K::kAdd, K::kSub, K::kMul, K::kDiv, K::kMaximum, K::kMinimum, K::kNeg, K::kAbs, K::kRelu,
       K::kPow, K::kExp, K::kLog, K::kSqrt, K::kTanh, K::kSigmoid}};
  // Not multiples of the packet (8 or 16) or of a group; the last spans more than one tile.
  const std::vector<std::int64_t> lengths = {1,   7,   15,  17,   100,
                                             129, 511, 513, 1000, 2 * kTile + 37};
  int chains = 0;
  int fitted = 0;
  for (const auto& mix : mixes) {
    for (int trial = 0; trial < 40; ++trial) {
      const std::size_t n_in = 1 + rng() % 3;
      const std::size_t len = 2 + rng() % 10;
      const std::vector<TileInstr> instrs = random_chain(rng, n_in, len, mix);
      const std::int64_t n = lengths[rng() % lengths.size()];
      // Inputs in [-12, 12] (sigmoid's exp branch below -9), with zeros, infinities and NaNs.
      std::vector<std::vector<float>> in(n_in, std::vector<float>(static_cast<std::size_t>(n)));
      std::uniform_real_distribution<float> u(-12, 12);
      const float special[] = {0.f, -0.f, kInf, -kInf, kNaN, 1e-40f, 88.5f, -100.f};
      for (auto& r : in) {
        for (float& v : r) v = rng() % 16 == 0 ? special[rng() % 8] : u(rng);
      }
      // Escaping registers: the last and some others, as a fused kernel's stores.
      const std::size_t n_regs = n_in + len;
      std::vector<bool> escapes(n_regs, false);
      escapes[n_regs - 1] = true;
      for (std::size_t r = n_in; r < n_regs; ++r) escapes[r] = escapes[r] || rng() % 3 == 0;
      for (F32Isa isa : isas()) {
        ++chains;
        const F32Chain chain = f32_chain(instrs, n_in, escapes, isa);
        if (chain.ops.empty()) continue;  // too many live values
        ++fitted;
        const bool has_sqrt = std::any_of(instrs.begin(), instrs.end(),
                                          [](const TileInstr& i) { return i.op == K::kSqrt; });
        EXPECT_EQ(chain.avx512, isa == F32Isa::kAvx512 && !has_sqrt);
        const auto want = run_steps(instrs, in, n, isa);
        // Registers that do not escape get no buffer: the chain must not touch them.
        std::vector<std::vector<float>> got(n_regs);
        std::vector<void*> ptrs(n_regs, nullptr);
        for (std::size_t r = 0; r < n_regs; ++r) {
          if (r < n_in) {
            got[r] = in[r];
          } else if (escapes[r]) {
            got[r].assign(static_cast<std::size_t>(n), 7.f);
          }
          if (!got[r].empty()) ptrs[r] = got[r].data();
        }
        run_f32_chain(chain, ptrs.data(), n);
        for (std::size_t r = n_in; r < n_regs; ++r) {
          if (!escapes[r]) continue;
          for (std::size_t i = 0; i < static_cast<std::size_t>(n); ++i) {
            // A NaN's sign and payload are not fixed by the source: x86 returns the first
            // operand's NaN, and GCC may swap the operands of + and *.
            if (std::isnan(want[r][i]) && std::isnan(got[r][i])) continue;
            ASSERT_EQ(std::memcmp(&want[r][i], &got[r][i], sizeof(float)), 0)
                << isa_name(isa) << " mix " << (&mix - mixes.data()) << " trial " << trial
                << " register " << r << " element " << i << " of " << n << ": " << want[r][i]
                << " vs " << got[r][i];
          }
        }
      }
    }
  }
  std::printf("register chains: %d of %d fitted the slots\n", fitted, chains);
  EXPECT_GE(fitted, chains * 3 / 4);
}

TEST(KernelsF32, RegisterChainOnlyForCoveredChainsThatFit) {
  // The tanh of n inputs, all read by a sum in reverse order afterwards: n - 1 saved values
  // (the last stays in the accumulator), so ten need one slot too many.
  auto tanhs_then_sum = [](int n) {
    std::vector<TileInstr> chain;
    for (int j = 0; j < n; ++j) {
      TileInstr ins = unary(OpKind::kTanh);
      ins.a = j;
      chain.push_back(ins);
    }
    for (int j = 0; j + 1 < n; ++j) {
      TileInstr ins = unary(OpKind::kAdd);
      ins.a = j == 0 ? 2 * n - 1 : 2 * n + j - 1;  // the last tanh, then the running sum
      ins.b = 2 * n - 2 - j;
      chain.push_back(ins);
    }
    return chain;
  };
  for (int n : {9, 10}) {
    const std::vector<TileInstr> chain = tanhs_then_sum(n);
    std::vector<bool> escapes(static_cast<std::size_t>(n) + chain.size(), false);
    escapes.back() = true;
    EXPECT_EQ(f32_chain(chain, static_cast<std::size_t>(n), escapes).ops.empty(), n == 10) << n;
  }
  // One instruction (eager) or memory-bound ops only: the per-instruction kernels are faster.
  EXPECT_TRUE(f32_chain({unary(OpKind::kTanh)}, 1, {false, true}).ops.empty());
  std::vector<TileInstr> affine = {unary(OpKind::kMul), unary(OpKind::kAdd)};
  affine[0].b = 0;
  affine[1].a = 1;
  affine[1].b_imm = true;
  EXPECT_TRUE(f32_chain(affine, 1, {false, false, true}).ops.empty());
  affine.push_back(unary(OpKind::kTanh));
  affine[2].a = 2;
  EXPECT_FALSE(f32_chain(affine, 1, {false, false, false, true}).ops.empty());
  std::vector<TileInstr> uncovered = {unary(OpKind::kTanh), unary(OpKind::kPow)};
  uncovered[1].a = 1;
  uncovered[1].real = 3;
  EXPECT_TRUE(f32_chain(uncovered, 1, {false, true, true}).ops.empty());
  std::vector<TileInstr> f64 = {unary(OpKind::kTanh)};
  f64[0].dtype = f64[0].in_dtype = DType::kFloat64;
  EXPECT_TRUE(f32_chain(f64, 1, {false, true}).ops.empty());
}

}  // namespace
}  // namespace c10d::inline v1::lazy
