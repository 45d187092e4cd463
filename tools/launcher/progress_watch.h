// ProgressWatch: c10drun --hang-timeout's view of whether the job moves. Each local process gets
// a file of its own, named in C10D_PROGRESS_FILE, whose first 8 bytes the process's c10d adds one
// to at every completed op (src/core/progress_file.h). The supervisor reads the counters a few
// times a second; when none has moved for the timeout, no op completed on any local process for
// that long: the job is hung.
//
// The files live in a fresh directory on tmpfs (/dev/shm, else $TMPDIR or /tmp), made at start
// and removed with the watch. The clock starts when the watch is made, so a job that never
// completes its first op (a rendezvous that never ends) counts as hung too.
//
// Not thread-safe; the supervisor's thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "launcher/spawn.h"

namespace c10d::inline v1::launcher {

class ProgressWatch {
 public:
  using Clock = std::chrono::steady_clock;

  // One counter per local rank 0 .. `processes` - 1. Error naming the directory or file that
  // cannot be made.
  ProgressWatch(std::chrono::seconds timeout, int processes);
  ~ProgressWatch();
  ProgressWatch(const ProgressWatch&) = delete;
  ProgressWatch& operator=(const ProgressWatch&) = delete;

  std::chrono::seconds timeout() const { return timeout_; }
  // The file local rank `local_rank` gets in C10D_PROGRESS_FILE.
  const std::string& file_of(int local_rank) const { return files_[local_rank]; }

  // Reads the counters at `now`; true when none moved for the timeout.
  bool hung(Clock::time_point now);
  // When hung() next needs a look.
  Clock::time_point next_look() const { return next_look_; }
  // Ops completed so far on this node (the counters' sum at the last look).
  std::uint64_t completed() const { return total_; }

 private:
  const std::chrono::seconds timeout_;
  std::string dir_;
  std::vector<std::string> files_;
  std::vector<UniqueFd> fds_;
  std::uint64_t total_ = 0;
  Clock::time_point last_move_;
  Clock::time_point next_look_;
};

}  // namespace c10d::inline v1::launcher
