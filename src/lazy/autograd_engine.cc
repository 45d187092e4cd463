// backward(): runs the nodes between a root and the leaves in dependency order.
//
// Vocabulary (see autograd.h for node, edge, leaf, final).
//   dependencies  per node, the number of edges into it from nodes reachable from the root;
//                 counted once, by an explicit-stack walk (no recursion, so a graph of any
//                 depth is fine).
//   buffer        per node, the gradients that arrived for its outputs so far, summed.
//   ready         nodes whose dependencies all ran. An accumulator runs first, the moment it
//                 is ready, so a leaf's hook fires as soon as its gradient is final; otherwise
//                 the latest-recorded op runs first (torch's order), which reaches the leaves
//                 in reverse order of their use in the forward pass.
// No node runs before all of its inputs' gradients are summed, so each runs exactly once.
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "lazy/autograd.h"

namespace c10d::inline v1::lazy {
namespace {

using autograd::Edge;
using autograd::Node;

struct Ready {
  Node* node;
  std::uint64_t order;  // when it became ready: ties between accumulators go first-come
};
struct RunsLater {
  bool operator()(const Ready& a, const Ready& b) const {
    if (a.node->is_accumulator() != b.node->is_accumulator()) return b.node->is_accumulator();
    if (a.node->is_accumulator()) return a.order > b.order;
    return a.node->sequence_nr() < b.node->sequence_nr();
  }
};

std::unordered_map<Node*, int> count_dependencies(Node* root) {
  std::unordered_map<Node*, int> deps;
  std::unordered_set<Node*> seen{root};
  std::vector<Node*> stack{root};
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (const Edge& e : n->next_edges) {
      if (!e.node) continue;
      ++deps[e.node.get()];
      if (seen.insert(e.node.get()).second) stack.push_back(e.node.get());
    }
  }
  return deps;
}

void add_into(std::vector<Tensor>& buffer, int slot, const Tensor& g) {
  Tensor& b = buffer[static_cast<std::size_t>(slot)];
  b = b.defined() ? add(b, g) : g;
}

}  // namespace

void backward(const Tensor& root, const Tensor& grad_output, bool retain_graph) {
  C10D_CHECK(root.defined(), "backward: the root tensor is undefined");
  C10D_CHECK(requires_grad(root),
             "backward: {} does not require grad (no input of the ops that made it requires "
             "grad, or it was made under NoGradGuard)",
             root.to_string());
  Tensor seed = grad_output;
  if (!seed.defined()) {
    C10D_CHECK(root.numel() == 1,
               "backward: root {} has {} elements; pass grad_output for a non-scalar root",
               root.to_string(), root.numel());
    seed = ones(root.shape(), root.dtype());
  } else {
    C10D_CHECK(seed.shape() == root.shape(), "backward: grad_output {} does not match root {}",
               seed.to_string(), root.to_string());
    if (seed.dtype() != root.dtype()) seed = cast(seed, root.dtype());
  }
  const Edge start = autograd::gradient_edge(root);
  // The rules are lazy ops; they must not record history of their own.
  NoGradGuard no_grad;

  std::unordered_map<Node*, int> deps = count_dependencies(start.node.get());
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  buffers[start.node.get()].resize(static_cast<std::size_t>(start.node->num_outputs()));
  add_into(buffers[start.node.get()], start.input_nr, seed);

  std::priority_queue<Ready, std::vector<Ready>, RunsLater> ready;
  std::uint64_t order = 0;
  ready.push({start.node.get(), order++});
  while (!ready.empty()) {
    Node* node = ready.top().node;
    ready.pop();
    std::vector<Tensor> grads_in;
    if (auto it = buffers.find(node); it != buffers.end()) {
      grads_in = std::move(it->second);
      buffers.erase(it);
    } else {
      grads_in.resize(static_cast<std::size_t>(node->num_outputs()));
    }
    bool any = false;
    for (const Tensor& g : grads_in) any = any || g.defined();
    // A node reached only by paths that carried no gradient passes none on.
    std::vector<Tensor> grads_out;
    if (any) grads_out = node->apply(std::move(grads_in));
    if (!retain_graph) node->release_saved();
    for (std::size_t i = 0; i < node->next_edges.size(); ++i) {
      const Edge& e = node->next_edges[i];
      if (!e.node) continue;
      if (i < grads_out.size() && grads_out[i].defined()) {
        auto& buf = buffers[e.node.get()];
        if (buf.empty()) buf.resize(static_cast<std::size_t>(e.node->num_outputs()));
        add_into(buf, e.input_nr, grads_out[i]);
      }
      if (--deps[e.node.get()] == 0) ready.push({e.node.get(), order++});
    }
  }
}

}  // namespace c10d::inline v1::lazy
