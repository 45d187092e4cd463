// The float32 transcendental kernels (exp, log, tanh, sigmoid) on 16-lane AVX-512 packets, for
// CPUs that have AVX-512 while the rest of the library is built for AVX2 (x86-64-v3).
//
// Why: these four are compute-bound (tanh is a [13/6] rational, about 13 multiply-class
// operations a packet), so twice the lanes per instruction nearly halve their time; the
// memory-bound kernels are not, and built for AVX-512 as a whole (-march=x86-64-v4) the
// library's eager ops and memory-bound fused kernels ran 15-25% slower on this machine. So
// only this file is compiled with AVX-512 flags (src/CMakeLists.txt), and f32_kernels()
// (kernels_f32.cc) uses its kernels only when the CPU runs AVX-512, checked once at run time.
//
// ODR precautions: a function this file emitted as a weak (inline or template) symbol could
// be the copy the linker keeps for every object of libc10d, and would then run AVX-512
// instructions on CPUs without them. So everything here is in an anonymous namespace except
// f32_avx512_kernels() (called only after the CPU check), and the only Eigen code it
// instantiates is templated on Packet16f, which no AVX2 object can name. `nm` on this object
// (GCC 12, Release) lists one global symbol, f32_avx512_kernels, and no weak one, no COMDAT
// group and no static initializer: check again after adding code here. The file is compiled
// with -Wno-uninitialized: GCC 12 warns about _mm512_undefined_ps's deliberate self-copy
// inside Eigen's masked intrinsics (avx512fintrin.h).
//
// Bits: the kernels follow kernels_f32.cc (every element, a tail included, goes through the
// same packet code) and the same Eigen algorithms as the AVX2 path, so both paths give the
// same bits (tests/lazy/kernels_f32_test.cc checks it, and both against the C library). Hence
// exp calls the generic pexp_float as Packet8f does, not Eigen 3.4's own Packet16f exp, which
// rounds differently and returns x itself for x above 88.4 (exp(1e30) == 1e30).
#include <Eigen/Core>
#include <cstring>

#include "lazy/kernels_f32.h"
#include "lazy/kernels_f32_packets.h"

#if !defined(__AVX512F__) || !defined(__AVX512DQ__) || !defined(__FMA__)
#error "kernels_f32_avx512.cc must be compiled with -mavx512f -mavx512dq -mfma"
#endif

namespace c10d::inline v1::lazy::detail {
namespace {

namespace ei = Eigen::internal;
using P = ei::Packet16f;
constexpr std::int64_t kLanes = 16;
struct Packets {  // kernels_f32_packets.h's packet traits
  using P = detail::P;
};
static_assert(ei::packet_traits<float>::size == kLanes, "Eigen did not pick AVX-512 packets");
static_assert(kF32Block % kLanes == 0);

struct Exp {
  static P f(const P& x) { return ei::pexp_float(x); }
};
struct Log {
  static P f(const P& x) { return ei::plog(x); }
};
struct Tanh {
  static P f(const P& x) { return ei::ptanh(x); }
};
// Eigen's logistic takes exp(x) below -9, from its Packet16f exp (0 instead of 2.9e-39 below
// -88.4, last-bit differences above): those lanes are recomputed with pexp_float as Packet8f
// does, so both paths give the same bits. Costs a second exp in such packets only.
struct Sigmoid {
  static P f(const P& x) {
    const P logistic = ei::scalar_logistic_op<float>().packetOp(x);
    const P small = ei::pcmp_lt(x, ei::pset1<P>(-9.f));
    if (EIGEN_PREDICT_TRUE(!ei::predux_any(small))) return logistic;
    return ei::pselect(small, ei::pexp_float(x), logistic);
  }
};

template <class Op>
F32Kernels unary_kernels() {
  return f32_packets::unary_kernels<Packets, Op>();
}

// The register chain's packet operations on 16 lanes: the same Eigen functions as ChainOps in
// kernels_f32.cc, which give the same bits on Packet16f as on Packet8f (checked by
// tests/lazy/kernels_f32_test.cc), except sqrt: Eigen's fast Packet16f sqrt starts from
// rsqrt14, not rsqrt, and rounds differently, so f32_chain() never sends a chain with sqrt
// here; it is defined only because the interpreter names every code.
struct Transcendentals {
  using P = detail::P;
  static P exp(const P& x) { return Exp::f(x); }
  static P log(const P& x) { return Log::f(x); }
  static P sqrt(const P& x) { return ei::psqrt(x); }
  static P tanh(const P& x) { return Tanh::f(x); }
  static P sigmoid(const P& x) { return Sigmoid::f(x); }
};
using ChainOps = f32_packets::ChainOps<Transcendentals>;

}  // namespace

void f32_avx512_chain(const F32Chain& chain, void* const* regs, std::int64_t n) {
  // Eight packets a group (8 of the 32 zmm registers): fused tanh(x*x+1)*0.5 took 3.7-3.9 ms,
  // with four 3.9-4.0 ms.
  f32_packets::f32_chain_run<ChainOps, 8>(chain, regs, n);
}

F32Kernels f32_avx512_kernels(OpKind op) {
  switch (op) {
    case OpKind::kExp:
      return unary_kernels<Exp>();
    case OpKind::kLog:
      return unary_kernels<Log>();
    case OpKind::kTanh:
      return unary_kernels<Tanh>();
    case OpKind::kSigmoid:
      return unary_kernels<Sigmoid>();
    default:
      return {};
  }
}

}  // namespace c10d::inline v1::lazy::detail
