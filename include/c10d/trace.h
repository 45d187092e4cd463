// The flight recorder (docs/tracing.md): every group keeps the records of its last ops
// (C10D_TRACE_BUFFER, default 2000; 0 turns it off), and each rank dumps them as JSON to
// C10D_TRACE_DIR when an op fails or times out, on abort(), on SIGUSR1, and when asked here.
// `c10d-trace analyze DIR` merges the ranks' dumps and names what went wrong.
//
// Thread-safety: dump_traces may be called from any thread; dumps are made one at a time.
#pragma once

#include <string>
#include <vector>

#include "c10d/export.h"

namespace c10d::inline v1 {

// Writes the records of this process's groups to `dir` (empty: C10D_TRACE_DIR), one file per
// rank, c10d_trace_rank_<global rank>.json; returns the files' paths (none when the recorder is
// off or no group exists). InvalidArgument when no directory is named; Error naming the file
// when one cannot be written.
C10D_API std::vector<std::string> dump_traces(const std::string& dir = {});

}  // namespace c10d::inline v1
