// Float32 span kernels on Eigen's packets of the build's instruction set (8 lanes at
// x86-64-v3), and the choice of the AVX-512 transcendentals of kernels_f32_avx512.cc. See
// kernels_f32.h for why they exist and what they promise.
#include "lazy/kernels_f32.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstring>

#include "lazy/kernels.h"

namespace c10d::lazy {
namespace {

static_assert(kTile % kF32Block == 0, "a tile is a whole number of blocks");

namespace ei = Eigen::internal;
using P = ei::packet_traits<float>::type;
constexpr std::int64_t kLanes = ei::packet_traits<float>::size;

// Unary ops: P f(P).
struct Neg {
  static P f(const P& x) { return ei::pnegate(x); }
};
struct Abs {
  static P f(const P& x) { return ei::pabs(x); }
};
struct Relu {
  static P f(const P& x) { return ei::pmax(x, ei::pzero(x)); }
};
struct Square {
  static P f(const P& x) { return ei::pmul(x, x); }
};
struct Exp {
  static P f(const P& x) { return ei::pexp(x); }
};
struct Log {
  static P f(const P& x) { return ei::plog(x); }
};
struct Sqrt {
  static P f(const P& x) { return ei::psqrt(x); }
};
struct Tanh {
  static P f(const P& x) { return ei::ptanh(x); }
};
struct Sigmoid {
  static P f(const P& x) { return ei::scalar_logistic_op<float>().packetOp(x); }
};

// Binary ops: P f(P, P).
struct Add {
  static P f(const P& x, const P& y) { return ei::padd(x, y); }
};
struct Sub {
  static P f(const P& x, const P& y) { return ei::psub(x, y); }
};
struct Mul {
  static P f(const P& x, const P& y) { return ei::pmul(x, y); }
};
struct Div {
  static P f(const P& x, const P& y) { return ei::pdiv(x, y); }
};
struct Max {
  static P f(const P& x, const P& y) { return ei::pmax(x, y); }
};
struct Min {
  static P f(const P& x, const P& y) { return ei::pmin(x, y); }
};

// Loads the last `n` (< kLanes) elements zero-padded, and stores them back.
P load_tail(const float* p, std::int64_t n) {
  alignas(64) float t[kLanes] = {};
  std::memcpy(t, p, static_cast<std::size_t>(n) * sizeof(float));
  return ei::pload<P>(t);
}
void store_tail(float* p, const P& v, std::int64_t n) {
  alignas(64) float t[kLanes];
  ei::pstore(t, v);
  std::memcpy(p, t, static_cast<std::size_t>(n) * sizeof(float));
}

template <class Op>
void unary_block(const float* a, const float*, float, float* out) {
#pragma GCC unroll 16
  for (std::int64_t i = 0; i < kF32Block; i += kLanes)
    ei::pstoreu(out + i, Op::f(ei::ploadu<P>(a + i)));
}

template <class Op>
void unary(const float* a, const float*, float, float* out, std::int64_t n) {
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) ei::pstoreu(out + i, Op::f(ei::ploadu<P>(a + i)));
  if (i < n) store_tail(out + i, Op::f(load_tail(a + i, n - i)), n - i);
}

// Which side the immediate is on: none (two registers), x op imm, imm op x.
enum class Imm { kNone, kRight, kLeft };

template <class Op, Imm kImm, class LoadB>
P apply(const P& x, const P& s, LoadB load_b) {
  if constexpr (kImm == Imm::kRight) return Op::f(x, s);
  if constexpr (kImm == Imm::kLeft) return Op::f(s, x);
  if constexpr (kImm == Imm::kNone) return Op::f(x, load_b());
}

template <class Op, Imm kImm>
void binary_block(const float* a, const float* b, float imm, float* out) {
  const P s = ei::pset1<P>(imm);
#pragma GCC unroll 16
  for (std::int64_t i = 0; i < kF32Block; i += kLanes) {
    ei::pstoreu(out + i,
                apply<Op, kImm>(ei::ploadu<P>(a + i), s, [&] { return ei::ploadu<P>(b + i); }));
  }
}

template <class Op, Imm kImm>
void binary(const float* a, const float* b, float imm, float* out, std::int64_t n) {
  const P s = ei::pset1<P>(imm);
  auto op = [&](const P& x, auto load_b) { return apply<Op, kImm>(x, s, load_b); };
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    ei::pstoreu(out + i, op(ei::ploadu<P>(a + i), [&] { return ei::ploadu<P>(b + i); }));
  }
  if (i < n) {
    const std::int64_t m = n - i;
    store_tail(out + i, op(load_tail(a + i, m), [&] { return load_tail(b + i, m); }), m);
  }
}

template <class Op>
F32Kernels unary_kernels() {
  return {&unary<Op>, &unary_block<Op>};
}

template <class Op>
F32Kernels binary_kernels(const TileInstr& ins) {
  if (ins.b_imm) return {&binary<Op, Imm::kRight>, &binary_block<Op, Imm::kRight>};
  if (ins.a_imm) return {&binary<Op, Imm::kLeft>, &binary_block<Op, Imm::kLeft>};
  return {&binary<Op, Imm::kNone>, &binary_block<Op, Imm::kNone>};
}

}  // namespace

F32Isa f32_isa() {
#ifdef C10D_F32_AVX512
  // __builtin_cpu_supports also checks that the OS saves the AVX-512 registers (XCR0).
  static const F32Isa isa = [] {
    __builtin_cpu_init();
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                        __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
    return avx512 ? F32Isa::kAvx512 : F32Isa::kBuild;
  }();
  return isa;
#else
  return F32Isa::kBuild;
#endif
}

F32Kernels f32_kernels(const TileInstr& ins) { return f32_kernels(ins, f32_isa()); }

F32Kernels f32_kernels(const TileInstr& ins, F32Isa isa) {
  if (ins.dtype != DType::kFloat32 || ins.in_dtype != DType::kFloat32) return {};
  if (ins.a_imm && ins.b_imm) return {};  // folded by the planner; not worth a kernel
  switch (ins.op) {
    case OpKind::kAdd:
      return binary_kernels<Add>(ins);
    case OpKind::kSub:
      return binary_kernels<Sub>(ins);
    case OpKind::kMul:
      return binary_kernels<Mul>(ins);
    case OpKind::kDiv:
      return binary_kernels<Div>(ins);
    case OpKind::kMaximum:
      return binary_kernels<Max>(ins);
    case OpKind::kMinimum:
      return binary_kernels<Min>(ins);
    default:
      break;
  }
  if (ins.a_imm || ins.b_imm) return {};  // only the binary ops above take an immediate
#ifdef C10D_F32_AVX512
  if (isa == F32Isa::kAvx512) {
    if (const F32Kernels k = detail::f32_avx512_kernels(ins.op); k.span != nullptr) return k;
  }
#endif
  switch (ins.op) {
    case OpKind::kNeg:
      return unary_kernels<Neg>();
    case OpKind::kAbs:
      return unary_kernels<Abs>();
    case OpKind::kRelu:
      return unary_kernels<Relu>();
    case OpKind::kPow:
      return ins.real == 2 ? unary_kernels<Square>() : F32Kernels{};
    case OpKind::kExp:
      return unary_kernels<Exp>();
    case OpKind::kLog:
      return unary_kernels<Log>();
    case OpKind::kSqrt:
      return unary_kernels<Sqrt>();
    case OpKind::kTanh:
      return unary_kernels<Tanh>();
    case OpKind::kSigmoid:
      return unary_kernels<Sigmoid>();
    default:
      return {};
  }
}

F32Step f32_step(const TileInstr& ins) {
  // With an immediate, the register operand is the other one, read as `a`.
  return {f32_kernels(ins), ins.a_imm ? ins.b : ins.a, ins.a_imm || ins.b_imm ? -1 : ins.b,
          static_cast<float>(ins.imm)};
}

void run_f32_chain(const std::vector<F32Step>& steps, void* const* regs, std::size_t first_out,
                   std::int64_t n) {
  auto reg = [&](std::size_t r) { return static_cast<float*>(regs[r]); };
  auto in = [&](int r, std::int64_t s) {
    return r < 0 ? nullptr : reg(static_cast<std::size_t>(r)) + s;
  };
  std::int64_t s = 0;
  for (; s + kF32Block <= n; s += kF32Block) {
    for (std::size_t j = 0; j < steps.size(); ++j) {
      const F32Step& f = steps[j];
      f.kernels.block(in(f.a, s), in(f.b, s), f.imm, reg(first_out + j) + s);
    }
  }
  if (s == n) return;
  for (std::size_t j = 0; j < steps.size(); ++j) {
    const F32Step& f = steps[j];
    f.kernels.span(in(f.a, s), in(f.b, s), f.imm, reg(first_out + j) + s, n - s);
  }
}

}  // namespace c10d::lazy
