#include "lazy/ir.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <bit>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "core/shape.h"

namespace c10d::inline v1::lazy {

std::string_view op_name(OpKind op) {
  switch (op) {
    case OpKind::kData:
      return "data";
    case OpKind::kConstant:
      return "constant";
    case OpKind::kArange:
      return "arange";
    case OpKind::kUniform:
      return "uniform";
    case OpKind::kNormal:
      return "normal";
    case OpKind::kIdentity:
      return "broadcast_to";
    case OpKind::kCast:
      return "cast";
    case OpKind::kNeg:
      return "neg";
    case OpKind::kAbs:
      return "abs";
    case OpKind::kExp:
      return "exp";
    case OpKind::kLog:
      return "log";
    case OpKind::kSqrt:
      return "sqrt";
    case OpKind::kTanh:
      return "tanh";
    case OpKind::kSigmoid:
      return "sigmoid";
    case OpKind::kRelu:
      return "relu";
    case OpKind::kPow:
      return "pow";
    case OpKind::kAdd:
      return "add";
    case OpKind::kSub:
      return "sub";
    case OpKind::kMul:
      return "mul";
    case OpKind::kDiv:
      return "div";
    case OpKind::kMaximum:
      return "maximum";
    case OpKind::kMinimum:
      return "minimum";
    case OpKind::kEq:
      return "eq";
    case OpKind::kNe:
      return "ne";
    case OpKind::kLt:
      return "lt";
    case OpKind::kLe:
      return "le";
    case OpKind::kGt:
      return "gt";
    case OpKind::kGe:
      return "ge";
    case OpKind::kWhere:
      return "where";
    case OpKind::kSum:
      return "sum";
    case OpKind::kMean:
      return "mean";
    case OpKind::kMax:
      return "max";
    case OpKind::kArgmax:
      return "argmax";
    case OpKind::kMatmul:
      return "matmul";
    case OpKind::kTranspose:
      return "transpose";
    case OpKind::kReshape:
      return "reshape";
    case OpKind::kSliceRows:
      return "slice_rows";
    case OpKind::kConcat:
      return "concat";
    case OpKind::kOneHot:
      return "one_hot";
    case OpKind::kAllReduce:
      return "all_reduce";
  }
  return "?";
}

bool is_elementwise(OpKind op) { return op >= OpKind::kIdentity && op <= OpKind::kWhere; }
bool is_reduction(OpKind op) {
  return op == OpKind::kSum || op == OpKind::kMean || op == OpKind::kMax;
}
bool has_payload(OpKind op) {
  return op == OpKind::kData || op == OpKind::kUniform || op == OpKind::kNormal ||
         op == OpKind::kAllReduce;
}

std::int64_t ValueType::numel() const { return core::checked_numel("lazy value", shape, dtype); }

const ValueType& Value::type() const { return node->outputs[static_cast<std::size_t>(index)]; }

std::uint64_t hash_combine(std::uint64_t seed, std::uint64_t value) {
  // splitmix64 finalizer over the pair: cheap and well mixed.
  std::uint64_t x = seed ^ (value + 0x9E3779B97F4A7C15ULL + (seed << 6) + (seed >> 2));
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

Node::~Node() {
  // Unlink iteratively: a chain of a million nodes must not recurse a million frames deep.
  std::vector<std::shared_ptr<Node>> stack;
  for (Value& v : operands) {
    if (v.node) stack.push_back(std::move(v.node));
  }
  if (control) stack.push_back(std::move(control));
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) {
      for (Value& v : n->operands) {
        if (v.node) stack.push_back(std::move(v.node));
      }
      if (n->control) stack.push_back(std::move(n->control));
    }
  }
}

std::shared_ptr<Node> make_node(OpKind op, std::vector<Value> operands,
                                std::vector<ValueType> outputs, std::vector<std::int64_t> ints,
                                std::vector<double> reals, std::shared_ptr<Node> control) {
  // Shapes come from user values (zeros({n}), one_hot's classes, broadcast_to, arange's
  // count...): every buffer planned from them must be countable in bytes, or its size wraps
  // and a kernel writes past a small allocation.
  for (const ValueType& t : outputs) core::checked_numel(op_name(op), t.shape, t.dtype);
  auto node = std::make_shared<Node>();
  node->op = op;
  node->operands = std::move(operands);
  node->outputs = std::move(outputs);
  node->ints = std::move(ints);
  node->reals = std::move(reals);
  node->control = std::move(control);
  std::uint64_t h = hash_combine(0x6C617A79ULL, static_cast<std::uint64_t>(op));
  for (const ValueType& t : node->outputs) {
    h = hash_combine(h, static_cast<std::uint64_t>(t.dtype));
    h = hash_combine(h, t.shape.size());
    for (std::int64_t d : t.shape) h = hash_combine(h, static_cast<std::uint64_t>(d));
  }
  h = hash_combine(h, node->ints.size());
  for (std::int64_t v : node->ints) h = hash_combine(h, static_cast<std::uint64_t>(v));
  h = hash_combine(h, node->reals.size());
  for (double v : node->reals) h = hash_combine(h, std::bit_cast<std::uint64_t>(v));
  node->local_hash = h;
  for (const Value& v : node->operands) {
    h = hash_combine(h, v.node->hash);
    h = hash_combine(h, static_cast<std::uint64_t>(v.index));
  }
  if (node->control) h = hash_combine(h, node->control->hash);
  node->hash = h;
  return node;
}

}  // namespace c10d::inline v1::lazy
