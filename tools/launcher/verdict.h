// TraceVerdict: what the flight recorder says when a job under c10drun --trace-dir (or with
// C10D_TRACE_DIR set) fails (docs/tracing.md). The supervisor, once it has reported the failed
// rank (or the hang) and before it stops the others:
//  1. request(): sends SIGUSR1 to every live local process that handles it (the recorder's dump,
//     flight_recorder.h; /proc/<pid>/status SigCgt says whether it does: to one that does not,
//     SIGUSR1 would be fatal, so it is not sent);
//  2. waits, serving its other work, until ready() (every process asked wrote its dump since the
//     request, or ended) or deadline(), at most kDumpWait;
//  3. lines(): runs c10d-trace analyze's analysis (tools/trace/trace_analysis.h) on the dumps in
//     the directory, and prints the result after its line naming the failed rank.
// Ranks that left no dump are said with why, when the launcher knows ("killed by signal 9
// (SIGKILL)", "does not dump on request").
//
// The directory is made when the job starts, and the dumps a former job left there for this
// node's ranks are removed, so that a rank that leaves none this time is not judged by an old one.
// With several nodes, each launcher asks its own processes; a directory the nodes share gives
// every launcher every rank's dump.
//
// Not thread-safe; the supervisor's thread only.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "launcher/blame.h"

namespace c10d::inline v1::launcher {

class TraceVerdict {
 public:
  using Clock = std::chrono::steady_clock;
  // How long the supervisor waits for the dumps it asked for.
  static constexpr std::chrono::seconds kDumpWait{3};

  // Makes `dir` (absolute) and removes its dumps of `ranks`. Error naming the directory when it
  // cannot be made.
  TraceVerdict(std::string dir, const std::vector<int>& ranks);

  const std::string& dir() const { return dir_; }

  // Asks each running process of `processes` to dump; the deadline is kDumpWait from now.
  void request(const std::vector<ProcessView>& processes);
  // Whether every process asked has dumped since the request or ended (`processes`: as now).
  bool ready(const std::vector<ProcessView>& processes) const;
  Clock::time_point deadline() const { return deadline_; }

  // The verdict on the dumps now in the directory; `ended`: how the local processes that have
  // ended did ("killed by signal 9 (SIGKILL)"), by rank.
  std::vector<std::string> lines(const std::map<int, std::string>& ended) const;

 private:
  bool dumped_since_request(int rank) const;

  std::string dir_;
  std::vector<int> asked_;                // ranks sent SIGUSR1
  std::map<int, std::string> not_asked_;  // rank: why not
  std::chrono::system_clock::time_point requested_{};
  Clock::time_point deadline_{};
};

// The dump file of `rank` in `dir` (flight_recorder.h's name).
std::string dump_path(const std::string& dir, int rank);

// Whether process `pid` catches `signal` (/proc/<pid>/status SigCgt); false when unreadable.
bool catches_signal(pid_t pid, int signal);

}  // namespace c10d::inline v1::launcher
