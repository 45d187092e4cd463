#include "trace/trace_analysis.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <tuple>

#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::inline v1::tools {

namespace {

using backends::trace::DumpEntry;
using backends::trace::RankDump;

// "rank 2", "ranks 0,1".
std::string ranks_text(const std::vector<int>& ranks) {
  return fmt::format("{} {}", ranks.size() == 1 ? "rank" : "ranks", fmt::join(ranks, ","));
}

std::string dtype_of(const DumpEntry& e) {
  return e.input_dtypes.empty() ? std::string("-")
                                : backends::trace::dtype_from_torch(e.input_dtypes[0]);
}

// What an entry called: op, element count, dtype.
using Signature = std::tuple<std::string, std::int64_t, std::string>;
Signature signature(const DumpEntry& e) { return {e.op, e.numel(), dtype_of(e)}; }

std::string op_text(const DumpEntry& e) { return fmt::format("{} #{}", e.op, e.sequence()); }

// One rank's collectives of one group.
struct RankOps {
  std::map<std::int64_t, const DumpEntry*> by_seq;
  const DumpEntry* last = nullptr;  // its last op of the group, collective or not
};

struct GroupView {
  std::string desc;
  std::vector<int> members;      // global ranks
  std::map<int, RankOps> ranks;  // by global rank: those that left a dump
};

std::map<std::string, GroupView> group_views(const std::vector<RankDump>& dumps) {
  std::map<std::string, GroupView> groups;
  for (const auto& d : dumps) {
    for (const auto& [name, g] : d.groups) {
      auto& v = groups[name];
      v.desc = g.desc.empty() ? name : g.desc;
      if (v.members.empty()) v.members = g.ranks;
      v.ranks[d.rank];  // a member with a dump, even of no op
    }
    for (const auto& e : d.entries) {
      auto& ops = groups[e.pg_name].ranks[d.rank];
      if (ops.last == nullptr || e.record_id > ops.last->record_id) ops.last = &e;
      if (!e.is_p2p) ops.by_seq[e.collective_seq_id] = &e;
    }
  }
  return groups;
}

// The report on the first collective of `g` not every member completed; nullopt: none.
// "rank 2<where> left no dump: <why>" for each member of `g` without a dump (those with no why
// together); whether there were any.
bool no_dump_lines(const GroupView& g, std::string_view where,
                   const std::map<int, std::string>& no_dump_because,
                   std::vector<std::string>& out) {
  std::vector<int> unexplained;
  bool any = false;
  for (int r : g.members) {
    if (g.ranks.contains(r)) continue;
    any = true;
    const auto why = no_dump_because.find(r);
    if (why == no_dump_because.end()) {
      unexplained.push_back(r);
    } else {
      out.push_back(fmt::format("rank {}{} left no dump: {}", r, where, why->second));
    }
  }
  if (!unexplained.empty()) {
    out.push_back(fmt::format("{}{} left no dump", ranks_text(unexplained), where));
  }
  return any;
}

// `no_dump_because`: analyze()'s; members without a dump are said with it there.
std::optional<std::vector<std::string>> first_problem(
    const GroupView& g, const std::map<int, std::string>& no_dump_because) {
  std::set<std::int64_t> seqs;
  for (const auto& [rank, ops] : g.ranks) {
    for (const auto& [seq, e] : ops.by_seq) seqs.insert(seq);
  }
  for (const std::int64_t s : seqs) {
    std::map<int, const DumpEntry*> entered;
    std::vector<int> absent;
    bool all_done = true;
    for (const auto& [rank, ops] : g.ranks) {
      const auto it = ops.by_seq.find(s);
      if (it != ops.by_seq.end()) {
        entered[rank] = it->second;
        all_done = all_done && it->second->state == "completed";
      } else if (ops.by_seq.empty() || s > ops.by_seq.begin()->first) {
        absent.push_back(rank);  // past its last collective, or a gap in what it kept
      }                          // else older than its ring reaches back
    }
    // The signature most ranks entered with (ties: the lowest rank's).
    std::map<Signature, std::vector<int>> by_sig;
    for (const auto& [rank, e] : entered) by_sig[signature(*e)].push_back(rank);
    if (all_done && absent.empty() && by_sig.size() <= 1) continue;

    const Signature* major = nullptr;
    const std::vector<int>* major_ranks = nullptr;
    for (const auto& [sig, ranks] : by_sig) {
      if (major == nullptr || ranks.size() > major_ranks->size() ||
          (ranks.size() == major_ranks->size() && ranks.front() < major_ranks->front())) {
        major = &sig;
        major_ranks = &ranks;
      }
    }
    std::vector<std::string> out;
    const std::string& op = major != nullptr ? std::get<0>(*major) : std::string("collective");
    const std::string what = fmt::format("{} #{} of group {}", op, s, g.desc);
    out.push_back(fmt::format("first collective not completed by every rank: {}", what));
    // Ranks that called another op, or none, at s.
    for (const auto& [sig, ranks] : by_sig) {
      if (&sig == major || std::get<0>(sig) == op) continue;
      for (int r : ranks) absent.push_back(r);
    }
    std::sort(absent.begin(), absent.end());
    for (int r : absent) {
      const auto* last = g.ranks.at(r).last;
      out.push_back(
          last == nullptr
              ? fmt::format("rank {} never called {}; it recorded no op of the group", r, what)
              : fmt::format("rank {} never called {}; its last op was {} ({})", r, what,
                            op_text(*last), last->state));
    }
    // Ranks that called the op with other sizes or dtypes.
    for (const auto& [sig, ranks] : by_sig) {
      if (&sig == major || std::get<0>(sig) != op) continue;
      const auto& [mop, mcount, mdtype] = *major;
      const auto& [o, count, dtype] = sig;
      std::string differs;
      if (count != mcount) differs = std::to_string(count);
      if (dtype != mdtype) differs += (differs.empty() ? "" : " ") + dtype;
      out.push_back(fmt::format("{} called {} with {} {}; {} with {}", ranks_text(*major_ranks),
                                what, mcount, mdtype, ranks_text(ranks), differs));
    }
    // Members that left no dump: what they did is unknown.
    no_dump_lines(g, "", no_dump_because, out);
    // How far the ranks that entered it got.
    std::map<std::string, std::vector<int>> by_state;
    for (const auto& [rank, e] : entered) {
      if (e->op == op) by_state[e->state].push_back(rank);
    }
    for (const auto& [state, ranks] : by_state) {
      if (state == "failed") continue;
      out.push_back(fmt::format("{} called it: {}", ranks_text(ranks),
                                state == "completed" ? "completed" : state + ", not completed"));
    }
    for (const auto& [rank, e] : entered) {
      if (e->op == op && e->state == "failed") {
        out.push_back(fmt::format("rank {} failed in it: {}", rank,
                                  e->error.empty() ? "(no error recorded)" : e->error));
      }
    }
    return out;
  }
  return std::nullopt;
}

}  // namespace

Verdict analyze(const std::vector<RankDump>& dumps,
                const std::map<int, std::string>& no_dump_because) {
  Verdict v;
  if (dumps.empty()) {
    v.problem = true;
    v.lines.push_back("no dumps to analyze");
    for (const auto& [rank, why] : no_dump_because) {
      v.lines.push_back(fmt::format("rank {} left no dump: {}", rank, why));
    }
    return v;
  }
  std::size_t collectives = 0;
  const auto groups = group_views(dumps);
  for (const auto& [name, g] : groups) {
    for (const auto& [rank, ops] : g.ranks) collectives = std::max(collectives, ops.by_seq.size());
    if (auto problem = first_problem(g, no_dump_because)) {
      v.problem = true;
      v.lines.insert(v.lines.end(), problem->begin(), problem->end());
    } else if (no_dump_lines(g, fmt::format(" of group {}", g.desc), no_dump_because, v.lines)) {
      v.problem = true;
    }
  }
  if (!v.problem) {
    v.lines.push_back(fmt::format(
        "no problem found: every rank completed every collective in its dump ({} ranks, {} "
        "groups, up to {} collectives a group)",
        dumps.size(), groups.size(), collectives));
  }
  return v;
}

std::vector<RankDump> read_dumps(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> paths;
  for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
    if (f.is_regular_file() && f.path().extension() == ".json") paths.push_back(f.path());
  }
  C10D_CHECK(!ec, "cannot list the trace directory {}: {}", dir, ec.message());
  std::sort(paths.begin(), paths.end());
  std::vector<RankDump> dumps;
  std::set<int> seen;
  for (const auto& p : paths) {
    dumps.push_back(backends::trace::read_dump(p));
    C10D_CHECK(seen.insert(dumps.back().rank).second, "{}: a second dump of rank {} in {}", p,
               dumps.back().rank, dir);
  }
  return dumps;
}

}  // namespace c10d::inline v1::tools
