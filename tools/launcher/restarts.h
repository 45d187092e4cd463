// Restarts (c10drun --max-restarts K): when a process fails, the launcher stops the others, as
// it always does, and then starts the whole job again, K times at most.
//
// Attempt k (0 first) runs every process with C10D_RESTART_COUNT=k; their stores keep attempt
// k's keys apart from every other attempt's (store/attempt_store.h), so nothing stale is read.
// Each restart is one line on the launcher's stderr naming the attempt and what failed in it:
//   c10drun: attempt 0 failed: rank 1 (pid 812): killed by signal 9 (SIGKILL); restarting
//            the job (restart 1 of 3): attempt 1, C10D_RESTART_COUNT=1
// and the last failure ends the job with
//   c10drun: attempt 3 failed: rank 0 (pid 990): exited with code 1; no restart left
//            (--max-restarts 3)
// A stop signal (SIGINT, SIGTERM...) ends the job without a restart.
//
// One node decides alone. With several nodes every node's launcher must start the same
// attempt, so they agree through the job's store (node_sync.h): a failure or stop anywhere
// stops every node's attempt; each node then writes how the attempt ended there and waits for
// the others; every node reads the same outcomes and so takes the same next step.
//
// Not thread-safe; called once, on the launcher's thread.
#pragma once

#include <functional>
#include <span>
#include <string>

#include "launcher/launch_options.h"
#include "launcher/node_sync.h"
#include "launcher/supervisor.h"

namespace c10d::inline v1::launcher {

// How one attempt ended on this node.
struct AttemptResult {
  int status = 0;       // Supervisor::run()'s: 0, 1, or 128 + a stop signal
  std::string failure;  // Supervisor::failure()
};

// Runs attempt `attempt` of this node's processes, under `hooks`.
using RunAttempt = std::function<AttemptResult(int attempt, const JobHooks& hooks)>;

// What follows an attempt.
enum class NextStep {
  kSucceed,  // every node's processes exited 0
  kRestart,  // one failed, and a restart is left
  kFail,     // one failed, and none is left
  kStop,     // a node was stopped by a signal
};

// Pure: what follows attempt `attempt` (0-based) when the nodes ended as `outcomes`.
NextStep next_step(std::span<const NodeOutcome> outcomes, int attempt, int max_restarts);

// The line that reports attempt `attempt`'s failure (`failure` says what failed) and what
// follows it (kRestart or kFail), without the trailing newline.
std::string restart_line(int attempt, int max_restarts, const std::string& failure, NextStep next);

// Runs attempts until one succeeds, a stop signal ends the job, or the restarts run out; returns
// c10drun's exit status. `sync`: null on one node. `signal_fd`: the launcher's signalfd, read
// between attempts of several nodes.
int run_with_restarts(const LaunchOptions& options, const RunAttempt& run_attempt, NodeSync* sync,
                      int signal_fd);

}  // namespace c10d::inline v1::launcher
