#include "backends/common/trace_json.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <array>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::inline v1::backends::trace {

namespace {

using json = nlohmann::json;
using State = OpRecord::State;

// PyTorch's c10::ScalarType names, in DType's order.
constexpr std::array<std::string_view, kNumDTypes> kTorchNames = {
    "Float", "Double", "Half", "BFloat16", "Char", "Byte", "Int", "Long", "Bool", "Short"};

std::string_view state_name(State s) {
  switch (s) {
    case State::kQueued:
      return "scheduled";
    case State::kStarted:
      return "started";
    case State::kCompleted:
      return "completed";
    case State::kFailed:
      return "failed";
  }
  return "unknown";
}

std::int64_t wall_ns(OpRecord::Clock::time_point t, std::int64_t offset) {
  if (t == OpRecord::Clock::time_point{}) return 0;
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count() +
         offset;
}

// "gloo:<op>", with "<me>-><peer>" or "<me><-<peer>" for send and recv as PyTorch writes them
// (its fr_trace takes the gloo prefix for a CPU library).
std::string profiling_name(const OpRecord& r, int me) {
  if (r.op == "send") return fmt::format("gloo:send {}->{}", me, r.rank);
  if (r.op == "recv") return fmt::format("gloo:recv {}<-{}", me, r.rank);
  return fmt::format("gloo:{}", r.op);
}

json sizes_of(const OpRecord& r) {
  std::int64_t numel = 1;
  std::vector<std::int64_t> shape(r.shape.begin(), r.shape.begin() + r.dims);
  for (auto d : shape) numel *= d;
  // A list of tensors (count beyond the first's numel): one flat size, their total.
  if (r.count >= 0 && r.count != numel) shape = {r.count};
  if (r.dtype == OpRecord::kNone) return json::array();
  return json::array({shape});
}

json entry_json(const TraceEntry& e, const TraceGroup& g, std::int64_t offset) {
  const OpRecord& r = e.record;
  const State state = r.state();
  json j;
  j["record_id"] = e.id;
  j["pg_id"] = g.id;
  j["process_group"] = json::array({g.name, g.desc});
  j["collective_seq_id"] = r.collective ? r.sequence : e.other_sequence;
  j["p2p_seq_id"] = r.collective ? e.other_sequence : r.sequence;
  j["op_id"] = e.id;
  j["is_p2p"] = !r.collective;
  j["profiling_name"] = profiling_name(r, g.rank);
  const json sizes = sizes_of(r);
  const json dtypes = r.dtype == OpRecord::kNone
                          ? json::array()
                          : json::array({std::string(kTorchNames.at(r.dtype))});
  j["input_sizes"] = sizes;
  j["input_dtypes"] = dtypes;
  // In place: the output is the input.
  const bool in_place = r.op == "all_reduce" || r.op == "broadcast" || r.op == "reduce";
  j["output_sizes"] = in_place ? sizes : json::array();
  j["output_dtypes"] = in_place ? dtypes : json::array();
  j["state"] = state_name(state);
  j["time_created_ns"] = wall_ns(r.queued, offset);
  const bool started = state != State::kQueued;
  const bool ended = state == State::kCompleted || state == State::kFailed;
  j["time_discovered_started_ns"] = started ? wall_ns(r.started, offset) : 0;
  j["time_discovered_completed_ns"] = ended ? wall_ns(r.ended, offset) : 0;
  if (state == State::kCompleted && r.started != OpRecord::Clock::time_point{}) {
    j["duration_ms"] = std::chrono::duration<double, std::milli>(r.ended - r.started).count();
  }
  j["retired"] = ended;
  j["timeout_ms"] = e.timeout_ms;
  j["count"] = r.count;
  j["root"] = r.rank;
  j["reduce_op"] = r.reduce_op == OpRecord::kNone
                       ? std::string()
                       : std::string(reduce_op_name(static_cast<ReduceOp>(r.reduce_op)));
  j["error"] = e.error;
  return j;
}

std::vector<int> parse_ranks(const std::string& text, std::string_view source) {
  // PyTorch's ranks_str: "[0, 1, 2]".
  std::vector<int> ranks;
  std::string digits;
  for (char c : text) {
    if (std::isdigit(static_cast<unsigned char>(c))) {
      digits += c;
    } else if (c == ',' || c == ']') {
      if (!digits.empty()) ranks.push_back(std::stoi(digits));
      digits.clear();
    } else if (c != '[' && c != ' ') {
      C10D_THROW(InvalidArgument, "{}: pg_config ranks '{}' is not a list of ranks", source, text);
    }
  }
  return ranks;
}

// The op of a profiling name: after the library's prefix, before any peers.
std::string op_of(const std::string& name) {
  const auto colon = name.find(':');
  std::string op = colon == std::string::npos ? name : name.substr(colon + 1);
  return op.substr(0, op.find(' '));
}

}  // namespace

std::string_view torch_dtype_name(DType dtype) {
  return kTorchNames.at(static_cast<std::size_t>(dtype));
}

std::string dtype_from_torch(std::string_view name) {
  for (std::size_t i = 0; i < kTorchNames.size(); ++i) {
    if (kTorchNames[i] == name) return std::string(dtype_name(static_cast<DType>(i)));
  }
  return std::string(name);
}

std::int64_t DumpEntry::numel() const {
  std::int64_t total = 0;
  for (const auto& shape : input_sizes) {
    std::int64_t n = 1;
    for (auto d : shape) n *= d;
    total += n;
  }
  return total;
}

std::string write_dump(int rank, std::string_view reason, const std::vector<RingDump>& rings,
                       std::int64_t wall_offset_ns) {
  json out;
  out["version"] = kFormatVersion;
  out["comm_lib_version"] = "c10d";
  out["rank"] = rank;
  out["dump_reason"] = reason;
  json config = json::object();
  json status = json::object();
  json entries = json::array();
  for (const auto& ring : rings) {
    const TraceGroup& g = ring.group;
    config[g.name] = {{"name", g.name},
                      {"desc", g.desc},
                      {"ranks", fmt::format("[{}]", fmt::join(g.ranks, ", "))},
                      {"backend", g.backend}};
    std::int64_t enqueued = -1, started = -1, completed = -1;
    for (const auto& e : ring.entries) {
      entries.push_back(entry_json(e, g, wall_offset_ns));
      if (!e.record.collective) continue;
      const auto seq = static_cast<std::int64_t>(e.record.sequence);
      const State s = e.record.state();
      enqueued = std::max(enqueued, seq);
      if (s != State::kQueued) started = std::max(started, seq);
      if (s == State::kCompleted) completed = std::max(completed, seq);
    }
    // Strings, as PyTorch's JSON dump writes them.
    status[std::to_string(g.id)] = {{"last_enqueued_collective", std::to_string(enqueued)},
                                    {"last_started_collective", std::to_string(started)},
                                    {"last_completed_collective", std::to_string(completed)}};
  }
  out["pg_config"] = std::move(config);
  out["pg_status"] = std::move(status);
  out["entries"] = std::move(entries);
  return out.dump(1);
}

RankDump parse_dump(std::string_view text, std::string_view source, int rank_if_missing) {
  RankDump d;
  try {
    const json j = json::parse(text);
    d.version = j.at("version").get<std::string>();
    d.rank = j.contains("rank") ? j.at("rank").get<int>() : rank_if_missing;
    C10D_CHECK(d.rank >= 0, "{}: the dump names no rank (no \"rank\" field, no rank in its name)",
               source);
    d.reason = j.value("dump_reason", std::string());
    for (const auto& [name, g] : j.at("pg_config").items()) {
      d.groups[name] = DumpGroup{g.at("name").get<std::string>(), g.value("desc", std::string()),
                                 parse_ranks(g.at("ranks").get<std::string>(), source)};
    }
    // A PyTorch dump leaves "entries" out when it has none.
    if (!j.contains("entries")) return d;
    for (const auto& e : j.at("entries")) {
      DumpEntry x;
      x.record_id = e.at("record_id").get<std::uint64_t>();
      x.pg_id = e.at("pg_id").get<std::uint64_t>();
      const auto& pg = e.at("process_group");
      x.pg_name = pg.at(0).get<std::string>();
      x.pg_desc = pg.at(1).get<std::string>();
      x.collective_seq_id = e.at("collective_seq_id").get<std::int64_t>();
      x.p2p_seq_id = e.value("p2p_seq_id", std::int64_t{0});
      x.is_p2p = e.value("is_p2p", false);
      x.profiling_name = e.at("profiling_name").get<std::string>();
      x.op = op_of(x.profiling_name);
      x.input_sizes = e.at("input_sizes").get<std::vector<std::vector<std::int64_t>>>();
      x.input_dtypes = e.at("input_dtypes").get<std::vector<std::string>>();
      x.state = e.at("state").get<std::string>();
      x.time_created_ns = e.value("time_created_ns", std::int64_t{0});
      const auto& s = e.value("time_discovered_started_ns", json());
      const auto& c = e.value("time_discovered_completed_ns", json());
      x.started_ns = s.is_number() ? s.get<std::int64_t>() : 0;
      x.ended_ns = c.is_number() ? c.get<std::int64_t>() : 0;
      x.timeout_ms = e.value("timeout_ms", std::int64_t{0});
      x.root = e.value("root", -1);
      x.error = e.value("error", std::string());
      d.entries.push_back(std::move(x));
    }
  } catch (const json::exception& e) {
    C10D_THROW(InvalidArgument, "{}: not a flight recorder dump: {}", source, e.what());
  }
  return d;
}

RankDump read_dump(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  C10D_CHECK(in.good(), "cannot read the trace dump {}", path);
  std::stringstream text;
  text << in.rdbuf();
  // A PyTorch dump is named <prefix><rank>: the digits its name ends in.
  const auto base = path.substr(path.find_last_of('/') + 1);
  const auto stem = base.substr(0, base.find('.'));
  const auto digits = stem.find_last_not_of("0123456789");
  int rank = -1;
  if (digits + 1 < stem.size()) rank = std::stoi(stem.substr(digits + 1));
  return parse_dump(text.str(), path, rank);
}

}  // namespace c10d::inline v1::backends::trace
