// dump_graph: a pending graph as text in the style of torch.jit graphs. Input data leaves are
// the graph's parameters (%0, %1, ...), numbered first; every other node follows in post-order.
#include <fmt/format.h>

#include <map>

#include "lazy/graph.h"
#include "lazy/ops_common.h"

namespace c10d::inline v1::lazy {
namespace {

std::string attrs(const Node& n) {
  std::vector<std::string> a;
  switch (n.op) {
    case OpKind::kConstant:
      a.push_back(fmt::format("value={}", n.reals[0]));
      break;
    case OpKind::kArange:
      a.push_back(fmt::format("start={}, step={}", n.reals[0], n.reals[1]));
      break;
    case OpKind::kUniform:
      a.push_back(fmt::format("low={}, high={}", n.reals[0], n.reals[1]));
      break;
    case OpKind::kNormal:
      a.push_back(fmt::format("mean={}, stddev={}", n.reals[0], n.reals[1]));
      break;
    case OpKind::kPow:
      a.push_back(fmt::format("exponent={}", n.reals[0]));
      break;
    case OpKind::kSum:
    case OpKind::kMean:
    case OpKind::kMax:
      a.push_back(fmt::format("axes=[{}]", fmt::join(n.ints, ", ")));
      break;
    case OpKind::kArgmax:
    case OpKind::kConcat:
      a.push_back(fmt::format("axis={}", n.ints[0]));
      break;
    case OpKind::kTranspose:
      a.push_back(fmt::format("dim0={}, dim1={}", n.ints[0], n.ints[1]));
      break;
    case OpKind::kSliceRows:
      a.push_back(fmt::format("begin={}, end={}", n.ints[0], n.ints[1]));
      break;
    case OpKind::kMatmul:
      if (!n.ints.empty()) {
        a.push_back(fmt::format("transpose_a={}, transpose_b={}", n.ints[0], n.ints[1]));
      }
      break;
    case OpKind::kOneHot:
      a.push_back(fmt::format("classes={}", n.ints[0]));
      break;
    case OpKind::kAllReduce:
      a.push_back(fmt::format("op={}, scale={}", reduce_op_name(static_cast<ReduceOp>(n.ints[0])),
                              n.reals[0]));
      break;
    default:
      break;
  }
  return a.empty() ? std::string() : fmt::format("[{}]", fmt::join(a, ", "));
}

}  // namespace

std::string dump_graph(const std::vector<Tensor>& outputs) {
  std::vector<Value> roots;
  for (const Tensor& t : outputs) roots.push_back(value_of(t));
  const Graph g = canonicalize(roots);
  std::map<std::pair<int, int>, int> name;  // (entry, output) -> %n
  int next = 0;
  std::vector<std::string> params;
  for (std::size_t e = 0; e < g.nodes.size(); ++e) {
    if (g.nodes[e]->op != OpKind::kData) continue;
    name[{static_cast<int>(e), 0}] = next;
    params.push_back(fmt::format("%{} : {}", next++, type_str(g.nodes[e]->outputs[0])));
  }
  std::string body;
  for (std::size_t e = 0; e < g.nodes.size(); ++e) {
    const Node& n = *g.nodes[e];
    if (n.op == OpKind::kData) continue;
    std::vector<std::string> outs, types, ins;
    for (std::size_t i = 0; i < n.outputs.size(); ++i) {
      name[{static_cast<int>(e), static_cast<int>(i)}] = next;
      outs.push_back(fmt::format("%{}", next++));
      types.push_back(type_str(n.outputs[i]));
    }
    for (const Slot& s : g.operands[e])
      ins.push_back(fmt::format("%{}", name.at({s.entry, s.index})));
    body += fmt::format("  {} = {}{}({}) : {}\n", fmt::join(outs, ", "), op_name(n.op), attrs(n),
                        fmt::join(ins, ", "), fmt::join(types, ", "));
  }
  std::vector<std::string> rets;
  for (const Slot& s : g.roots) rets.push_back(fmt::format("%{}", name.at({s.entry, s.index})));
  return fmt::format("graph({}) {{\n{}  return ({})\n}}\n", fmt::join(params, ", "), body,
                     fmt::join(rets, ", "));
}

}  // namespace c10d::inline v1::lazy
