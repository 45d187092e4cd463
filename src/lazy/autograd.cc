// Autograd bookkeeping: tensor metadata, grad mode, recording ops into nodes, leaf gradients
// and hooks. The backward pass itself is in autograd_engine.cc, the rules in autograd_rules*.
#include "lazy/autograd.h"

#include <atomic>
#include <mutex>
#include <unordered_set>

#include "core/check.h"

namespace c10d::inline v1::lazy {
namespace autograd {
namespace {

thread_local bool t_grad_enabled = true;
std::atomic<std::uint64_t> g_next_sequence_nr{0};

std::string shape_string(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// The node of one recorded op: its saved values and its rule.
class OpNode : public Node {
 public:
  OpNode(const Rule* rule, SavedOp op, int num_outputs)
      : rule_(rule), op_(std::move(op)), num_outputs_(num_outputs) {}

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    const std::size_t n = op_.input_shapes.size();
    if (rule_ == nullptr) {
      C10D_THROW(Unsupported, "backward: op '{}' has no gradient rule", op_.name);
    }
    if (!grad_outputs[0].defined()) return std::vector<Tensor>(n);
    C10D_CHECK(!released_ || (!rule_->save_inputs && !rule_->save_outputs),
               "backward: op '{}' was already run by an earlier backward(), which freed its "
               "saved values; pass retain_graph = true to the first one",
               op_.name);
    std::vector<Tensor> grads = rule_->fn(op_, grad_outputs[0]);
    C10D_CHECK(grads.size() == n, "backward rule of '{}' gave {} gradients for {} inputs", op_.name,
               grads.size(), n);
    for (std::size_t i = 0; i < n; ++i) {
      if (!op_.needs_grad[i] || !grads[i].defined()) {
        grads[i] = Tensor();
        continue;
      }
      grads[i] = sum_to(grads[i], op_.input_shapes[i]);
      if (grads[i].dtype() != op_.input_dtypes[i]) grads[i] = cast(grads[i], op_.input_dtypes[i]);
    }
    return grads;
  }

  void release_saved() override {
    op_.inputs.clear();
    op_.outputs.clear();
    released_ = true;
  }
  std::string name() const override { return op_.name; }
  // Rules exist for single-result ops only; an op without a rule (all_reduce) may have more.
  int num_outputs() const override { return num_outputs_; }

 private:
  const Rule* rule_;
  SavedOp op_;
  int num_outputs_;
  bool released_ = false;
};

// Adds a leaf's gradient for this pass into its .grad, then runs its hooks.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}

  std::vector<Tensor> apply(std::vector<Tensor> grad_outputs) override {
    const Tensor& g = grad_outputs[0];
    if (!g.defined()) return {};
    Tensor leaf(leaf_);
    AutogradMeta& m = ensure_meta(leaf);
    if (!m.grad.defined()) {
      // A handle of its own, so no other tensor (another leaf's grad, the caller's
      // grad_output) shares the impl that later accumulation rebinds.
      m.grad = detach(g);
    } else {
      assign(m.grad, add(m.grad, g));
    }
    // A copy: a hook may add or remove hooks.
    auto hooks = m.hooks;
    for (auto& [id, hook] : hooks) hook(leaf, g);
    return {};
  }
  std::string name() const override { return "AccumulateGrad"; }
  bool is_accumulator() const override { return true; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

void install_hook_once() {
  static std::once_flag once;
  std::call_once(once, [] { set_record_hook(&record); });
}

}  // namespace

Node::Node() : sequence_nr_(g_next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

Node::~Node() {
  // Nodes only this one owns would otherwise be destroyed recursively, one stack frame per op
  // of the forward pass. Take their edges first, so each dies with nothing left to free.
  std::vector<std::shared_ptr<Node>> stack;
  for (Edge& e : next_edges) {
    if (e.node) stack.push_back(std::move(e.node));
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (n.use_count() == 1) {
      for (Edge& e : n->next_edges) {
        if (e.node) stack.push_back(std::move(e.node));
      }
    }
  }
}

AutogradMeta* meta(const Tensor& t) {
  return t.defined() ? t.impl()->autograd_meta().get() : nullptr;
}

AutogradMeta& ensure_meta(const Tensor& t) {
  if (!t.impl()->autograd_meta()) t.impl()->set_autograd_meta(std::make_shared<AutogradMeta>());
  return *t.impl()->autograd_meta();
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = meta(t);
  if (m == nullptr || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn, m->output_nr};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    acc = std::make_shared<AccumulateGrad>(t.impl());
    m->grad_accumulator = acc;
  }
  return {acc, 0};
}

std::vector<Tensor> reachable_leaves(const std::vector<Tensor>& roots) {
  std::vector<Tensor> leaves;
  std::unordered_set<const Node*> seen;
  std::vector<std::shared_ptr<Node>> stack;
  for (const Tensor& r : roots) {
    Edge e = gradient_edge(r);
    if (e.node && seen.insert(e.node.get()).second) stack.push_back(std::move(e.node));
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> n = std::move(stack.back());
    stack.pop_back();
    if (const auto* acc = dynamic_cast<const AccumulateGrad*>(n.get())) {
      leaves.emplace_back(acc->leaf());
      continue;
    }
    for (const Edge& e : n->next_edges) {
      if (e.node && seen.insert(e.node.get()).second) stack.push_back(e.node);
    }
  }
  return leaves;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const auto& g = grad.shape();
  C10D_CHECK(g.size() >= shape.size(), "sum_to: gradient {} cannot reduce to {}", shape_string(g),
             shape_string(shape));
  const std::size_t lead = g.size() - shape.size();
  std::vector<std::int64_t> axes;
  for (std::size_t i = 0; i < lead; ++i) axes.push_back(static_cast<std::int64_t>(i));
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 1 && g[lead + i] != 1) axes.push_back(static_cast<std::int64_t>(lead + i));
  }
  // An empty axis list would mean "all axes" to sum().
  Tensor r = axes.empty() ? grad : sum(grad, axes, /*keepdim=*/true);
  return reshape(r, shape);
}

void record(const OpRecord& rec) {
  if (!t_grad_enabled) return;
  bool any = false;
  for (const Tensor& t : rec.inputs) any = any || requires_grad(t);
  if (!any) return;
  const Rule* rule = find_rule(rec.name);
  if (rule != nullptr && rule->fn == nullptr) return;  // not differentiable

  SavedOp op;
  op.name = std::string(rec.name);
  const bool save_in = rule != nullptr && rule->save_inputs;
  const bool save_out = rule != nullptr && rule->save_outputs;
  for (const Tensor& t : rec.inputs) {
    op.input_shapes.push_back(t.shape());
    op.input_dtypes.push_back(t.dtype());
    if (save_in) op.inputs.push_back(detach(t));
  }
  if (save_out) {
    for (const Tensor& t : rec.outputs) op.outputs.push_back(detach(t));
  }
  op.axes = rec.axes;
  op.keepdim = rec.keepdim;
  op.exponent = rec.exponent;
  op.shape = rec.shape;
  op.dim0 = rec.dim0;
  op.dim1 = rec.dim1;
  op.begin = rec.begin;
  op.end = rec.end;
  op.axis = rec.axis;
  op.dtype = rec.dtype;

  std::vector<Edge> edges;
  edges.reserve(rec.inputs.size());
  for (const Tensor& t : rec.inputs) {
    edges.push_back(gradient_edge(t));
    op.needs_grad.push_back(edges.back().node != nullptr);
  }
  auto node = std::make_shared<OpNode>(rule, std::move(op), static_cast<int>(rec.outputs.size()));
  node->next_edges = std::move(edges);

  for (std::size_t j = 0; j < rec.outputs.size(); ++j) {
    const Tensor& out = rec.outputs[j];
    if (!out.defined() || !is_floating_point(out.dtype())) continue;
    // An op that handed back one of its inputs must not turn that input into a non-leaf.
    bool is_input = false;
    for (const Tensor& in : rec.inputs) is_input = is_input || in.impl() == out.impl();
    if (is_input) continue;
    AutogradMeta& m = ensure_meta(out);
    m.requires_grad = true;
    m.grad_fn = node;
    m.output_nr = static_cast<int>(j);
  }
}

}  // namespace autograd

using autograd::meta;

void set_requires_grad(const Tensor& t, bool requires_grad) {
  C10D_CHECK(t.defined(), "set_requires_grad: the tensor is undefined");
  AutogradMeta* m = meta(t);
  if (m != nullptr && m->grad_fn) {
    C10D_CHECK(requires_grad,
               "set_requires_grad(false) on {}, the result of op '{}': only leaves "
               "can stop requiring grad; use detach()",
               t.to_string(), m->grad_fn->name());
    return;
  }
  if (requires_grad) {
    C10D_CHECK(is_floating_point(t.dtype()),
               "set_requires_grad: only floating tensors can require grad, not {}", t.to_string());
    autograd::install_hook_once();
    autograd::ensure_meta(t).requires_grad = true;
  } else if (m != nullptr) {
    m->requires_grad = false;
  }
}

bool requires_grad(const Tensor& t) {
  AutogradMeta* m = meta(t);
  return m != nullptr && m->requires_grad;
}

bool is_leaf(const Tensor& t) {
  AutogradMeta* m = meta(t);
  return m == nullptr || !m->grad_fn;
}

Tensor grad(const Tensor& t) {
  AutogradMeta* m = meta(t);
  return m != nullptr ? m->grad : Tensor();
}

void set_grad(const Tensor& t, const Tensor& g) {
  C10D_CHECK(t.defined(), "set_grad: the tensor is undefined");
  if (!g.defined()) {
    if (AutogradMeta* m = meta(t)) m->grad = Tensor();
    return;
  }
  C10D_CHECK(g.shape() == t.shape() && g.dtype() == t.dtype(),
             "set_grad: gradient {} does not match tensor {}", g.to_string(), t.to_string());
  autograd::ensure_meta(t).grad = g;
}

int add_grad_hook(const Tensor& leaf, GradHook hook) {
  C10D_CHECK(requires_grad(leaf), "add_grad_hook: tensor {} does not require grad",
             leaf.defined() ? leaf.to_string() : "(undefined)");
  AutogradMeta& m = *meta(leaf);
  C10D_CHECK(!m.grad_fn, "add_grad_hook: tensor {} is the result of op '{}', not a leaf",
             leaf.to_string(), m.grad_fn->name());
  C10D_CHECK(static_cast<bool>(hook), "add_grad_hook: the hook is empty");
  const int id = m.next_hook_id++;
  m.hooks.emplace_back(id, std::move(hook));
  return id;
}

void remove_grad_hook(const Tensor& leaf, int id) {
  AutogradMeta* m = meta(leaf);
  if (m != nullptr) {
    for (auto it = m->hooks.begin(); it != m->hooks.end(); ++it) {
      if (it->first == id) {
        m->hooks.erase(it);
        return;
      }
    }
  }
  C10D_THROW(InvalidArgument, "remove_grad_hook: no hook {} on this tensor", id);
}

NoGradGuard::NoGradGuard() : previous_(autograd::t_grad_enabled) {
  autograd::t_grad_enabled = false;
}
NoGradGuard::~NoGradGuard() { autograd::t_grad_enabled = previous_; }

bool grad_enabled() { return autograd::t_grad_enabled; }

}  // namespace c10d::inline v1::lazy
