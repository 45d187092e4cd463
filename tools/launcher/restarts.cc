#include "launcher/restarts.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <exception>

namespace c10d::inline v1::launcher {
namespace {

constexpr int kExitFailure = 1;

void report(const std::string& line) {
  const std::string text = line + "\n";
  std::string_view rest = text;
  while (!rest.empty()) {
    const ssize_t n = ::write(STDERR_FILENO, rest.data(), rest.size());
    if (n <= 0) return;  // nobody reads the launcher's stderr any more
    rest.remove_prefix(static_cast<std::size_t>(n));
  }
}

NodeOutcome outcome_of_status(int status) {
  if (status == 0) return NodeOutcome::kSucceeded;
  return status == kExitFailure ? NodeOutcome::kFailed : NodeOutcome::kStopped;
}

}  // namespace

NextStep next_step(std::span<const NodeOutcome> outcomes, int attempt, int max_restarts) {
  const auto any = [&](NodeOutcome o) {
    return std::find(outcomes.begin(), outcomes.end(), o) != outcomes.end();
  };
  if (any(NodeOutcome::kStopped)) return NextStep::kStop;
  if (!any(NodeOutcome::kFailed)) return NextStep::kSucceed;
  return attempt < max_restarts ? NextStep::kRestart : NextStep::kFail;
}

std::string restart_line(int attempt, int max_restarts, const std::string& failure, NextStep next) {
  const std::string head =
      fmt::format("c10drun: attempt {} failed: {}", attempt,
                  failure.empty() ? std::string("a process of another node failed") : failure);
  if (next == NextStep::kRestart) {
    return fmt::format(
        "{}; restarting the job (restart {} of {}): attempt {}, "
        "C10D_RESTART_COUNT={}",
        head, attempt + 1, max_restarts, attempt + 1, attempt + 1);
  }
  return fmt::format("{}; no restart left (--max-restarts {})", head, max_restarts);
}

int run_with_restarts(const LaunchOptions& options, const RunAttempt& run_attempt, NodeSync* sync,
                      int signal_fd) {
  for (int attempt = 0;; ++attempt) {
    const JobHooks hooks = sync != nullptr ? sync->begin(attempt) : JobHooks{};
    const AttemptResult result = run_attempt(attempt, hooks);
    const NodeOutcome local = outcome_of_status(result.status);
    std::vector<NodeOutcome> outcomes{local};
    std::string failure = result.failure;
    int status = result.status;
    if (sync != nullptr) {
      sync->end();
      int stop_signal = 0;
      try {
        NodeSync::Ended ended =
            sync->finish(attempt, local, result.failure, signal_fd, stop_signal);
        outcomes = std::move(ended.outcomes);
        failure = std::move(ended.reason);
      } catch (const std::exception& e) {
        report(
            fmt::format("c10drun: node {} cannot agree with the other nodes on what follows "
                        "attempt {}: {}",
                        options.node_rank, attempt, e.what()));
        return kExitFailure;
      }
      if (stop_signal != 0) return 128 + stop_signal;
    }
    const NextStep next = next_step(outcomes, attempt, options.max_restarts);
    switch (next) {
      case NextStep::kSucceed:
        if (attempt > 0) {
          report(fmt::format("c10drun: attempt {} succeeded, after {} restart{}", attempt, attempt,
                             attempt == 1 ? "" : "s"));
        }
        break;
      case NextStep::kStop:
        // This node's signal gives its own status; the other nodes' stop is a failure here.
        if (local != NodeOutcome::kStopped) {
          report(fmt::format("c10drun: attempt {} was stopped ({}); no restart", attempt, failure));
          status = kExitFailure;
        }
        break;
      case NextStep::kRestart:
      case NextStep::kFail:
        report(restart_line(attempt, options.max_restarts, failure, next));
        status = kExitFailure;
        break;
    }
    if (next == NextStep::kRestart) continue;
    if (sync != nullptr && local != NodeOutcome::kStopped) sync->leave(attempt);
    return status;
  }
}

}  // namespace c10d::inline v1::launcher
