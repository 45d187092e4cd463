// c10d-trace timeline: the ranks' flight recorder dumps drawn as a Chrome/Perfetto trace (the
// Trace Event Format's JSON object form, which chrome://tracing and ui.perfetto.dev load), so a
// person can see where the time went.
//
// One process track per rank (pid = the global rank, named "rank R"); under it a thread track
// per group and kind ("world", "world p2p": sends and receives overlap collectives on MPI), and a
// complete event ("ph": "X") per op from its start to its end, named "all_reduce #3", with the
// op's group, sequence number, sizes, dtype, state and error as args. An op still running at the
// dump ends at the latest time any dump holds (its state says "started"); an op never started
// is not drawn. Times are in microseconds from the earliest start in the dumps
// ("otherData": {"t0_ns": ...} gives it in ns since the epoch).
#pragma once

#include <string>
#include <vector>

#include "backends/common/trace_json.h"

namespace c10d::inline v1::tools {

// The trace, as JSON text.
std::string timeline_json(const std::vector<backends::trace::RankDump>& dumps);

}  // namespace c10d::inline v1::tools
