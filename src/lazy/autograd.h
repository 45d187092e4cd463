// Reverse-mode autograd over the lazy ops: the backward graph, its nodes, and what a tensor
// carries (AutogradMeta).
//
// Vocabulary.
//   leaf       a tensor that requires grad and was not made by a recorded op (a parameter).
//   node       the gradient function of one recorded op (OpNode), or the accumulator of one
//              leaf (AccumulateGrad). A node takes the gradient of each of its op's outputs and
//              gives one for each input.
//   edge       (node, input slot): where the gradient for one input of an op goes. An input
//              that needs no gradient has an empty edge.
//   final      a leaf's gradient for one backward() is final when every path from the root to
//              the leaf has been processed: its accumulator's dependency count reached zero.
//
// Ownership, so there are no cycles: a tensor made by a recorded op owns its node (grad_fn);
// a node owns the nodes of its inputs (edges) and the values it saved; an AccumulateGrad owns
// its leaf's TensorImpl, and the leaf refers back to it only weakly. Saved values are
// detached handles (lazy::detach), which carry no AutogradMeta, so a node never owns itself,
// and they are snapshots: a later lazy::assign to an input does not change what backward sees.
// backward() frees the saved values of the nodes it ran unless retain_graph is set.
//
// Thread-safety: AutogradMeta and nodes are not synchronized: one graph (its tensors and
// nodes) is used by one thread at a time, while threads with disjoint graphs (ranks run as
// threads) record and run backward side by side. Grad mode is per thread; the rule table is
// read-only after its first use; sequence numbers come from one atomic counter.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "c10d/lazy.h"
#include "c10d/tensor.h"
#include "lazy/autograd_hook.h"

namespace c10d::inline v1 {

namespace lazy::autograd {
class Node;
}

// The autograd state of one TensorImpl (the slot declared in include/c10d/tensor.h).
class AutogradMeta {
 public:
  bool requires_grad = false;
  // Made by a recorded op: the op's node and which of its outputs this is. Null for leaves.
  std::shared_ptr<lazy::autograd::Node> grad_fn;
  int output_nr = 0;
  // Leaves: the accumulated gradient, the accumulator node (weak: it owns the leaf), hooks.
  Tensor grad;
  std::weak_ptr<lazy::autograd::Node> grad_accumulator;
  std::vector<std::pair<int, lazy::GradHook>> hooks;
  int next_hook_id = 0;
};

namespace lazy::autograd {

struct Edge {
  std::shared_ptr<Node> node;  // null: no gradient flows here
  int input_nr = 0;
};

class Node {
 public:
  Node();
  // Frees the chain of nodes below it without recursion, so a graph of any depth can die.
  virtual ~Node();
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Gradients of the op's outputs (undefined where none arrived) -> one per input (undefined
  // where the input needs none). Runs with grad mode off.
  virtual std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) = 0;
  virtual void release_saved() {}
  virtual std::string name() const = 0;
  virtual int num_outputs() const { return 1; }
  // AccumulateGrad runs as soon as it is ready, so a leaf's hook fires the moment its
  // gradient is final; other nodes run latest-recorded first.
  virtual bool is_accumulator() const { return false; }

  std::uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge> next_edges;  // one per input of the op

 private:
  std::uint64_t sequence_nr_;
};

// What a recorded op's backward rule sees.
struct SavedOp {
  std::string name;
  std::vector<Tensor> inputs;   // detached; only when the rule asked for them
  std::vector<Tensor> outputs;  // detached; only when the rule asked for them
  std::vector<Shape> input_shapes;
  std::vector<DType> input_dtypes;
  std::vector<bool> needs_grad;  // per input: does its edge lead anywhere
  // The attributes of OpRecord that rules read.
  std::vector<std::int64_t> axes;
  bool keepdim = false;
  double exponent = 0;
  Shape shape;
  std::int64_t dim0 = 0, dim1 = 0, begin = 0, end = 0, axis = 0;
  DType dtype = DType::kFloat32;
};

// A backward rule: gradient of the op's (single) output -> one gradient per input, undefined
// where needs_grad is false. A gradient may have the broadcast shape; the engine sums it back
// to the input's shape and casts it to the input's dtype.
using RuleFn = std::vector<Tensor> (*)(const SavedOp& op, const Tensor& grad);
struct Rule {
  RuleFn fn = nullptr;  // null: the op is not differentiable (its outputs need no grad)
  bool save_inputs = false;
  bool save_outputs = false;
};
// The rule for `op`, or nullptr when no rule is known (backward through it then throws
// Unsupported). autograd_rules*.cc fill the table.
const Rule* find_rule(std::string_view op);

// The hook installed into autograd_hook.h (done by the first set_requires_grad()).
void record(const OpRecord& record);

// Accessors for the meta of a tensor; null/absent when it has none.
AutogradMeta* meta(const Tensor& t);
AutogradMeta& ensure_meta(const Tensor& t);
// The edge a gradient for `t` follows: its grad_fn, or its leaf accumulator (made on demand),
// or nothing when it does not require grad.
Edge gradient_edge(const Tensor& t);

// The leaves (requiring grad) that a backward() from `roots` would reach, each once, in no
// particular order. DDP's find_unused_parameters asks this after the forward pass.
std::vector<Tensor> reachable_leaves(const std::vector<Tensor>& roots);

// Sums `grad` over the axes along which `shape` was broadcast, giving `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);

}  // namespace lazy::autograd
}  // namespace c10d::inline v1
