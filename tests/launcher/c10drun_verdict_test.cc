// c10drun's flight recorder verdict, with real processes: three verdict_child ranks under
// c10drun --trace-dir (or C10D_TRACE_DIR), one of which goes wrong at all_reduce #3 of the world
// group: it skips it, calls broadcast instead, passes half the elements, sleeps past the 2 s op
// timeout, or is killed by SIGKILL; and a job that hangs under --hang-timeout. The launcher must
// print the verdict naming that rank and what it did, after its line naming the failed rank and
// before it stops the others (the sleeping rank's dump can only come from being asked first).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "../store/child_process.h"

namespace c10d::inline v1 {
namespace {

using test::ChildProcess;
using test::Clock;
using test::EnvChanges;

constexpr auto kRunDeadline = std::chrono::seconds(60);

struct Launch {
  test::ChildExit exit;
  std::string err;  // the launcher's own lines
  std::string description;
};

class C10drunVerdictTest : public ::testing::Test {
 protected:
  // Runs `c10drun --nproc-per-node 3 FLAGS... verdict_child SCENARIO VICTIM` to its end, with a
  // 2 s op timeout unless `env` says otherwise.
  Launch run(const std::vector<std::string>& flags, const std::string& scenario, int victim,
             EnvChanges env = {}) {
    const auto bin = test::build_dir();
    std::vector<std::string> argv = {(bin / "tools" / "c10drun").string(), "--nproc-per-node", "3",
                                     "--grace-period-ms", "3000"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.insert(argv.end(),
                {(bin / "tests" / "verdict_child").string(), scenario, std::to_string(victim)});
    for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                             "MASTER_ADDR", "MASTER_PORT", "C10D_STORE_EXTERNAL",
                             "C10D_STORE_TOKEN", "C10D_TRACE_DIR", "C10D_TRACE_BUFFER"}) {
      env.try_emplace(name, std::nullopt);
    }
    env.try_emplace("C10D_TIMEOUT_MS", "2000");
    ChildProcess launcher(argv, env, dir_.path(), scenario);
    Launch result;
    result.exit = launcher.wait(Clock::now() + kRunDeadline);
    result.err = launcher.err();
    result.description = launcher.describe();
    return result;
  }

  std::vector<std::string> trace_flag() const { return {"--trace-dir", traces().string()}; }
  std::filesystem::path traces() const { return dir_.path() / "traces"; }

  // The launcher failed the job and printed the verdict: after `failed` (its line naming the
  // failed rank, or the hang), before it sent SIGTERM; returns the verdict's lines.
  static std::string verdict_of(const Launch& r, const std::string& failed) {
    EXPECT_TRUE(r.exit.exited && r.exit.code == 1) << r.description;
    const auto failed_at = r.err.find(failed);
    const auto header = r.err.find("c10drun: the flight recorder's verdict (the dumps in ");
    const auto sigterm = r.err.find("c10drun: sending SIGTERM");
    EXPECT_NE(failed_at, std::string::npos) << "no '" << failed << "'\n" << r.description;
    EXPECT_NE(header, std::string::npos) << r.description;
    EXPECT_LT(failed_at, header) << r.description;
    if (sigterm != std::string::npos) {
      EXPECT_LT(header, sigterm) << r.description;
    }
    return header == std::string::npos ? std::string() : r.err.substr(header);
  }

  static void expect_line(const std::string& verdict, const std::string& line, const Launch& r) {
    EXPECT_NE(verdict.find("\nc10drun:   " + line), std::string::npos)
        << "no verdict line '" << line << "'\n"
        << r.description;
  }

  test::TempDir dir_;
};

TEST_F(C10drunVerdictTest, NamesTheRankThatSkippedACollective) {
  const Launch r = run(trace_flag(), "skip", 2);
  const std::string v = verdict_of(r, ") failed: exited with code 3");
  expect_line(v, "first collective not completed by every rank: all_reduce #3 of group world", r);
  // Rank 2 never failed: its dump is the one the launcher asked for.
  expect_line(v,
              "rank 2 never called all_reduce #3 of group world; its last op was all_reduce #2 "
              "(completed)",
              r);
  EXPECT_TRUE(std::filesystem::exists(traces() / "c10d_trace_rank_2.json"));
}

TEST_F(C10drunVerdictTest, NamesTheRankThatCalledAnotherCollective) {
  const Launch r = run(trace_flag(), "other", 2);
  const std::string v = verdict_of(r, ") failed: exited with code 3");
  expect_line(v, "rank 2 never called all_reduce #3 of group world; its last op was broadcast #3 (",
              r);
}

// C10D_TRACE_DIR in the launcher's environment does what --trace-dir does.
TEST_F(C10drunVerdictTest, NamesTheRankThatPassedAnotherSizeWithTheDirFromTheEnvironment) {
  const Launch r = run({}, "size", 1, {{"C10D_TRACE_DIR", traces().string()}});
  const std::string v = verdict_of(r, ") failed: exited with code 3");
  expect_line(v, "ranks 0,2 called all_reduce #3 of group world with 1024 float32; rank 1 with 512",
              r);
}

TEST_F(C10drunVerdictTest, NamesTheRankThatSleptPastTheTimeout) {
  const Launch r = run(trace_flag(), "sleep", 0);
  const std::string v = verdict_of(r, ") failed: exited with code 3");
  expect_line(v,
              "rank 0 never called all_reduce #3 of group world; its last op was all_reduce #2 "
              "(completed)",
              r);
}

TEST_F(C10drunVerdictTest, NamesTheRankKilledBySigkill) {
  const Launch r = run(trace_flag(), "kill", 2);
  const std::string v = verdict_of(r, ") failed: killed by signal 9 (SIGKILL)");
  EXPECT_NE(r.err.find("c10drun: rank 2 (pid "), std::string::npos) << r.description;
  expect_line(v, "first collective not completed by every rank: all_reduce #3 of group world", r);
  expect_line(v, "rank 2 left no dump: it was killed by signal 9 (SIGKILL)", r);
}

// No op times out (60 s) but none completes either: --hang-timeout ends the job after 2 s.
TEST_F(C10drunVerdictTest, AHangWithoutATimeoutEndsTheJobWithTheVerdict) {
  std::vector<std::string> flags = trace_flag();
  flags.insert(flags.end(), {"--hang-timeout", "2"});
  const auto started = Clock::now();
  const Launch r = run(flags, "sleep", 1, {{"C10D_TIMEOUT_MS", "60000"}});
  EXPECT_LT(Clock::now() - started, std::chrono::seconds(30)) << r.description;
  const std::string v =
      verdict_of(r,
                 "c10drun: no process completed an op for 2 s (9 ops before that): the job is "
                 "hung");
  expect_line(v,
              "rank 1 never called all_reduce #3 of group world; its last op was all_reduce #2 "
              "(completed)",
              r);
  expect_line(v, "ranks 0,2 called it: started, not completed", r);
}

// Without a trace directory the launcher neither asks for dumps nor gives a verdict.
TEST_F(C10drunVerdictTest, NoTraceDirectoryNoVerdict) {
  const Launch r = run({}, "size", 1);
  EXPECT_TRUE(r.exit.exited && r.exit.code == 1) << r.description;
  EXPECT_EQ(r.err.find("verdict"), std::string::npos) << r.description;
  EXPECT_FALSE(std::filesystem::exists(traces()));
}

}  // namespace
}  // namespace c10d::inline v1
