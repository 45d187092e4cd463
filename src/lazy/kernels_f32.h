// Float32 elementwise kernels over spans, the ones both engines run for a float32 instruction
// (eager runs each op as a one-instruction fused kernel), so eager and lazy give the same bits.
//
// Each kernel is a plain function over raw pointers, chosen once per fused kernel run: the
// fused engine calls it on small blocks of a tile (all instructions on one block, then the
// next block) so that loading the input and storing the output overlap the arithmetic, and a
// call costs a few nanoseconds instead of a trip through the dtype and op dispatch.
//
// Every element, the tail of a span included, goes through the same SIMD packet code (a tail
// is computed in a zero-padded packet), so a value never depends on where a block or tile cut
// falls. Transcendentals are Eigen's packet functions (EIGEN_FAST_MATH): tanh is its [13/6]
// rational, accurate to a few float32 ulp; tests/lazy/kernels_f32_test.cc states the bounds.
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

// Elements per block kernel call: 16 AVX2 or 8 AVX-512 packets. Blocks of 4 packets or fewer
// spent more on the calls than they saved; 32 AVX2 packets were 2.5x slower (scratch program
// over tanh(x*x+1)*0.5, 16M floats).
inline constexpr std::int64_t kF32Block = 128;

struct F32Kernels {
  F32Kernel span = nullptr;
  F32BlockKernel block = nullptr;
};

// The kernels for `ins` when it computes float32 from float32 with one of: add, sub, mul, div,
// maximum, minimum (register or immediate operands), neg, abs, relu, pow 2, exp, log, sqrt,
// tanh, sigmoid. Otherwise nulls: the caller uses the generic Eigen kernels.
F32Kernels f32_kernels(const TileInstr& ins);

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

}  // namespace c10d::lazy
