// A compiled program: the plan for one graph structure, cached by the graph's hash and run
// once per step with that step's payloads (input bytes, random counters, process groups).
//
// Entries are the canonical graph's nodes (same numbering), without payloads. Every entry
// output has a buffer slot; a slot gets bytes only if something reads it from memory (a root,
// an operand of a non-fused step, an operand from outside a fused kernel).
//
// Steps run in order. A fused step is one tiled pass over an iteration space: loads (direct
// from a buffer, an immediate constant, or a broadcast gather), elementwise instructions on
// tile registers, stores of the registers that escape, and optionally one reduction of a
// register. Every other op is a node step with its own kernel.
//
// Thread-safety: a Program is immutable after planning, except its pool of workspaces (the
// buffers kept between runs), which is guarded by pool_mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "lazy/graph.h"
#include "lazy/ir.h"

namespace c10d::inline v1::lazy {

struct ProgramEntry {
  OpKind op;
  std::vector<ValueType> outputs;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;
  std::vector<Slot> operands;
  int control = -1;
  int param = -1;
};

struct TileInput {
  enum class Kind { kDirect, kImmediate, kSplat, kBroadcast };  // kSplat: one element, everywhere
  Kind kind = Kind::kDirect;
  int slot = -1;  // kDirect, kSplat, kBroadcast
  DType dtype = DType::kFloat32;
  double value = 0;  // kImmediate
  // kBroadcast: the iteration space's coalesced dims and this input's element strides in them.
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> strides;
};

struct TileInstr {
  OpKind op;
  DType dtype;     // result
  DType in_dtype;  // operands (kCast: the source)
  int a = -1;
  int b = -1;
  int c = -1;
  double real = 0;  // kPow exponent
  // A binary op whose a or b is an immediate constant computes with the scalar `imm` instead of
  // reading a filled register.
  bool a_imm = false;
  bool b_imm = false;
  double imm = 0;
};

struct F32Plan;  // kernels_f32.h

struct FusedKernel {
  std::int64_t numel = 0;
  std::vector<TileInput> inputs;            // registers [0, inputs.size())
  std::vector<TileInstr> instrs;            // register inputs.size() + i
  std::vector<std::pair<int, int>> stores;  // (register, slot)
  // Optional reduction of one register over the [A, R, B] view of the iteration space.
  OpKind reduce = OpKind::kData;  // kData: none
  int reduce_reg = -1;
  int reduce_slot = -1;
  DType reduce_dtype = DType::kFloat32;
  std::int64_t A = 1, R = 1, B = 1;
  int n_ops = 0;  // IR nodes this kernel computes
  // The float32 kernels its tiles run through, chosen by the planner (plan_f32).
  std::shared_ptr<const F32Plan> f32;

  DType reg_dtype(int reg) const {
    return reg < static_cast<int>(inputs.size())
               ? inputs[static_cast<std::size_t>(reg)].dtype
               : instrs[static_cast<std::size_t>(reg) - inputs.size()].dtype;
  }
};

struct Step {
  bool fused = false;
  FusedKernel kernel;  // fused
  int entry = -1;      // node step
};

struct Program {
  std::vector<ProgramEntry> entries;
  std::vector<int> slot_base;  // entry -> its first slot
  int num_slots = 0;
  std::vector<std::size_t> slot_bytes;
  std::vector<Step> steps;
  std::vector<int> root_slots;
  // Per slot: the all_reduce output whose range of the node's flat buffer the slot is computed
  // in, or entry -1. A matmul whose result only that node reads writes it there, so the node
  // need not copy it in.
  std::vector<Slot> home;
  std::vector<std::uint64_t> encoding;  // to tell a hash collision from a hit
  // Per run: IR nodes computed, kernels run, of which fused (2+ nodes).
  std::int64_t ops = 0;
  std::int64_t kernels = 0;
  std::int64_t fused_kernels = 0;
  std::int64_t cse_merged = 0;

  int slot(const Slot& s) const { return slot_base[static_cast<std::size_t>(s.entry)] + s.index; }

  // Buffers kept between runs: one vector of storages per concurrent run.
  std::mutex pool_mutex;
  std::vector<std::vector<std::shared_ptr<Storage>>> pool;  // GUARDED_BY(pool_mutex)
};

// Plans a program for `graph` (dead code is never in it: only what the roots reach is).
std::unique_ptr<Program> plan(const Graph& graph);

}  // namespace c10d::inline v1::lazy
