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

#include <cstddef>
#include <cstdint>
#include <vector>

#include "lazy/program.h"

namespace c10d::inline v1::lazy {

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

// Register chains: a fused kernel's covered float32 instructions run on K packets at a time
// (the whole chain on K packets, then the next K) instead of one pass per instruction over a
// tile. The per-instruction passes leave the load of x and the store of y in passes of their
// own, not overlapped with the tanh arithmetic, and cost ~4 calls a tile; here each packet is
// loaded once, goes through every instruction in registers and is stored once.
//
// The chain is an accumulator machine: the K packets of the current value stay in an array
// indexed only by constants, which the compiler keeps in vector registers. An instruction
// transforms the accumulator; its other operand is an immediate, the accumulator itself, a
// kernel input read straight from memory (L1 after the first read) or a saved value. Saved
// values (a computed register read again later) go to a small stack array: a first version
// kept every value there, and the extra stores stalled the loads (fused tanh 8.2 ms vs 4.5).
// Each instruction is dispatched once per group of K packets by a switch on its code, a
// predictable branch.
//
// A chain qualifies when every instruction is covered by f32_kernels() and at most
// kF32ChainSlots saved values are live at once; otherwise f32_chain() returns an empty chain
// and the caller runs steps. The values are bit-identical to f32_kernels(): the same Eigen
// packet functions with the same operand order, a tail computed in a zero-padded packet (lanes
// do not interact), and on AVX-512 the same functions on 16 lanes, which give the same bits
// (sqrt excepted: Eigen's fast AVX-512 sqrt rounds differently, so a chain with sqrt runs on
// the build's packets).
inline constexpr int kF32ChainSlots = 8;

enum class F32Code : std::uint8_t {
  kLoad,   // acc = operand
  kSave,   // slot `index` = acc
  kStore,  // register `index` = acc (an escaping register)
  kNeg,    // unary: acc = f(acc)
  kAbs,
  kRelu,
  kSquare,
  kExp,
  kLog,
  kSqrt,
  kTanh,
  kSigmoid,
  kAdd,  // binary: acc = f(acc, operand), f(acc, imm) or f(imm, acc)
  kSub,
  kMul,
  kDiv,
  kMax,
  kMin,
};
// The operand of kLoad and of a binary code.
enum class F32Src : std::uint8_t {
  kAcc,       // the accumulator
  kInput,     // kernel register `index` (an input), read from memory
  kSlot,      // saved slot `index`
  kImmRight,  // binary only: f(acc, imm)
  kImmLeft,   // binary only: f(imm, acc)
};

struct F32ChainOp {
  F32Code code;
  F32Src src = F32Src::kAcc;
  int index = 0;
  float imm = 0;
};

struct F32Chain {
  std::vector<F32ChainOp> ops;  // empty: not a register chain
  bool avx512 = false;          // run on 16-lane packets
};

// The register chain of `instrs` (registers [0, n_in) are the kernel's inputs, n_in + j the
// result of instrs[j]), storing the instruction registers r with escapes[r] set; empty when
// the instructions do not qualify (see above). `isa` as for f32_kernels().
F32Chain f32_chain(const std::vector<TileInstr>& instrs, std::size_t n_in,
                   const std::vector<bool>& escapes, F32Isa isa = f32_isa());

// Runs `chain` over the `n` elements of one tile: regs[r] points to register r's elements.
void run_f32_chain(const F32Chain& chain, void* const* regs, std::int64_t n);

// How a fused kernel's tiles run, chosen once when the planner builds the kernel
// (FusedKernel::f32): each instruction's step (null kernels where f32_kernels() does not cover
// it), whether every instruction is covered, and its register chain when one qualifies (never
// with a reduction).
struct F32Plan {
  std::vector<F32Step> steps;
  bool all_covered = false;
  F32Chain chain;
};
F32Plan plan_f32(const FusedKernel& k);

namespace detail {
// Defined in kernels_f32_avx512.cc, compiled with AVX-512 flags (only when the compiler takes
// them on x86-64: C10D_F32_AVX512): the kernels of `op` on 16-lane packets, nulls for an op it
// does not cover. Call only when f32_isa() == F32Isa::kAvx512.
F32Kernels f32_avx512_kernels(OpKind op);
void f32_avx512_chain(const F32Chain& chain, void* const* regs, std::int64_t n);

}  // namespace detail

}  // namespace c10d::inline v1::lazy
