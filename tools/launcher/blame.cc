#include "launcher/blame.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <fstream>
#include <map>
#include <set>

namespace c10d::inline v1::launcher {
namespace {

bool stopped(char state) { return state == 'T' || state == 't'; }

}  // namespace

char process_state(pid_t pid) {
  std::ifstream in(fmt::format("/proc/{}/stat", pid));
  std::string text;
  std::getline(in, text);
  // "pid (comm) S ...": the command may hold spaces and parentheses, so look after the last ')'.
  const auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return '?';
  return text[close + 2];
}

Cause find_cause(const std::vector<ProcessView>& processes, int failed_rank,
                 const std::vector<transport::StallRecord>& records) {
  // Who the records name, and the ranks that timed out naming each.
  std::map<int, std::set<int>> named;
  for (const auto& r : records) {
    if (r.suspect >= 0 && r.suspect != r.rank) named[r.suspect].insert(r.rank);
  }
  const auto votes = [&](int rank) {
    const auto it = named.find(rank);
    return it == named.end() ? std::size_t{0} : it->second.size();
  };
  const auto waiting = [&](int rank) {
    const auto it = named.find(rank);
    if (it == named.end()) return std::string();
    const auto& ranks = it->second;
    return fmt::format("; rank{} {} timed out waiting for it", ranks.size() == 1 ? "" : "s",
                       fmt::join(ranks, ", "));
  };

  const ProcessView* chosen = nullptr;
  for (const auto& p : processes) {
    if (!p.running || !stopped(p.state)) continue;
    if (chosen == nullptr || votes(p.rank) > votes(chosen->rank)) chosen = &p;
  }
  Cause cause;
  if (chosen != nullptr) {
    cause.rank = chosen->rank;
    cause.pid = chosen->pid;
    cause.evidence = fmt::format("it was stopped (state {}) and made no progress{}", chosen->state,
                                 waiting(chosen->rank));
  } else if (!named.empty()) {
    int best = -1;
    for (const auto& [rank, ranks] : named) {
      if (best < 0 || ranks.size() > votes(best)) best = rank;
    }
    cause.rank = best;
    for (const auto& p : processes) {
      if (p.rank == best) cause.pid = p.pid;
    }
    std::string doing;
    for (const auto& r : records) {
      if (r.suspect == best && doing.empty()) {
        doing = fmt::format(" (rank {} in {})", r.rank, r.doing);
      }
    }
    // Not one of this launcher's processes: stopped, or cut off from here, look alike.
    cause.evidence = fmt::format("it made no progress{}{}{}",
                                 cause.pid > 0 ? "" : " or is unreachable", waiting(best), doing);
  }
  if (cause.rank == failed_rank) return {};
  return cause;
}

}  // namespace c10d::inline v1::launcher
