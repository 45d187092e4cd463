// c10drun --max-restarts, driven as a user would: real launchers starting launcher_child
// processes that fail in chosen attempts (C10D_RESTART_COUNT). Covers a failure followed by a
// successful restart, restarts that run out, the store generation of each attempt (a key an
// earlier attempt set is not seen), a stop signal (no restart), and two nodes' launchers
// restarting together after a failure on one of them.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../store/child_process.h"
#include "store/tcp_store_server.h"

namespace c10d::inline v1 {
namespace {

using test::ChildExit;
using test::ChildProcess;
using test::Clock;
using test::occurrences;

constexpr auto kDeadline = std::chrono::seconds(30);

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The pid in the first "c10drun: attempt A failed: rank R (pid P)" of `err`, or -1.
long failed_pid(const std::string& err, int attempt, int rank) {
  const std::string head = fmt::format("attempt {} failed: rank {} (pid ", attempt, rank);
  const std::size_t at = err.find(head);
  return at == std::string::npos ? -1 : std::stol(err.substr(at + head.size()));
}

class C10drunRestartTest : public ::testing::Test {
 protected:
  // Starts `c10drun FLAGS... launcher_child STEPS...`, its environment free of the test's.
  std::unique_ptr<ChildProcess> start(const std::vector<std::string>& flags,
                                      const std::vector<std::string>& steps) {
    std::vector<std::string> argv = {(test::build_dir() / "tools" / "c10drun").string()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back((test::build_dir() / "tests" / "launcher_child").string());
    argv.insert(argv.end(), steps.begin(), steps.end());
    test::EnvChanges env;
    for (const char* name : {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                             "C10D_STORE_EXTERNAL", "C10D_STORE_TOKEN", "C10D_RESTART_COUNT"}) {
      env[name] = std::nullopt;
    }
    return std::make_unique<ChildProcess>(argv, env, dir_.path(),
                                          "c10drun" + std::to_string(runs_++));
  }

  static ChildExit finish(ChildProcess& launched) {
    const ChildExit exit = launched.wait(Clock::now() + kDeadline);
    EXPECT_FALSE(exit.timed_out) << launched.describe();
    return exit;
  }

  test::TempDir dir_;
  int runs_ = 0;
};

TEST_F(C10drunRestartTest, FailedAttemptIsFollowedByARestartThatSucceeds) {
  auto launched = start({"--nproc-per-node", "2", "--max-restarts", "2"},
                        {"attempt", "barrier", "@1:#0:exit=3"});
  const ChildExit exit = finish(*launched);
  const std::string out = launched->out(), err = launched->err();
  EXPECT_EQ(exit.code, 0) << launched->describe();
  for (int rank = 0; rank < 2; ++rank) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      EXPECT_EQ(occurrences(out, fmt::format("[rank {}]: attempt {}\n", rank, attempt)), 1u) << out;
    }
    EXPECT_FALSE(contains(out, fmt::format("[rank {}]: attempt 2\n", rank))) << out;
  }
  const long pid = failed_pid(err, 0, 1);
  EXPECT_TRUE(contains(err, fmt::format("c10drun: attempt 0 failed: rank 1 (pid {}): exited with "
                                        "code 3; restarting the job (restart 1 of 2): attempt 1, "
                                        "C10D_RESTART_COUNT=1\n",
                                        pid)))
      << err;
  EXPECT_TRUE(contains(err, "c10drun: attempt 1 succeeded, after 1 restart\n")) << err;
}

TEST_F(C10drunRestartTest, EveryAttemptFailingEndsTheJobAfterKRestarts) {
  auto launched =
      start({"--nproc-per-node", "2", "--max-restarts", "2"}, {"attempt", "barrier", "@0:exit=4"});
  const ChildExit exit = finish(*launched);
  const std::string out = launched->out(), err = launched->err();
  EXPECT_EQ(exit.code, 1) << launched->describe();
  // K + 1 attempts, each reported; the last one says no restart is left.
  EXPECT_EQ(occurrences(out, "[rank 0]: attempt "), 3u) << out;
  EXPECT_TRUE(contains(out, "[rank 1]: attempt 2\n")) << out;
  EXPECT_EQ(occurrences(err, "; restarting the job (restart "), 2u) << err;
  EXPECT_TRUE(contains(err, "(restart 2 of 2): attempt 2, C10D_RESTART_COUNT=2\n")) << err;
  EXPECT_TRUE(contains(err, fmt::format("c10drun: attempt 2 failed: rank 0 (pid {}): exited with "
                                        "code 4; no restart left (--max-restarts 2)\n",
                                        failed_pid(err, 2, 0))))
      << err;
}

// Attempt 0 sets a key in the launcher's store (which lives on) and fails; attempt 1 looks for
// it and finds nothing, since every attempt has its own part of the store.
TEST_F(C10drunRestartTest, KeysOfAnEarlierAttemptAreNotSeen) {
  auto launched = start({"--nproc-per-node", "2", "--max-restarts", "1"},
                        {"@0:#0:set-key=stale", "@1:#0:wait-key=stale", "@1:#0:exit=3",
                         "#0:sleep=60000", "check-key=stale", "barrier"});
  const ChildExit exit = finish(*launched);
  const std::string out = launched->out();
  EXPECT_EQ(exit.code, 0) << launched->describe();
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_TRUE(contains(out, fmt::format("[rank {}]: key stale absent\n", rank))) << out;
    EXPECT_TRUE(contains(out, fmt::format("[rank {0}]: rank {0} of 2 passed the barrier", rank)))
        << out;
  }
  EXPECT_FALSE(contains(out, "present")) << out;
}

// The ranks' stall records of attempt 1 live in its part of the store; the launcher reads them
// there and names the rank they lead to, in its report and in the attempt's last line.
TEST_F(C10drunRestartTest, StallRecordsOfALaterAttemptNameTheCause) {
  auto launched = start({"--nproc-per-node", "3", "--max-restarts", "1"},
                        {"barrier", "@0:#0:exit=5", "#0:sleep=60000", "@0:stall=1:2",
                         "@1:wait-key=c10d/stalls", "@1:stall=2:2", "@1:exit=3", "sleep=60000"});
  const ChildExit exit = finish(*launched);
  const std::string err = launched->err();
  EXPECT_EQ(exit.code, 1) << launched->describe();
  const std::size_t restart = err.find("restarting the job (restart 1 of 1)");
  ASSERT_NE(restart, std::string::npos) << err;
  EXPECT_TRUE(contains(err.substr(restart),
                       ") is the cause: it made no progress; ranks 0, 1 "
                       "timed out waiting for it"))
      << err;
  EXPECT_TRUE(contains(err, ") made no progress; rank 1 (pid ")) << err;
  EXPECT_TRUE(contains(err, "): exited with code 3; no restart left (--max-restarts 1)\n")) << err;
}

TEST_F(C10drunRestartTest, StopSignalEndsTheJobWithoutARestart) {
  auto launched = start({"--nproc-per-node", "2", "--max-restarts", "3"},
                        {"report-signals", "ready", "sleep=60000"});
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (occurrences(launched->out(), "]: ready\n") < 2 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  launched->send_signal(SIGTERM);
  const ChildExit exit = finish(*launched);
  EXPECT_EQ(exit.code, 128 + SIGTERM) << launched->describe();
  EXPECT_EQ(occurrences(launched->out(), "]: ready\n"), 2u) << launched->describe();
  EXPECT_FALSE(contains(launched->err(), "restart")) << launched->err();
}

// Two launchers, one per node: rank 3 (node 1) fails in attempt 0 while node 0's ranks sleep.
// Node 1's failure stops node 0's attempt through the store, and both nodes start attempt 1,
// which succeeds; each launcher names the failure the same way.
TEST_F(C10drunRestartTest, TwoNodesRestartTogetherAfterAFailureOnOne) {
  std::uint16_t port = 0;
  {
    store::ServerOptions options;
    options.host = "127.0.0.1";
    TCPStoreServer probe(options);  // a port free just now
    port = probe.port();
  }
  const std::vector<std::string> steps = {"attempt", "barrier", "@3:#0:exit=3", "#0:sleep=60000"};
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(start({"--nnodes", "2", "--node-rank", std::to_string(node), "--nproc-per-node",
                           "2", "--master-port", std::to_string(port), "--max-restarts", "1"},
                          steps));
  }
  const auto started = Clock::now();
  for (int node = 0; node < 2; ++node) {
    ChildProcess& launched = *nodes[static_cast<std::size_t>(node)];
    const ChildExit exit = finish(launched);
    const std::string out = launched.out(), err = launched.err();
    EXPECT_EQ(exit.code, 0) << "node " << node << "\n" << launched.describe();
    for (int local = 0; local < 2; ++local) {
      const int rank = 2 * node + local;
      EXPECT_TRUE(contains(out, fmt::format("[rank {}]: attempt 1\n", rank))) << out;
      EXPECT_TRUE(contains(out, fmt::format("[rank {0}]: rank {0} of 4 passed the barrier", rank)))
          << out;
    }
    EXPECT_TRUE(contains(err, "c10drun: attempt 0 failed: node 1: rank 3 (pid ")) << err;
    EXPECT_TRUE(contains(err,
                         "): exited with code 3; restarting the job (restart 1 of 1): "
                         "attempt 1, C10D_RESTART_COUNT=1\n"))
        << err;
  }
  EXPECT_TRUE(contains(nodes[0]->err(), "c10drun: stopping this node's processes: node 1: rank 3"))
      << nodes[0]->err();
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(20)) << "node 0 slept out its ranks";
}

}  // namespace
}  // namespace c10d::inline v1
