// The lazy core's IR: a DAG of nodes, each one op with attributes and typed outputs.
//
// Ownership: a node owns its operands (shared_ptr), never its users, so there are no cycles and
// a graph lives exactly as long as some tensor (or a later node) refers into it. A node is
// immutable once made. Destroying a long chain does not recurse (~Node unlinks iteratively).
//
// Hash: Node::hash is structural: op, attributes, output dtypes and shapes, and the operands'
// hashes. Leaves that carry run-time data (input tensors, random streams, process groups) hash
// by type only, so a step that repeats with new values hashes the same; constants hash by value.
//
// Thread-safety: nodes are immutable after make_node(); sharing them across threads is safe.
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "c10d/tensor.h"
#include "c10d/types.h"

namespace c10d::inline v1 {
class ProcessGroup;
}

namespace c10d::inline v1::lazy {

using Shape = std::vector<std::int64_t>;

enum class OpKind : std::uint8_t {
  // Leaves.
  kData,      // an input tensor's bytes (payload: storage, offset)
  kConstant,  // reals[0] everywhere in the output
  kArange,    // reals {start, step}
  kUniform,   // reals {low, high}; payload: seed, counter
  kNormal,    // reals {mean, stddev}; payload: seed, counter
  // Elementwise (operands already of the compute dtype; binary operands broadcast).
  kIdentity,  // broadcast_to, or a constant written to memory
  kCast,
  kNeg,
  kAbs,
  kExp,
  kLog,
  kSqrt,
  kTanh,
  kSigmoid,
  kRelu,
  kPow,  // reals[0] = exponent
  kAdd,
  kSub,
  kMul,
  kDiv,
  kMaximum,
  kMinimum,
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kWhere,
  // Reductions over ints = sorted axes forming one contiguous block; output keeps no dims.
  kSum,
  kMean,
  kMax,
  kArgmax,  // ints {axis}
  // Others.
  kMatmul,
  kTranspose,  // ints {dim0, dim1}
  kReshape,    // output shape; shares the operand's bytes
  kSliceRows,  // ints {begin, end}; shares the operand's bytes
  kConcat,     // ints {axis}
  kOneHot,     // ints {classes}
  kAllReduce,  // ints {reduce op}; reals {scale}; payload: group; control: previous collective
};

std::string_view op_name(OpKind op);
bool is_elementwise(OpKind op);
bool is_reduction(OpKind op);  // kSum, kMean, kMax (the fusible ones)
bool has_payload(OpKind op);   // kData, kUniform, kNormal, kAllReduce

struct ValueType {
  DType dtype;
  Shape shape;
  std::int64_t numel() const;
};

struct Node;

// One output of a node.
struct Value {
  std::shared_ptr<Node> node;
  int index = 0;
  const ValueType& type() const;
};

struct Node {
  OpKind op;
  std::vector<Value> operands;
  std::vector<ValueType> outputs;
  std::vector<std::int64_t> ints;
  std::vector<double> reals;
  std::shared_ptr<Node> control;  // ordering edge (collectives)
  // Run-time payload: read when the graph runs, never hashed.
  std::shared_ptr<Storage> storage;     // kData
  std::size_t offset_bytes = 0;         // kData
  std::uint64_t seed = 0;               // kUniform, kNormal
  std::uint64_t counter = 0;            // kUniform, kNormal
  std::shared_ptr<ProcessGroup> group;  // kAllReduce

  std::uint64_t local_hash = 0;  // op, attributes, output types
  std::uint64_t hash = 0;        // local_hash and the operands' hashes

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  ~Node();
};

// Makes a node and computes its hashes. Payload fields are set by the caller afterwards through
// the returned pointer, before the node is shared.
std::shared_ptr<Node> make_node(OpKind op, std::vector<Value> operands,
                                std::vector<ValueType> outputs, std::vector<std::int64_t> ints = {},
                                std::vector<double> reals = {},
                                std::shared_ptr<Node> control = nullptr);

std::uint64_t hash_combine(std::uint64_t seed, std::uint64_t value);

}  // namespace c10d::inline v1::lazy
