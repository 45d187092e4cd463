// The packet-generic parts of the float32 span kernels, written once for the build's packets
// (kernels_f32.cc) and for 16-lane AVX-512 packets (kernels_f32_avx512.cc, compiled with
// AVX-512 flags): tail loads and stores, the unary span and block kernels, and the register
// chain's packet operations.
//
// Include from those two files only. Everything is in an anonymous namespace, so each file's
// instantiations have internal linkage: an AVX-512 instantiation can never be the copy the
// linker keeps for an AVX2 caller (kernels_f32_avx512.cc's ODR precautions).
#pragma once

#include <Eigen/Core>
#include <cstdint>
#include <cstring>

#include "lazy/kernels_f32.h"

namespace c10d::inline v1::lazy::f32_packets {
namespace {

namespace ei = Eigen::internal;

// The templates take the packet type through a traits struct `Pk` (`using P = ...;`): a
// packet, a vector type with attributes, cannot be a template argument without a warning.
template <class Pk>
inline constexpr std::int64_t kLanesOf = ei::unpacket_traits<typename Pk::P>::size;

// Loads the last `n` (< the packet's lanes) elements zero-padded, and stores them back.
template <class Pk>
typename Pk::P load_tail(const float* p, std::int64_t n) {
  alignas(64) float t[kLanesOf<Pk>] = {};
  std::memcpy(t, p, static_cast<std::size_t>(n) * sizeof(float));
  return ei::pload<typename Pk::P>(t);
}
template <class Pk>
void store_tail(float* p, const typename Pk::P& v, std::int64_t n) {
  alignas(64) float t[kLanesOf<Pk>];
  ei::pstore(t, v);
  std::memcpy(p, t, static_cast<std::size_t>(n) * sizeof(float));
}

// Op: static P f(const P&).
template <class Pk, class Op>
void unary_block(const float* a, const float*, float, float* out) {
#pragma GCC unroll 16
  for (std::int64_t i = 0; i < kF32Block; i += kLanesOf<Pk>)
    ei::pstoreu(out + i, Op::f(ei::ploadu<typename Pk::P>(a + i)));
}

template <class Pk, class Op>
void unary(const float* a, const float*, float, float* out, std::int64_t n) {
  constexpr std::int64_t kLanes = kLanesOf<Pk>;
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    ei::pstoreu(out + i, Op::f(ei::ploadu<typename Pk::P>(a + i)));
  if (i < n) store_tail<Pk>(out + i, Op::f(load_tail<Pk>(a + i, n - i)), n - i);
}

template <class Pk, class Op>
F32Kernels unary_kernels() {
  return {&unary<Pk, Op>, &unary_block<Pk, Op>};
}

// The register chain's packet operations (detail::f32_chain_run's `Ops`): Eigen's packet
// functions, with the transcendentals and sqrt as each file computes them (T: `using P`, and
// static P exp/log/sqrt/tanh/sigmoid(const P&)), so that a chain and the per-instruction
// kernels of the same file give the same bits.
template <class T>
struct ChainOps {
  using P = typename T::P;
  static constexpr std::int64_t kLanes = kLanesOf<T>;
  static P load(const float* p) { return ei::ploadu<P>(p); }
  static P load_tail(const float* p, std::int64_t m) { return f32_packets::load_tail<T>(p, m); }
  static void store(float* p, const P& v) { ei::pstoreu(p, v); }
  static void store_tail(float* p, const P& v, std::int64_t m) {
    f32_packets::store_tail<T>(p, v, m);
  }
  static P splat(float x) { return ei::pset1<P>(x); }
  static P neg(const P& x) { return ei::pnegate(x); }
  static P abs(const P& x) { return ei::pabs(x); }
  static P relu(const P& x) { return ei::pmax(x, ei::pzero(x)); }
  static P square(const P& x) { return ei::pmul(x, x); }
  static P exp(const P& x) { return T::exp(x); }
  static P log(const P& x) { return T::log(x); }
  static P sqrt(const P& x) { return T::sqrt(x); }
  static P tanh(const P& x) { return T::tanh(x); }
  static P sigmoid(const P& x) { return T::sigmoid(x); }
  static P add(const P& x, const P& y) { return ei::padd(x, y); }
  static P sub(const P& x, const P& y) { return ei::psub(x, y); }
  static P mul(const P& x, const P& y) { return ei::pmul(x, y); }
  static P div(const P& x, const P& y) { return ei::pdiv(x, y); }
  static P max(const P& x, const P& y) { return ei::pmax(x, y); }
  static P min(const P& x, const P& y) { return ei::pmin(x, y); }
};

// The register chain interpreter (kernels_f32.h), written once for both packet types. `Ops`
// supplies the packet type P, kLanes, loads and stores and one function per code (ChainOps
// above).
template <class Ops, int K, bool kTail>
void f32_chain_group(const F32ChainOp* ops, std::size_t n_ops, void* const* regs, std::int64_t i,
                     std::int64_t m) {
  using P = typename Ops::P;
  constexpr std::int64_t L = Ops::kLanes;
  P acc[K] = {};  // every chain starts with a kLoad; this only keeps -Wmaybe-uninitialized quiet
  P saved[kF32ChainSlots][K];
  auto load = [&](int reg, int k) {
    const float* p = static_cast<const float*>(regs[reg]) + i;
    if constexpr (kTail) {
      return Ops::load_tail(p, m);
    } else {
      return Ops::load(p + k * L);
    }
  };
  auto unary = [&](auto f) {
#pragma GCC unroll 16
    for (int k = 0; k < K; ++k) acc[k] = f(acc[k]);
  };
  auto binary = [&](const F32ChainOp& o, auto f) {
    switch (o.src) {
      case F32Src::kAcc:
#pragma GCC unroll 16
        for (int k = 0; k < K; ++k) acc[k] = f(acc[k], acc[k]);
        break;
      case F32Src::kInput:
#pragma GCC unroll 16
        for (int k = 0; k < K; ++k) acc[k] = f(acc[k], load(o.index, k));
        break;
      case F32Src::kSlot:
#pragma GCC unroll 16
        for (int k = 0; k < K; ++k) acc[k] = f(acc[k], saved[o.index][k]);
        break;
      case F32Src::kImmRight: {
        const P s = Ops::splat(o.imm);
#pragma GCC unroll 16
        for (int k = 0; k < K; ++k) acc[k] = f(acc[k], s);
        break;
      }
      case F32Src::kImmLeft: {
        const P s = Ops::splat(o.imm);
#pragma GCC unroll 16
        for (int k = 0; k < K; ++k) acc[k] = f(s, acc[k]);
        break;
      }
    }
  };
  for (std::size_t j = 0; j < n_ops; ++j) {
    const F32ChainOp& o = ops[j];
    switch (o.code) {
      case F32Code::kLoad:
        if (o.src == F32Src::kInput) {
#pragma GCC unroll 16
          for (int k = 0; k < K; ++k) acc[k] = load(o.index, k);
        } else {
#pragma GCC unroll 16
          for (int k = 0; k < K; ++k) acc[k] = saved[o.index][k];
        }
        break;
      case F32Code::kSave:
#pragma GCC unroll 16
        for (int k = 0; k < K; ++k) saved[o.index][k] = acc[k];
        break;
      case F32Code::kStore: {
        float* p = static_cast<float*>(regs[o.index]) + i;
#pragma GCC unroll 16
        for (int k = 0; k < K; ++k) {
          if constexpr (kTail) {
            Ops::store_tail(p, acc[k], m);
          } else {
            Ops::store(p + k * L, acc[k]);
          }
        }
        break;
      }
      case F32Code::kNeg:
        unary([](const P& x) { return Ops::neg(x); });
        break;
      case F32Code::kAbs:
        unary([](const P& x) { return Ops::abs(x); });
        break;
      case F32Code::kRelu:
        unary([](const P& x) { return Ops::relu(x); });
        break;
      case F32Code::kSquare:
        unary([](const P& x) { return Ops::square(x); });
        break;
      case F32Code::kExp:
        unary([](const P& x) { return Ops::exp(x); });
        break;
      case F32Code::kLog:
        unary([](const P& x) { return Ops::log(x); });
        break;
      case F32Code::kSqrt:
        unary([](const P& x) { return Ops::sqrt(x); });
        break;
      case F32Code::kTanh:
        unary([](const P& x) { return Ops::tanh(x); });
        break;
      case F32Code::kSigmoid:
        unary([](const P& x) { return Ops::sigmoid(x); });
        break;
      case F32Code::kAdd:
        binary(o, [](const P& x, const P& y) { return Ops::add(x, y); });
        break;
      case F32Code::kSub:
        binary(o, [](const P& x, const P& y) { return Ops::sub(x, y); });
        break;
      case F32Code::kMul:
        binary(o, [](const P& x, const P& y) { return Ops::mul(x, y); });
        break;
      case F32Code::kDiv:
        binary(o, [](const P& x, const P& y) { return Ops::div(x, y); });
        break;
      case F32Code::kMax:
        binary(o, [](const P& x, const P& y) { return Ops::max(x, y); });
        break;
      case F32Code::kMin:
        binary(o, [](const P& x, const P& y) { return Ops::min(x, y); });
        break;
    }
  }
}

// Whole groups of K packets, then single packets, then the zero-padded tail packet.
template <class Ops, int K>
void f32_chain_run(const F32Chain& chain, void* const* regs, std::int64_t n) {
  constexpr std::int64_t L = Ops::kLanes;
  const F32ChainOp* ops = chain.ops.data();
  const std::size_t n_ops = chain.ops.size();
  std::int64_t i = 0;
  for (; i + K * L <= n; i += K * L) f32_chain_group<Ops, K, false>(ops, n_ops, regs, i, 0);
  for (; i + L <= n; i += L) f32_chain_group<Ops, 1, false>(ops, n_ops, regs, i, 0);
  if (i < n) f32_chain_group<Ops, 1, true>(ops, n_ops, regs, i, n - i);
}

}  // namespace
}  // namespace c10d::inline v1::lazy::f32_packets
