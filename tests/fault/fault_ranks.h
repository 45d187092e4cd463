// Test helpers for the fault tests whose ranks are real pg_fault_child processes
// (fault/pg_fault_child.cc): where the program is, a job of ranks meeting at a store server of the
// test's own, and waiting for a rank to stop at a fault point (core/fault_point.h).
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../store/child_process.h"
#include "store/tcp_store_server.h"

namespace c10d::inline v1::test {

// The program every rank of these tests runs.
inline std::string fault_child_path() {
  return (build_dir() / "tests" / "pg_fault_child").string();
}

// Whether the process is stopped (state T in /proc/<pid>/stat), as a rank told
// C10D_TEST_FAULT_AT=<step>:stop is once it reaches the step.
inline bool stopped(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const auto paren = line.rfind(')');
  return paren != std::string::npos && line.size() > paren + 2 && line[paren + 2] == 'T';
}

// Waits until `child` is stopped, it ends, or the deadline passes; returns whether it is stopped.
inline bool wait_until_stopped(ChildProcess& child, Clock::time_point deadline) {
  while (!stopped(child.pid()) && child.running() && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return stopped(child.pid());
}

// SIGKILLs every child and reaps it, as a launcher tearing down a failed job.
inline void kill_all(std::vector<std::unique_ptr<ChildProcess>>& children) {
  for (auto& child : children) child->send_signal(SIGKILL);
  for (auto& child : children) child->wait(Clock::now() + std::chrono::seconds(10));
}

// `n` ranks, each running pg_fault_child `args`, meeting by env:// at a store server of the
// test's own (C10D_STORE_EXTERNAL=1). A rank's environment is `extra`, then the job's own
// variables (a C10D_INIT_METHOD or C10D_TEST_FAULT_AT of the test's environment removed), then,
// for rank `victim` only, `victim_env`. Output files are named rank<r> in `dir`.
struct Ranks {
  TempDir dir;
  std::unique_ptr<TCPStoreServer> server;
  std::vector<std::unique_ptr<ChildProcess>> children;

  Ranks(int n, const std::vector<std::string>& args, const EnvChanges& extra = {}, int victim = -1,
        const EnvChanges& victim_env = {}) {
    server = std::make_unique<TCPStoreServer>(store::ServerOptions{});
    for (int r = 0; r < n; ++r) {
      EnvChanges env = extra;
      env["RANK"] = std::to_string(r);
      env["WORLD_SIZE"] = std::to_string(n);
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(server->port());
      env["C10D_STORE_EXTERNAL"] = "1";
      env["C10D_INIT_METHOD"] = std::nullopt;
      env["C10D_TEST_FAULT_AT"] = std::nullopt;
      if (r == victim) {
        for (const auto& [key, value] : victim_env) env[key] = value;
      }
      std::vector<std::string> argv{fault_child_path()};
      argv.insert(argv.end(), args.begin(), args.end());
      children.push_back(
          std::make_unique<ChildProcess>(argv, env, dir.path(), "rank" + std::to_string(r)));
    }
  }

  ChildProcess& rank(int r) { return *children[static_cast<std::size_t>(r)]; }
};

// Checks a job run with "kill <victim>" (rank `victim` SIGKILLs itself in the middle of an
// all_reduce): the victim dies by SIGKILL, and every other rank then exits 3 within 5 s,
// printing FAILED and naming the victim ("rank <victim>").
inline void expect_killed_rank_named_by_the_others(Ranks& ranks, int victim) {
  using namespace std::chrono_literals;
  const auto killed = ranks.rank(victim).wait(Clock::now() + 60s);
  ASSERT_FALSE(killed.exited) << ranks.rank(victim).describe();
  EXPECT_EQ(killed.signal, SIGKILL);
  const auto died = Clock::now();
  const std::string named = "rank " + std::to_string(victim);
  for (int r = 0; r < static_cast<int>(ranks.children.size()); ++r) {
    if (r == victim) continue;
    auto& child = ranks.rank(r);
    const auto exit = child.wait(died + 5s);
    EXPECT_FALSE(exit.timed_out) << "rank " << r << " still running 5 s after " << named << " died";
    EXPECT_EQ(exit.code, 3) << child.describe();
    const std::string out = child.out();
    EXPECT_NE(out.find("FAILED"), std::string::npos) << out;
    EXPECT_NE(out.find(named), std::string::npos) << "rank " << r << ": " << out;
  }
}

}  // namespace c10d::inline v1::test
