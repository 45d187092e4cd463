// The flight recorder's dump: one JSON file per rank, in the fields of PyTorch's flight recorder
// JSON dump (FlightRecorder's dump_json, format "2.10"), so that tools that read those read
// ours; docs/tracing.md lists every field. Written and parsed with nlohmann::json (kept out of
// this header).
//
//   {"version": "2.10", "comm_lib_version": "c10d", "rank": 2, "dump_reason": "...",
//    "pg_config": {"0": {"name": "0", "desc": "world", "ranks": "[0, 1, 2]", "backend": "tcp"}},
//    "pg_status": {"0": {"last_enqueued_collective": "57", ...}},
//    "entries": [{"record_id": 0, "pg_id": 0, "process_group": ["0", "world"],
//                 "collective_seq_id": 57, "p2p_seq_id": 0, "op_id": 0, "is_p2p": false,
//                 "profiling_name": "gloo:all_reduce", "input_sizes": [[1024]],
//                 "input_dtypes": ["Float"], "output_sizes": [[1024]], "output_dtypes": ["Float"],
//                 "state": "started", "time_created_ns": ..., "time_discovered_started_ns": ...,
//                 "time_discovered_completed_ns": 0, "timeout_ms": 30000, "retired": false,
//                 "count": 1024, "root": -1, "reduce_op": "sum", "error": ""}, ...]}
//
// Ours beyond PyTorch's: "rank", "dump_reason", pg_config's "backend", and each entry's "count",
// "root" (a rooted collective's root, a send's or receive's peer; -1: none), "reduce_op",
// "error", and the state "failed" (PyTorch knows scheduled, started and completed).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "backends/common/trace_ring.h"

namespace c10d::inline v1::backends::trace {

inline constexpr std::string_view kFormatVersion = "2.10";

struct RingDump {
  TraceGroup group;
  std::vector<TraceEntry> entries;
};

// The dump of `rank` (its groups' rings). `wall_offset_ns`: the system clock minus the steady
// clock, to turn the records' steady timestamps into PyTorch's nanoseconds since the epoch.
std::string write_dump(int rank, std::string_view reason, const std::vector<RingDump>& rings,
                       std::int64_t wall_offset_ns);

// ---- Reading (c10d-trace) ----

struct DumpEntry {
  std::uint64_t record_id = 0;
  std::uint64_t pg_id = 0;
  std::string pg_name, pg_desc;
  std::int64_t collective_seq_id = 0;
  std::int64_t p2p_seq_id = 0;
  bool is_p2p = false;
  std::string profiling_name;
  std::string op;  // the profiling name's op: "gloo:send 0->1" is "send"
  std::vector<std::vector<std::int64_t>> input_sizes;
  std::vector<std::string> input_dtypes;  // as written (PyTorch's names: "Float")
  std::string state;                      // scheduled, started, completed, failed
  std::int64_t time_created_ns = 0;
  std::int64_t started_ns = 0;
  std::int64_t ended_ns = 0;
  std::int64_t timeout_ms = 0;
  int root = -1;
  std::string error;

  std::int64_t sequence() const { return is_p2p ? p2p_seq_id : collective_seq_id; }
  std::int64_t numel() const;  // the sum of input_sizes' products
  bool ended() const { return state == "completed" || state == "failed"; }
};

struct DumpGroup {
  std::string name, desc;
  std::vector<int> ranks;  // global
};

struct RankDump {
  int rank = -1;
  std::string version;
  std::string reason;
  std::map<std::string, DumpGroup> groups;  // by pg name
  std::vector<DumpEntry> entries;           // as dumped: oldest first within each group
};

// Parses one rank's dump; `source` names it in errors. Its rank is its "rank" field, else
// `rank_if_missing` (a PyTorch dump's file name ends in it). InvalidArgument naming the source
// and the field that is missing or malformed.
RankDump parse_dump(std::string_view text, std::string_view source, int rank_if_missing = -1);
// Reads and parses `path` (InvalidArgument when it cannot be read).
RankDump read_dump(const std::string& path);

// PyTorch's names of the dtypes ("Float") and back to ours ("float32"; unknown names as given).
std::string_view torch_dtype_name(DType dtype);
std::string dtype_from_torch(std::string_view name);

}  // namespace c10d::inline v1::backends::trace
