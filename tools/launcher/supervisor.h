// Supervisor: runs the local processes of one node from start to end, on the launcher's one
// thread.
//
// run() starts every process, then loops on one poll() over a signalfd and the read ends of
// every child's stdout and stderr pipes:
//  - output: whatever a pipe holds is read (without blocking), cut into lines prefixed with
//    "[rank R]: " and written, whole lines only, to the launcher's stdout or stderr;
//  - SIGCHLD: exited children are reaped; before one's exit is reported, its pipes are drained,
//    so its last words come before the verdict;
//  - SIGINT, SIGTERM, SIGHUP, SIGQUIT: forwarded to every running child (each time one
//    arrives), and the stop clock starts.
// The first child to fail (a non-zero exit or a signal) while nobody asked to stop is reported
// as "failed"; every running child then gets SIGTERM (and SIGCONT, when it is stopped, so that
// it can act on it). Children that end abnormally after that are reported as "stopped". Before
// it reports the first failure, the supervisor looks once at its other children and at the
// ranks' stall records (blame.h): a child that is stopped, or that the ranks' timed-out ops
// found they were waiting for, is reported first as the cause, with the evidence:
//   c10drun: rank 2 (pid 812) is the cause: it was stopped (state T) and made no progress;
//            ranks 0, 1 timed out waiting for it
// A failed rank that only gave up waiting is then reported as "failed ..., after rank 2 made no
// progress". The look is bounded by the store client's one-second timeout. Once stopping, children
// still running after the grace period get SIGKILL; one that outlives even that (stuck in the
// kernel) is left behind after a further bound, so the launcher never hangs while stopping.
//
// With a trace directory (LaunchOptions::trace_dir), the others are asked to dump before the
// SIGTERM, and the flight recorder's verdict is printed after the line naming the failed rank
// (verdict.h); the launcher waits for the dumps up to TraceVerdict::kDumpWait, relaying output
// and reaping meanwhile. With a hang timeout (LaunchOptions::hang_timeout), no op completing on
// any child for that long (progress_watch.h) fails the job the same way:
//   c10drun: no process completed an op for 30 s (1234 ops before that): the job is hung
//
// Exit status of run(): 0 when every child exited 0; 1 when one failed or could not be
// started, or the job's other nodes stopped it; otherwise 128 + the first stop signal received.
//
// In a job of several nodes that may restart (restarts.h), JobHooks tie the supervisor to the
// other nodes: it tells them of its first failure or stop signal (on_stop), and stops its
// children, as after a failure of its own, when the descriptor stop_fd becomes readable
// (another node failed), reporting stop_reason().
//
// Not thread-safe; one per launcher. The signals read through signal_fd must be blocked in
// every thread of the process.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "launcher/blame.h"
#include "launcher/cpu_binding.h"
#include "launcher/launch_options.h"
#include "launcher/line_prefixer.h"
#include "launcher/progress_watch.h"
#include "launcher/spawn.h"
#include "launcher/verdict.h"

namespace c10d::inline v1::launcher {

// How the supervisor of one node hears of, and tells, the other nodes of the job (restarts.h).
struct JobHooks {
  int stop_fd = -1;  // readable once another node stopped the attempt; -1: none
  std::function<std::string()> stop_reason;         // why, once stop_fd is readable
  std::function<void(const std::string&)> on_stop;  // this node's first failure or stop
};

class Supervisor {
 public:
  // `env`: the variables every child gets on top of the launcher's environment (RANK and
  // LOCAL_RANK are added per child). `signal_fd`: a non-blocking signalfd for SIGCHLD and the
  // stop signals; not owned. `stall_records`: the text of the ranks' stall records
  // (transport/stall_record.h), bounded in time, "" when there are none or it cannot tell;
  // null: none.
  Supervisor(const LaunchOptions& options, std::map<std::string, std::string> env,
             const InheritedState& inherited, int signal_fd,
             std::function<std::string()> stall_records = nullptr);
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Set before run().
  void set_job_hooks(JobHooks hooks) { hooks_ = std::move(hooks); }

  int run();

  // What stopped the run, once it ended with 1: "rank 2 (pid 812): killed by signal 9
  // (SIGKILL)", "rank 1 (pid 5): exited with code 3; rank 2 (pid 6) made no progress",
  // "cannot start rank 1: ...", or the other nodes' stop_reason(). Empty otherwise.
  const std::string& failure() const { return failure_; }

 private:
  using Clock = std::chrono::steady_clock;

  // One output stream of a child, relayed to the launcher's `target` descriptor.
  struct Stream {
    UniqueFd fd;  // the pipe's read end; closed at end of stream
    LinePrefixer lines;
    int target;
  };

  struct Child {
    int rank;
    pid_t pid = -1;
    bool running = false;
    Stream out;
    Stream err;
    std::string ended = {};  // how it ended, for the verdict: "it exited with code 3"
  };

  enum class Phase {
    kRunning,   // nobody failed, nobody asked to stop
    kDumping,   // the job failed: waiting for the dumps the others were asked for (verdict.h)
    kStopping,  // a child failed or a stop signal came: waiting up to the grace period
    kKilling,   // the grace period is over: survivors got SIGKILL
  };

  void start_all();
  void wait_for_events();
  void read_signals();
  void reap();
  void on_exit(Child& child, int status);
  // The rank behind `failed_rank`'s failure (-1: the job's hang), when another (blame.h).
  Cause find_cause_of(int failed_rank);
  void report_cause(const Cause& cause) const;
  std::vector<ProcessView> process_views() const;
  // The job failed (reported): asks for the dumps when there is a trace directory, else stops.
  void fail_job();
  // The verdict on the dumps (verdict.h), once.
  void give_verdict();
  void on_hang();
  void on_stop_signal(int signal);
  void stop_after_failure();
  // Another node stopped the attempt (hooks_.stop_fd became readable).
  void on_job_stop();
  void record_failure(const std::string& what);
  void kill_survivors();
  void drain(Stream& stream);
  void finish_output();
  void report(const std::string& line) const;

  const LaunchOptions& options_;
  std::map<std::string, std::string> env_;
  InheritedState inherited_;
  int signal_fd_;
  std::function<std::string()> stall_records_;
  // The CPUs each local rank is bound to (--bind-to; empty: unbound), the same every attempt.
  const std::vector<std::vector<int>> cpus_;

  std::vector<Child> children_;
  std::unordered_map<pid_t, std::size_t> index_of_pid_;
  int running_ = 0;
  Phase phase_ = Phase::kRunning;
  Clock::time_point kill_at_;     // kStopping: when survivors get SIGKILL
  Clock::time_point give_up_at_;  // kKilling: when the launcher stops waiting for them
  bool failed_ = false;
  int stop_signal_ = 0;  // the first stop signal received
  std::vector<char> read_buffer_;
  JobHooks hooks_;
  std::string failure_;
  std::optional<TraceVerdict> verdict_;      // with a trace directory
  std::unique_ptr<ProgressWatch> progress_;  // with a hang timeout
  bool verdict_given_ = false;
};

}  // namespace c10d::inline v1::launcher
