// The flight recorder's process-wide part: the registry of the groups' rings (trace_ring.h) and
// their dumps (trace_json.h), one file per rank, c10d_trace_rank_<global rank>.json, in
// C10D_TRACE_DIR. A dump happens:
//  - when a group fails (an op times out or fails, abort()): once per group, before any of its
//    Works fails with the error (group_failed), so a rank that exits on the error leaves it; and
//    for the first op that fails alone (op_failed);
//  - on SIGUSR1, when C10D_TRACE_DIR is set and the program had not set a SIGUSR1 handler of its
//    own when its first group was made: the handler writes a byte to a pipe, and a thread the
//    recorder starts then makes the dump (no unsafe work in the handler);
//  - when asked: c10d::dump_traces (include/c10d/trace.h), for the SIGUSR1 path and a launcher.
// A dump that cannot be written on a failure or a signal logs a warning; the op's error is what
// its caller sees.
//
// Thread-safety: every function may be called from any thread; dumps are made one at a time.
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backends/common/trace_ring.h"

namespace c10d::inline v1::backends::trace {

inline constexpr std::size_t kDefaultBuffer = 2000;
inline constexpr std::size_t kMaxBuffer = 1 << 20;

// C10D_TRACE_BUFFER: ops kept per group (default 2000; 0: the recorder is off). InvalidArgument
// naming the variable and its range for anything else.
std::size_t buffer_from_env();
// C10D_TRACE_DIR, when set and not empty.
std::optional<std::string> dir_from_env();

// A ring of buffer_from_env() ops for `group`, registered for dumps; null when the recorder is
// off. The first one made with C10D_TRACE_DIR set installs the SIGUSR1 dump.
std::shared_ptr<TraceRing> make_ring(TraceGroup group);

// Writes the registered rings to `dir` (made if missing), one file per global rank, each written
// under a temporary name and renamed into place; returns the files' paths. Error naming the file
// when one cannot be written.
std::vector<std::string> dump_to(const std::string& dir, std::string_view reason);

// The group of `ring` failed with `error` (its first failure, latched: OpRunner::fail): unless
// that was dumped already, dumps to C10D_TRACE_DIR (when set). The dump shows the group's ops not
// yet ended as failed with `error`: they fail with it once the dump is written (the op that
// failed, those in flight and those queued). Returns once the dump is written, also when another
// thread is the one writing it. Never throws.
void group_failed(TraceRing& ring, std::string_view error) noexcept;
// An op of `ring` failed with `error`: as group_failed, once per group, unless the group's
// failure was dumped (an op can fail alone and leave the group usable: a C10D_DEBUG=DETAIL
// mismatch; else every op fails with the group, which dumped before failing them).
void op_failed(TraceRing& ring, std::string_view error) noexcept;

}  // namespace c10d::inline v1::backends::trace
