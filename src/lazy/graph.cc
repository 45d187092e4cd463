#include "lazy/graph.h"

#include <map>
#include <tuple>
#include <unordered_map>

namespace c10d::inline v1::lazy {
namespace {

using DataKey = std::tuple<const void*, std::size_t, int, Shape>;

class Canonicalizer {
 public:
  explicit Canonicalizer(Graph& g) : g_(g) {}

  // Returns the entry of `root`, numbering it and everything below it first.
  int visit(const Node* root) {
    if (auto it = entry_of_.find(root); it != entry_of_.end()) return it->second;
    struct Frame {
      const Node* node;
      std::size_t next;
    };
    std::vector<Frame> stack{{root, 0}};
    while (!stack.empty()) {
      Frame& f = stack.back();
      const std::size_t n_edges = f.node->operands.size() + (f.node->control ? 1 : 0);
      if (f.next < n_edges) {
        const Node* child = f.next < f.node->operands.size() ? f.node->operands[f.next].node.get()
                                                             : f.node->control.get();
        ++f.next;
        if (!entry_of_.contains(child)) stack.push_back({child, 0});
        continue;
      }
      const Node* node = f.node;
      stack.pop_back();
      if (!entry_of_.contains(node)) entry_of_[node] = add(node);
    }
    return entry_of_.at(root);
  }

 private:
  int add(const Node* node) {
    if (node->op == OpKind::kData) {
      const ValueType& t = node->outputs[0];
      DataKey key{node->storage.get(), node->offset_bytes, static_cast<int>(t.dtype), t.shape};
      auto [it, inserted] = data_.emplace(std::move(key), static_cast<int>(g_.nodes.size()));
      if (!inserted) return it->second;
    }
    const int id = static_cast<int>(g_.nodes.size());
    g_.nodes.push_back(node);
    std::vector<Slot> ops;
    ops.reserve(node->operands.size());
    auto& enc = g_.encoding;
    enc.push_back(node->local_hash);
    enc.push_back(node->operands.size());
    for (const Value& v : node->operands) {
      ops.push_back({entry_of_.at(v.node.get()), v.index});
      enc.push_back((static_cast<std::uint64_t>(ops.back().entry) << 16) |
                    static_cast<std::uint64_t>(v.index));
    }
    g_.operands.push_back(std::move(ops));
    g_.control.push_back(node->control ? entry_of_.at(node->control.get()) : -1);
    enc.push_back(static_cast<std::uint64_t>(static_cast<std::int64_t>(g_.control.back())));
    if (has_payload(node->op)) {
      g_.param_of.push_back(static_cast<int>(g_.params.size()));
      g_.params.push_back(node);
    } else {
      g_.param_of.push_back(-1);
    }
    return id;
  }

  Graph& g_;
  std::unordered_map<const Node*, int> entry_of_;
  std::map<DataKey, int> data_;
};

}  // namespace

Graph canonicalize(const std::vector<Value>& roots) {
  Graph g;
  Canonicalizer c(g);
  for (const Value& v : roots) g.roots.push_back({c.visit(v.node.get()), v.index});
  g.encoding.push_back(0xFFFFFFFFFFFFFFFFULL);
  for (const Slot& s : g.roots) {
    g.encoding.push_back((static_cast<std::uint64_t>(s.entry) << 16) |
                         static_cast<std::uint64_t>(s.index));
  }
  std::uint64_t h = 0x67726170ULL;
  for (std::uint64_t w : g.encoding) h = hash_combine(h, w);
  g.hash = h;
  return g;
}

}  // namespace c10d::inline v1::lazy
