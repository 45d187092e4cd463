// A rank's count of completed ops, published for a launcher that watches for a hung job
// (c10drun --hang-timeout, tools/launcher/progress_watch.h). The launcher makes one small file
// per rank (on tmpfs) and names it in C10D_PROGRESS_FILE; the rank maps the file's first 8 bytes
// and adds one there each time an op completes (OpRunner: every backend's ops). The launcher
// reads the counters a few times a second: none of them moving for the timeout means no op
// completed anywhere.
//
// Why a mapped counter: it costs a rank one uncontended atomic add per completed op and nothing
// else (no message, no thread, no system call), it needs no cooperation from a rank that is stuck,
// and it survives whatever the rank's threads are doing. Without C10D_PROGRESS_FILE it costs a
// load and a branch.
//
// Thread-safety: any thread.
#pragma once

#include <atomic>
#include <cstdint>

namespace c10d::inline v1::core::progress {

inline constexpr const char* kFileEnv = "C10D_PROGRESS_FILE";
inline constexpr std::size_t kFileBytes = 8;  // one std::uint64_t, native byte order

// The mapped counter of C10D_PROGRESS_FILE, mapped on the first call; null when the variable is
// unset, or the file cannot be mapped (warned once).
std::uint64_t* counter();

// An op completed.
inline void op_completed() {
  if (std::uint64_t* c = counter()) std::atomic_ref(*c).fetch_add(1, std::memory_order_relaxed);
}

}  // namespace c10d::inline v1::core::progress
