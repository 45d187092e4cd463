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

namespace c10d::lazy::f32_packets {
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

}  // namespace
}  // namespace c10d::lazy::f32_packets
