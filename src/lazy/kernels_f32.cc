// Float32 span kernels on Eigen's packets of the build's instruction set (8 lanes at
// x86-64-v3), and the choice of the AVX-512 transcendentals of kernels_f32_avx512.cc. See
// kernels_f32.h for why they exist and what they promise.
#include "lazy/kernels_f32.h"

#include <Eigen/Core>
#include <algorithm>
#include <cstring>
#include <utility>

#include "lazy/kernels.h"
#include "lazy/kernels_f32_packets.h"

namespace c10d::inline v1::lazy {
namespace {

static_assert(kTile % kF32Block == 0, "a tile is a whole number of blocks");

namespace ei = Eigen::internal;
using P = ei::packet_traits<float>::type;
constexpr std::int64_t kLanes = ei::packet_traits<float>::size;
struct Packets {  // kernels_f32_packets.h's packet traits
  using P = lazy::P;
};

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

P load_tail(const float* p, std::int64_t n) { return f32_packets::load_tail<Packets>(p, n); }
void store_tail(float* p, const P& v, std::int64_t n) { f32_packets::store_tail<Packets>(p, v, n); }

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
  return f32_packets::unary_kernels<Packets, Op>();
}

template <class Op>
F32Kernels binary_kernels(const TileInstr& ins) {
  if (ins.b_imm) return {&binary<Op, Imm::kRight>, &binary_block<Op, Imm::kRight>};
  if (ins.a_imm) return {&binary<Op, Imm::kLeft>, &binary_block<Op, Imm::kLeft>};
  return {&binary<Op, Imm::kNone>, &binary_block<Op, Imm::kNone>};
}

// The register chain's packet operations on the build's packets, with the transcendentals of
// the functors above, so the chain and the per-instruction kernels give the same bits.
struct Transcendentals {
  using P = lazy::P;
  static P exp(const P& x) { return Exp::f(x); }
  static P log(const P& x) { return Log::f(x); }
  static P sqrt(const P& x) { return Sqrt::f(x); }
  static P tanh(const P& x) { return Tanh::f(x); }
  static P sigmoid(const P& x) { return Sigmoid::f(x); }
};
using ChainOps = f32_packets::ChainOps<Transcendentals>;

// The chain code of a covered instruction.
F32Code chain_code(OpKind op) {
  switch (op) {
    case OpKind::kNeg:
      return F32Code::kNeg;
    case OpKind::kAbs:
      return F32Code::kAbs;
    case OpKind::kRelu:
      return F32Code::kRelu;
    case OpKind::kPow:
      return F32Code::kSquare;  // f32_kernels() covers pow 2 only
    case OpKind::kExp:
      return F32Code::kExp;
    case OpKind::kLog:
      return F32Code::kLog;
    case OpKind::kSqrt:
      return F32Code::kSqrt;
    case OpKind::kTanh:
      return F32Code::kTanh;
    case OpKind::kSigmoid:
      return F32Code::kSigmoid;
    case OpKind::kAdd:
      return F32Code::kAdd;
    case OpKind::kSub:
      return F32Code::kSub;
    case OpKind::kMul:
      return F32Code::kMul;
    case OpKind::kDiv:
      return F32Code::kDiv;
    case OpKind::kMaximum:
      return F32Code::kMax;
    default:
      return F32Code::kMin;
  }
}

bool is_binary(F32Code c) { return c >= F32Code::kAdd; }

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

F32Chain f32_chain(const std::vector<TileInstr>& instrs, std::size_t n_in,
                   const std::vector<bool>& escapes, F32Isa isa) {
  // Eager's one-instruction kernels stay on the per-instruction kernels: through the chain,
  // c10d-lazy-bench's eager tanh(x*x+1)*0.5 took 16.9-17.1 ms instead of 14.2 (AVX-512, 8
  // packets a group) and 14.1-14.9 (4 packets).
  if (instrs.size() < 2) return {};
  const std::size_t n_regs = n_in + instrs.size();
  // Each instruction's chain op (slots still to assign) and register operands (-1: none).
  std::vector<F32ChainOp> code(instrs.size());
  std::vector<std::pair<int, int>> operands(instrs.size());
  bool sqrt = false;
  bool transcendental = false;
  for (std::size_t j = 0; j < instrs.size(); ++j) {
    const TileInstr& ins = instrs[j];
    if (f32_kernels(ins, F32Isa::kBuild).span == nullptr) return {};
    F32ChainOp& o = code[j];
    o.code = chain_code(ins.op);
    o.imm = static_cast<float>(ins.imm);
    o.src = ins.b_imm ? F32Src::kImmRight : ins.a_imm ? F32Src::kImmLeft : F32Src::kAcc;
    const int a = ins.a_imm ? ins.b : ins.a;
    const int b = is_binary(o.code) && o.src == F32Src::kAcc ? ins.b : -1;
    if (a < 0 || static_cast<std::size_t>(a) >= n_in + j) return {};
    if (b >= 0 && static_cast<std::size_t>(b) >= n_in + j) return {};
    operands[j] = {a, b};
    sqrt = sqrt || o.code == F32Code::kSqrt;
    transcendental = transcendental || o.code == F32Code::kExp || o.code == F32Code::kLog ||
                     o.code == F32Code::kTanh || o.code == F32Code::kSigmoid;
  }
  // live[r]: register r is stored or read by a live instruction; last_read[r]: the last live
  // instruction reading it (-1: none).
  std::vector<bool> live(n_regs, false);
  std::vector<int> last_read(n_regs, -1);
  for (std::size_t j = instrs.size(); j-- > 0;) {
    const std::size_t r = n_in + j;
    if (r < escapes.size() && escapes[r]) live[r] = true;
    if (!live[r]) continue;
    for (int x : {operands[j].first, operands[j].second}) {
      if (x < 0) continue;
      live[static_cast<std::size_t>(x)] = true;
      int& last = last_read[static_cast<std::size_t>(x)];
      last = std::max(last, static_cast<int>(j));
    }
  }
  // The accumulator holds one register at a time. Before it is overwritten, a computed
  // register still to be read is saved to a slot; inputs are read again from memory.
  F32Chain chain;
  int acc = -1;
  std::vector<int> slot(n_regs, -1);
  unsigned free_slots = (1u << kF32ChainSlots) - 1;
  auto emit = [&](F32Code c, F32Src src, int index) {
    F32ChainOp o{c};
    o.src = src;
    o.index = index;
    chain.ops.push_back(o);
  };
  // Saves the accumulator when its register is computed, unsaved and read by instruction j or
  // later (`after`: by a later one only); false when no slot is free.
  auto save_acc = [&](std::size_t j, bool after) {
    if (acc < 0 || static_cast<std::size_t>(acc) < n_in) return true;
    const auto r = static_cast<std::size_t>(acc);
    const int last = last_read[r];
    if (slot[r] >= 0 || last < static_cast<int>(j) + (after ? 1 : 0)) return true;
    if (free_slots == 0) return false;
    slot[r] = __builtin_ctz(free_slots);
    free_slots &= free_slots - 1;
    emit(F32Code::kSave, F32Src::kAcc, slot[r]);
    return true;
  };
  auto src_of = [&](int r) -> std::pair<F32Src, int> {
    if (r == acc) return {F32Src::kAcc, 0};
    if (static_cast<std::size_t>(r) < n_in) return {F32Src::kInput, r};
    return {F32Src::kSlot, slot[static_cast<std::size_t>(r)]};
  };
  for (std::size_t j = 0; j < instrs.size(); ++j) {
    const std::size_t r = n_in + j;
    if (!live[r]) continue;  // nothing reads or stores it
    const auto [a, b] = operands[j];
    if (acc != a) {
      if (!save_acc(j, false)) return {};
      const auto [src, index] = src_of(a);
      if (src == F32Src::kSlot && index < 0) return {};  // not reached: a is saved or an input
      emit(F32Code::kLoad, src, index);
      acc = a;
    }
    F32ChainOp o = code[j];
    if (b >= 0) {
      const auto [src, index] = src_of(b);
      if (src == F32Src::kSlot && index < 0) return {};
      o.src = src;
      o.index = index;
    }
    if (!save_acc(j, true)) return {};  // the op overwrites a, still read later
    chain.ops.push_back(o);
    acc = static_cast<int>(r);
    if (r < escapes.size() && escapes[r]) emit(F32Code::kStore, F32Src::kAcc, static_cast<int>(r));
    for (int x : {a, b}) {
      if (x < 0 || last_read[static_cast<std::size_t>(x)] != static_cast<int>(j)) continue;
      int& sx = slot[static_cast<std::size_t>(x)];
      if (sx >= 0) free_slots |= 1u << sx;
      sx = -1;
    }
  }
  // A chain of memory-bound ops only is already at memcpy speed instruction by instruction,
  // and was slower as a chain: affine (x*x+1)*0.5 took 4.1 ms on AVX-512 packets (8 a group)
  // and 4.5-4.8 ms on AVX2 ones, vs 3.5-3.6 ms.
  if (!transcendental) return {};
  chain.avx512 = isa == F32Isa::kAvx512 && !sqrt;
  return chain;
}

void run_f32_chain(const F32Chain& chain, void* const* regs, std::int64_t n) {
#ifdef C10D_F32_AVX512
  if (chain.avx512) {
    detail::f32_avx512_chain(chain, regs, n);
    return;
  }
#endif
  // Four packets a group: with eight, fused tanh(x*x+1)*0.5 on AVX2 packets took 6.7 ms
  // instead of 6.2-6.3 (per instruction: 6.1-6.2), the accumulators and tanh's temporaries
  // spilling from the 16 ymm registers.
  f32_packets::f32_chain_run<ChainOps, 4>(chain, regs, n);
}

F32Plan plan_f32(const FusedKernel& k) {
  F32Plan plan;
  plan.all_covered = true;
  for (const TileInstr& ins : k.instrs) {
    plan.steps.push_back(f32_step(ins));
    plan.all_covered = plan.all_covered && plan.steps.back().kernels.span != nullptr;
  }
  if (plan.all_covered && k.reduce == OpKind::kData) {
    std::vector<bool> escapes(k.inputs.size() + k.instrs.size(), false);
    for (const auto& [reg, slot] : k.stores) escapes[static_cast<std::size_t>(reg)] = true;
    plan.chain = f32_chain(k.instrs, k.inputs.size(), escapes);
  }
  return plan;
}

}  // namespace c10d::inline v1::lazy
