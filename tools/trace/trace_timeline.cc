#include "trace/trace_timeline.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <utility>

namespace c10d::inline v1::tools {

namespace {

using backends::trace::DumpEntry;
using backends::trace::RankDump;
using nlohmann::json;

json metadata(const char* what, int pid, int tid, const std::string& name) {
  json m = {{"name", what}, {"ph", "M"}, {"pid", pid}, {"args", {{"name", name}}}};
  if (tid >= 0) m["tid"] = tid;
  return m;
}

json args_of(const DumpEntry& e) {
  json a = {{"group", e.pg_desc.empty() ? e.pg_name : e.pg_desc},
            {"seq", e.sequence()},
            {"state", e.state},
            {"input_sizes", e.input_sizes},
            {"input_dtypes", e.input_dtypes},
            {"record_id", e.record_id}};
  if (e.is_p2p || e.root >= 0) a[e.is_p2p ? "peer" : "root"] = e.root;
  if (!e.error.empty()) a["error"] = e.error;
  return a;
}

}  // namespace

std::string timeline_json(const std::vector<RankDump>& dumps) {
  std::int64_t t0 = std::numeric_limits<std::int64_t>::max();
  std::int64_t last = 0;
  for (const RankDump& d : dumps) {
    for (const DumpEntry& e : d.entries) {
      if (e.started_ns > 0) t0 = std::min(t0, e.started_ns);
      last = std::max({last, e.time_created_ns, e.started_ns, e.ended_ns});
    }
  }
  if (t0 == std::numeric_limits<std::int64_t>::max()) t0 = 0;
  const auto us = [&](std::int64_t ns) { return static_cast<double>(ns - t0) / 1000.0; };

  json events = json::array();
  for (const RankDump& d : dumps) {
    events.push_back(metadata("process_name", d.rank, -1, fmt::format("rank {}", d.rank)));
    events.push_back({{"name", "process_sort_index"},
                      {"ph", "M"},
                      {"pid", d.rank},
                      {"args", {{"sort_index", d.rank}}}});
    // A thread track per (group, kind), numbered in order of first appearance.
    std::map<std::pair<std::string, bool>, int> tracks;
    for (const DumpEntry& e : d.entries) {
      if (e.started_ns <= 0) continue;  // never started: nothing to draw
      const auto key = std::make_pair(e.pg_name, e.is_p2p);
      auto [it, added] = tracks.try_emplace(key, static_cast<int>(tracks.size()));
      if (added) {
        const std::string group = e.pg_desc.empty() ? e.pg_name : e.pg_desc;
        events.push_back(
            metadata("thread_name", d.rank, it->second, e.is_p2p ? group + " p2p" : group));
      }
      const std::int64_t end = e.ended() && e.ended_ns > 0 ? e.ended_ns : last;
      events.push_back({{"name", fmt::format("{} #{}", e.op, e.sequence())},
                        {"cat", e.pg_desc.empty() ? e.pg_name : e.pg_desc},
                        {"ph", "X"},
                        {"pid", d.rank},
                        {"tid", it->second},
                        {"ts", us(e.started_ns)},
                        {"dur", us(std::max(end, e.started_ns)) - us(e.started_ns)},
                        {"args", args_of(e)}});
    }
  }
  const json trace = {{"traceEvents", std::move(events)},
                      {"displayTimeUnit", "ms"},
                      {"otherData", {{"t0_ns", t0}, {"source", "c10d flight recorder"}}}};
  return trace.dump(1) + "\n";
}

}  // namespace c10d::inline v1::tools
