// Float32 elementwise kernels over spans, the ones both engines run for a float32 instruction
// (eager runs each op as a one-instruction fused kernel), so eager and lazy give the same bits.
//
// Each kernel is a plain function over raw pointers, chosen once per fused kernel run: the
// fused engine calls it on blocks of a tile (all instructions on one block, then the next
// block; today a block is the whole tile, see kF32Block), and a call costs a few nanoseconds
// instead of a trip through the dtype and op dispatch.
//
// Every element, the tail of a span included, goes through the same SIMD packet code (a tail
// is computed in a zero-padded packet), so a value never depends on where a block or tile cut
// falls. Transcendentals are Eigen's packet functions (EIGEN_FAST_MATH): tanh is its [13/6]
// rational, accurate to a few float32 ulp; tests/lazy/kernels_f32_test.cc states the bounds.
// On a CPU with AVX-512, exp, log, tanh and sigmoid run on 16-lane packets
// (kernels_f32_avx512.cc), chosen once per process, so both engines still share their bits.
//
// Thread-safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <vector>

#include "lazy/program.h"

namespace c10d::lazy {

// out[i] = op(a[i], b[i]) for a binary instruction, op(a[i]) for a unary one; with an
// immediate operand (TileInstr::a_imm / b_imm), `a` is the register operand and `imm` the
// other. `b` is unused (may be null) for unary and immediate forms. `out` may equal `a` or `b`.
using F32Kernel = void (*)(const float* a, const float* b, float imm, float* out, std::int64_t n);
// The same over exactly kF32Block elements, unrolled: no loop to mispredict, no tail.
using F32BlockKernel = void (*)(const float* a, const float* b, float imm, float* out);

// Elements per block kernel call: a whole tile (kTile, kernels.h), 64 AVX2 or 32 AVX-512
// packets; it must divide kTile. c10d-lazy-bench's tanh(x*x+1)*0.5 over 16M floats on Zen 5,
// fused: with the AVX-512 tanh, blocks of 128 elements took 5.0-5.4 ms, 256 4.5-4.7 ms, 512
// 4.2-4.4 ms (the calls cost more than smaller blocks save); with the AVX2 tanh, 128 and 512
// both took 5.8-6.0 ms.
inline constexpr std::int64_t kF32Block = 512;

struct F32Kernels {
  F32Kernel span = nullptr;
  F32BlockKernel block = nullptr;
};

// Which packets the compute-bound kernels (exp, log, tanh, sigmoid) use: those of the build's
// instruction set (8 lanes at x86-64-v3), or 16-lane AVX-512 ones. The memory-bound kernels
// always use the build's: in a whole build for AVX-512 (x86-64-v4) they ran slower on Zen 5.
enum class F32Isa { kBuild, kAvx512 };

// kAvx512 when this build has the AVX-512 kernels and the CPU (and OS) run AVX-512F, DQ, BW
// and VL; decided on the first call, the same for the whole process.
F32Isa f32_isa();

// The kernels for `ins` when it computes float32 from float32 with one of: add, sub, mul, div,
// maximum, minimum (register or immediate operands), neg, abs, relu, pow 2, exp, log, sqrt,
// tanh, sigmoid. Otherwise nulls: the caller uses the generic Eigen kernels. The first form
// uses f32_isa(); the second lets a test run either path (kAvx512 needs f32_isa() == kAvx512).
F32Kernels f32_kernels(const TileInstr& ins);
F32Kernels f32_kernels(const TileInstr& ins, F32Isa isa);

// One instruction as the engine runs it: its kernels (null when not covered), the register
// operands it reads as `a` and `b` (-1: none), and its immediate.
struct F32Step {
  F32Kernels kernels;
  int a = -1;
  int b = -1;
  float imm = 0;
};
F32Step f32_step(const TileInstr& ins);

// Runs a chain of covered instructions over the `n` elements of one tile, block by block:
// every instruction on kF32Block elements, then the next block. regs[r] points to register
// r's elements for the tile; step j writes register first_out + j.
void run_f32_chain(const std::vector<F32Step>& steps, void* const* regs, std::size_t first_out,
                   std::int64_t n);

namespace detail {
// Defined in kernels_f32_avx512.cc, compiled with AVX-512 flags (only when the compiler takes
// them on x86-64: C10D_F32_AVX512): the kernels of `op` on 16-lane packets, nulls for an op it
// does not cover. Call only when f32_isa() == F32Isa::kAvx512.
F32Kernels f32_avx512_kernels(OpKind op);
}  // namespace detail

}  // namespace c10d::lazy
