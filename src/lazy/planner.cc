// The planner: canonical graph -> Program.
//
//  1. Common subexpressions: entries with the same op, attributes, types and (merged) operands
//     become one. Leaves with payloads (random streams, collectives) never merge; input-data
//     leaves were merged by canonicalize() when they read the same bytes.
//  2. Dead code: only what the roots reach (after merging) is kept.
//  3. Fusion: in topological order, an elementwise entry joins the groups of its operands that
//     have its shape, merging them, unless that would make a cycle (a group reading, through
//     other steps, a value it computes itself); a sum/mean/max closes the group of its operand
//     as its reduction. Constants become immediates of the groups that read them.
//  4. Schedule: groups and the remaining node steps in a topological order.
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <queue>

#include "core/check.h"
#include "core/shape.h"
#include "lazy/kernels_f32.h"
#include "lazy/program.h"

namespace c10d::inline v1::lazy {
namespace {

struct Group {
  Shape shape;
  std::vector<int> members;  // elementwise entries (or one constant to write), topo order
  int reduce = -1;
  bool alive = true;
};

class Planner {
 public:
  Planner(const Graph& g, Program& p) : g_(g), p_(p) {}

  void run() {
    copy_entries();
    merge_common();
    mark_live();
    fuse();
    layout_slots();
    home_collective_operands();
    schedule();
  }

 private:
  ProgramEntry& E(int e) { return p_.entries[static_cast<std::size_t>(e)]; }
  const Shape& shape_of(const Slot& s) {
    return E(s.entry).outputs[static_cast<std::size_t>(s.index)].shape;
  }

  void copy_entries() {
    const std::size_t n = g_.nodes.size();
    p_.entries.resize(n);
    for (std::size_t i = 0; i < n; ++i) {
      const Node* node = g_.nodes[i];
      ProgramEntry& e = p_.entries[i];
      e.op = node->op;
      e.outputs = node->outputs;
      e.ints = node->ints;
      e.reals = node->reals;
      e.operands = g_.operands[i];
      e.control = g_.control[i];
      e.param = g_.param_of[i];
    }
    p_.encoding = g_.encoding;
  }

  void merge_common() {
    const int n = static_cast<int>(p_.entries.size());
    rep_.resize(static_cast<std::size_t>(n));
    std::map<std::vector<std::uint64_t>, int> seen;
    for (int e = 0; e < n; ++e) {
      rep_[static_cast<std::size_t>(e)] = e;
      ProgramEntry& x = E(e);
      for (Slot& s : x.operands) s.entry = rep_[static_cast<std::size_t>(s.entry)];
      if (x.control >= 0) x.control = rep_[static_cast<std::size_t>(x.control)];
      if (x.param >= 0) continue;
      std::vector<std::uint64_t> key{g_.nodes[static_cast<std::size_t>(e)]->local_hash,
                                     static_cast<std::uint64_t>(x.op)};
      for (const Slot& s : x.operands) {
        key.push_back(static_cast<std::uint64_t>(s.entry));
        key.push_back(static_cast<std::uint64_t>(s.index));
      }
      key.push_back(static_cast<std::uint64_t>(static_cast<std::int64_t>(x.control)));
      auto [it, inserted] = seen.emplace(std::move(key), e);
      if (!inserted) {
        const ProgramEntry& y = E(it->second);
        const bool same =
            y.ints == x.ints && y.reals == x.reals && y.outputs.size() == x.outputs.size();
        if (same) {
          rep_[static_cast<std::size_t>(e)] = it->second;
          ++p_.cse_merged;
        }
      }
    }
    for (const Slot& r : g_.roots)
      roots_.push_back({rep_[static_cast<std::size_t>(r.entry)], r.index});
  }

  void mark_live() {
    const std::size_t n = p_.entries.size();
    live_.assign(n, false);
    users_.assign(n, {});
    is_root_.assign(n, false);
    for (const Slot& r : roots_) {
      live_[static_cast<std::size_t>(r.entry)] = true;
      is_root_[static_cast<std::size_t>(r.entry)] = true;
    }
    for (std::size_t e = n; e-- > 0;) {
      if (!live_[e]) continue;
      for (const Slot& s : E(static_cast<int>(e)).operands)
        live_[static_cast<std::size_t>(s.entry)] = true;
      if (E(static_cast<int>(e)).control >= 0)
        live_[static_cast<std::size_t>(E(static_cast<int>(e)).control)] = true;
    }
    for (std::size_t e = 0; e < n; ++e) {
      if (!live_[e]) continue;
      for (const Slot& s : E(static_cast<int>(e)).operands)
        users_[static_cast<std::size_t>(s.entry)].push_back(static_cast<int>(e));
      if (E(static_cast<int>(e)).control >= 0)
        users_[static_cast<std::size_t>(E(static_cast<int>(e)).control)].push_back(
            static_cast<int>(e));
    }
  }

  // True when making one group of `members` would need, before the group runs, a value that
  // depends on one of them.
  bool creates_cycle(const std::vector<int>& members) {
    ++stamp_;
    int lo = members.front();
    for (int m : members) {
      mark_[static_cast<std::size_t>(m)] = stamp_;
      lo = std::min(lo, m);
    }
    std::vector<int> stack;
    auto push_inputs = [&](int x) {
      for (const Slot& s : E(x).operands) stack.push_back(s.entry);
      if (E(x).control >= 0) stack.push_back(E(x).control);
    };
    for (int m : members) {
      for (const Slot& s : E(m).operands) {
        if (mark_[static_cast<std::size_t>(s.entry)] != stamp_) push_inputs(s.entry);
      }
    }
    ++stamp_;
    const int in_group = stamp_ - 1;
    while (!stack.empty()) {
      const int x = stack.back();
      stack.pop_back();
      const int& mx = mark_[static_cast<std::size_t>(x)];
      if (mx == in_group) return true;
      if (x < lo || mx == stamp_) continue;
      mark_[static_cast<std::size_t>(x)] = stamp_;
      push_inputs(x);
    }
    return false;
  }

  void fuse() {
    const int n = static_cast<int>(p_.entries.size());
    group_of_.assign(static_cast<std::size_t>(n), -1);
    mark_.assign(static_cast<std::size_t>(n), 0);
    for (int e = 0; e < n; ++e) {
      if (!live_[static_cast<std::size_t>(e)]) continue;
      const ProgramEntry& x = E(e);
      if (is_elementwise(x.op)) {
        std::vector<int> cands;
        for (const Slot& s : x.operands) {
          const int g = group_of_[static_cast<std::size_t>(s.entry)];
          if (g < 0 || groups_[static_cast<std::size_t>(g)].reduce >= 0 ||
              groups_[static_cast<std::size_t>(g)].shape != x.outputs[0].shape ||
              std::find(cands.begin(), cands.end(), g) != cands.end()) {
            continue;
          }
          cands.push_back(g);
        }
        join(e, cands);
      } else if (is_reduction(x.op)) {
        const int o = x.operands[0].entry;
        const int g = group_of_[static_cast<std::size_t>(o)];
        if (g >= 0 && groups_[static_cast<std::size_t>(g)].reduce < 0 &&
            groups_[static_cast<std::size_t>(g)].shape == shape_of(x.operands[0])) {
          groups_[static_cast<std::size_t>(g)].reduce = e;
          group_of_[static_cast<std::size_t>(e)] = g;
        } else {
          groups_.push_back({shape_of(x.operands[0]), {}, e, true});
          group_of_[static_cast<std::size_t>(e)] = static_cast<int>(groups_.size()) - 1;
        }
      }
    }
    // Constants that something reads from memory get a kernel that writes them.
    for (int e = 0; e < n; ++e) {
      if (!live_[static_cast<std::size_t>(e)] || E(e).op != OpKind::kConstant) continue;
      bool needs = is_root_[static_cast<std::size_t>(e)];
      for (int u : users_[static_cast<std::size_t>(e)]) {
        const int g = group_of_[static_cast<std::size_t>(u)];
        if (g < 0) needs = true;
      }
      if (needs) {
        groups_.push_back({E(e).outputs[0].shape, {e}, -1, true});
        group_of_[static_cast<std::size_t>(e)] = static_cast<int>(groups_.size()) - 1;
      }
    }
  }

  void join(int e, std::vector<int> cands) {
    auto members_with = [&](const std::vector<int>& gs) {
      std::vector<int> m;
      for (int g : gs) {
        const auto& gm = groups_[static_cast<std::size_t>(g)].members;
        m.insert(m.end(), gm.begin(), gm.end());
      }
      m.push_back(e);
      return m;
    };
    std::vector<int> chosen;
    if (!cands.empty() && !creates_cycle(members_with(cands))) {
      chosen = cands;
    } else {
      std::sort(cands.rbegin(), cands.rend());
      for (int g : cands) {
        if (!creates_cycle(members_with({g}))) {
          chosen = {g};
          break;
        }
      }
    }
    if (chosen.empty()) {
      groups_.push_back({E(e).outputs[0].shape, {e}, -1, true});
      group_of_[static_cast<std::size_t>(e)] = static_cast<int>(groups_.size()) - 1;
      return;
    }
    const int into = *std::min_element(chosen.begin(), chosen.end());
    Group& target = groups_[static_cast<std::size_t>(into)];
    for (int g : chosen) {
      if (g == into) continue;
      Group& other = groups_[static_cast<std::size_t>(g)];
      for (int m : other.members) {
        target.members.push_back(m);
        group_of_[static_cast<std::size_t>(m)] = into;
      }
      other.members.clear();
      other.alive = false;
    }
    target.members.push_back(e);
    std::sort(target.members.begin(), target.members.end());
    group_of_[static_cast<std::size_t>(e)] = into;
  }

  void layout_slots() {
    p_.slot_base.resize(p_.entries.size());
    int next = 0;
    for (std::size_t e = 0; e < p_.entries.size(); ++e) {
      p_.slot_base[e] = next;
      for (const ValueType& t : p_.entries[e].outputs) {
        p_.slot_bytes.push_back(static_cast<std::size_t>(t.numel()) * element_size(t.dtype));
        ++next;
      }
    }
    p_.num_slots = next;
    for (const Slot& r : roots_) p_.root_slots.push_back(p_.slot(r));
  }

  // A matmul read only by an all_reduce node (and not a root) computes straight into the
  // node's flat buffer (Program::home).
  void home_collective_operands() {
    p_.home.assign(static_cast<std::size_t>(p_.num_slots), Slot{-1, 0});
    for (std::size_t e = 0; e < p_.entries.size(); ++e) {
      if (!live_[e] || p_.entries[e].op != OpKind::kAllReduce) continue;
      const auto& operands = p_.entries[e].operands;
      for (std::size_t k = 0; k < operands.size(); ++k) {
        const auto src = static_cast<std::size_t>(operands[k].entry);
        if (p_.entries[src].op != OpKind::kMatmul || is_root_[src] || users_[src].size() != 1)
          continue;
        p_.home[static_cast<std::size_t>(p_.slot(operands[k]))] = {static_cast<int>(e),
                                                                   static_cast<int>(k)};
      }
    }
  }

  FusedKernel build_kernel(const Group& grp, int gid);
  void schedule();

  const Graph& g_;
  Program& p_;
  std::vector<int> rep_;
  std::vector<Slot> roots_;
  std::vector<bool> live_;
  std::vector<bool> is_root_;
  std::vector<std::vector<int>> users_;
  std::vector<Group> groups_;
  std::vector<int> group_of_;
  std::vector<int> mark_;
  int stamp_ = 0;
};

// The input's strides over the iteration space's dims (0 where it broadcasts), with size-1
// dims dropped and adjacent dims merged where the input walks them contiguously.
void broadcast_layout(const Shape& space, const Shape& in, TileInput& t) {
  const std::size_t r = space.size(), ri = in.size();
  std::vector<std::int64_t> strides(r, 0);
  std::int64_t acc = 1;
  for (std::size_t d = r; d-- > 0;) {
    if (d + ri < r) break;
    const std::int64_t di = in[d + ri - r];
    if (di != 1) strides[d] = acc;
    acc *= di;
  }
  for (std::size_t d = 0; d < r; ++d) {
    if (space[d] == 1) continue;
    if (!t.dims.empty()) {
      const std::int64_t last = t.strides.back();
      if ((last == 0 && strides[d] == 0) || (strides[d] != 0 && last == strides[d] * space[d])) {
        t.dims.back() *= space[d];
        t.strides.back() = strides[d];
        continue;
      }
    }
    t.dims.push_back(space[d]);
    t.strides.push_back(strides[d]);
  }
  if (t.dims.empty()) {
    t.dims = {1};
    t.strides = {0};
  }
}

FusedKernel Planner::build_kernel(const Group& grp, int gid) {
  FusedKernel k;
  const auto count = core::shape_bytes(grp.shape, 1);  // of nodes make_node checked
  C10D_CHECK(count, "fused kernel {}: shape [{}] has no element count", gid,
             fmt::join(grp.shape, ", "));
  const std::int64_t numel = *count;
  k.numel = numel;
  std::map<std::pair<int, int>, int> reg_of;  // (entry, index) -> register
  std::map<std::pair<int, int>, int> input_of;
  auto input = [&](const Slot& s) -> int {
    const auto key = std::make_pair(s.entry, s.index);
    if (auto it = input_of.find(key); it != input_of.end()) return it->second;
    const ProgramEntry& src = E(s.entry);
    const ValueType& t = src.outputs[static_cast<std::size_t>(s.index)];
    TileInput in;
    in.dtype = t.dtype;
    if (src.op == OpKind::kConstant) {
      in.kind = TileInput::Kind::kImmediate;
      in.value = src.reals[0];
    } else if (t.numel() == numel) {
      in.kind = TileInput::Kind::kDirect;
      in.slot = p_.slot(s);
    } else if (t.numel() == 1) {
      in.kind = TileInput::Kind::kSplat;
      in.slot = p_.slot(s);
    } else {
      in.kind = TileInput::Kind::kBroadcast;
      in.slot = p_.slot(s);
      broadcast_layout(grp.shape, t.shape, in);
    }
    k.inputs.push_back(std::move(in));
    const int reg = static_cast<int>(k.inputs.size()) - 1;
    input_of[key] = reg;
    return reg;
  };
  auto operand_reg = [&](const Slot& s) {
    if (group_of_[static_cast<std::size_t>(s.entry)] == gid && E(s.entry).op != OpKind::kConstant &&
        !is_reduction(E(s.entry).op)) {
      return reg_of.at({s.entry, s.index});
    }
    return input(s);
  };
  // Registers of inputs come first, so collect every input before numbering instructions.
  for (int m : grp.members) {
    if (E(m).op == OpKind::kConstant) {
      input({m, 0});
      continue;
    }
    for (const Slot& s : E(m).operands) {
      if (group_of_[static_cast<std::size_t>(s.entry)] != gid || E(s.entry).op == OpKind::kConstant)
        input(s);
    }
  }
  if (grp.reduce >= 0) {
    const Slot& s = E(grp.reduce).operands[0];
    if (group_of_[static_cast<std::size_t>(s.entry)] != gid) input(s);
  }
  const int n_in = static_cast<int>(k.inputs.size());
  for (int m : grp.members) {
    const ProgramEntry& x = E(m);
    TileInstr ins;
    ins.dtype = x.outputs[0].dtype;
    if (x.op == OpKind::kConstant) {
      ins.op = OpKind::kIdentity;
      ins.in_dtype = ins.dtype;
      ins.a = input_of.at({m, 0});
    } else {
      ins.op = x.op;
      ins.a = operand_reg(x.operands[0]);
      if (x.operands.size() > 1) ins.b = operand_reg(x.operands[1]);
      if (x.operands.size() > 2) ins.c = operand_reg(x.operands[2]);
      const Slot& typed = x.op == OpKind::kWhere ? x.operands[1] : x.operands[0];
      ins.in_dtype = E(typed.entry).outputs[static_cast<std::size_t>(typed.index)].dtype;
      if (x.op == OpKind::kPow) ins.real = x.reals[0];
      const bool binary = x.op >= OpKind::kAdd && x.op <= OpKind::kMinimum;
      auto imm = [&](int reg) {
        return reg < n_in &&
               k.inputs[static_cast<std::size_t>(reg)].kind == TileInput::Kind::kImmediate;
      };
      if (binary && imm(ins.b)) {
        ins.b_imm = true;
        ins.imm = k.inputs[static_cast<std::size_t>(ins.b)].value;
      } else if (binary && imm(ins.a)) {
        ins.a_imm = true;
        ins.imm = k.inputs[static_cast<std::size_t>(ins.a)].value;
      }
    }
    k.instrs.push_back(ins);
    const int reg = n_in + static_cast<int>(k.instrs.size()) - 1;
    reg_of[{m, 0}] = reg;
    bool stored = is_root_[static_cast<std::size_t>(m)];
    for (int u : users_[static_cast<std::size_t>(m)]) {
      if (group_of_[static_cast<std::size_t>(u)] != gid ||
          (u != grp.reduce && !is_elementwise(E(u).op)))
        stored = true;
    }
    if (stored) k.stores.push_back({reg, p_.slot({m, 0})});
  }
  k.n_ops = static_cast<int>(grp.members.size());
  if (grp.reduce >= 0) {
    const ProgramEntry& r = E(grp.reduce);
    k.reduce = r.op;
    k.reduce_reg = operand_reg(r.operands[0]);
    k.reduce_slot = p_.slot({grp.reduce, 0});
    k.reduce_dtype = r.outputs[0].dtype;
    const Shape& s = grp.shape;
    const auto first = static_cast<std::size_t>(r.ints.front());
    const auto last = static_cast<std::size_t>(r.ints.back());
    for (std::size_t d = 0; d < s.size(); ++d) {
      if (d < first) {
        k.A *= s[d];
      } else if (d > last) {
        k.B *= s[d];
      } else {
        k.R *= s[d];
      }
    }
    ++k.n_ops;
  }
  k.f32 = std::make_shared<const F32Plan>(plan_f32(k));
  return k;
}

void Planner::schedule() {
  const int n = static_cast<int>(p_.entries.size());
  // Units: live groups, then node steps. unit_of[e] = -1 for entries that need no step.
  std::vector<int> unit_of(static_cast<std::size_t>(n), -1);
  std::vector<int> unit_group;  // group id, or -1 - entry for a node step
  for (std::size_t g = 0; g < groups_.size(); ++g) {
    if (!groups_[g].alive) continue;
    const int u = static_cast<int>(unit_group.size());
    unit_group.push_back(static_cast<int>(g));
    for (int m : groups_[g].members) unit_of[static_cast<std::size_t>(m)] = u;
    if (groups_[g].reduce >= 0) unit_of[static_cast<std::size_t>(groups_[g].reduce)] = u;
  }
  for (int e = 0; e < n; ++e) {
    const OpKind op = E(e).op;
    if (!live_[static_cast<std::size_t>(e)] || unit_of[static_cast<std::size_t>(e)] >= 0 ||
        op == OpKind::kData || op == OpKind::kConstant) {
      continue;
    }
    unit_of[static_cast<std::size_t>(e)] = static_cast<int>(unit_group.size());
    unit_group.push_back(-1 - e);
  }
  const std::size_t units = unit_group.size();
  std::vector<std::vector<int>> after(units);
  std::vector<int> waiting(units, 0);
  std::vector<int> order_key(units, n);
  for (int e = 0; e < n; ++e) {
    const int u = unit_of[static_cast<std::size_t>(e)];
    if (u < 0) continue;
    order_key[static_cast<std::size_t>(u)] = std::min(order_key[static_cast<std::size_t>(u)], e);
    std::vector<int> deps;
    for (const Slot& s : E(e).operands) deps.push_back(s.entry);
    if (E(e).control >= 0) deps.push_back(E(e).control);
    for (int d : deps) {
      const int du = unit_of[static_cast<std::size_t>(d)];
      if (du < 0 || du == u) continue;
      after[static_cast<std::size_t>(du)].push_back(u);
      ++waiting[static_cast<std::size_t>(u)];
    }
  }
  using Item = std::pair<int, int>;  // (order key, unit)
  std::priority_queue<Item, std::vector<Item>, std::greater<>> ready;
  for (std::size_t u = 0; u < units; ++u) {
    if (waiting[u] == 0) ready.push({order_key[u], static_cast<int>(u)});
  }
  while (!ready.empty()) {
    const int u = ready.top().second;
    ready.pop();
    const int tag = unit_group[static_cast<std::size_t>(u)];
    Step step;
    if (tag >= 0) {
      step.fused = true;
      step.kernel = build_kernel(groups_[static_cast<std::size_t>(tag)], tag);
      p_.ops += step.kernel.n_ops;
      ++p_.kernels;
      if (step.kernel.n_ops >= 2) ++p_.fused_kernels;
    } else {
      step.entry = -1 - tag;
      ++p_.ops;
      const OpKind op = E(step.entry).op;
      if (op != OpKind::kReshape && op != OpKind::kSliceRows) ++p_.kernels;
    }
    p_.steps.push_back(std::move(step));
    for (int v : after[static_cast<std::size_t>(u)]) {
      if (--waiting[static_cast<std::size_t>(v)] == 0)
        ready.push({order_key[static_cast<std::size_t>(v)], v});
    }
  }
  C10D_CHECK(p_.steps.size() == units,
             "lazy planner: the step graph has a cycle ({} of {} scheduled)", p_.steps.size(),
             units);
}

}  // namespace

std::unique_ptr<Program> plan(const Graph& graph) {
  auto program = std::make_unique<Program>();
  Planner(graph, *program).run();
  return program;
}

}  // namespace c10d::inline v1::lazy
