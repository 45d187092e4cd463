// c10drun driven as a user would: real launcher processes starting real children
// (launcher_child), checked by what the launcher prints and how it exits. Covers the rank
// variables, the line prefixes, rendezvous through the launcher's store (closed by a token of
// its own unless one is given), the stop on the first failure (SIGTERM, then SIGKILL after the
// grace period), signal forwarding and usage errors.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/types.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../store/child_process.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "launcher/cpu_binding.h"
#include "store/tcp_store_server.h"

namespace c10d::inline v1 {
namespace {

using test::ChildExit;
using test::ChildProcess;
using test::Clock;
using test::EnvChanges;
using test::occurrences;

constexpr auto kRunDeadline = std::chrono::seconds(15);

struct LaunchResult {
  ChildExit exit;
  std::string out;
  std::string err;
  Clock::duration elapsed{};
  std::string description;
};

// "[rank R]: body", split.
struct RankLine {
  int rank = -1;
  std::string body;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::optional<RankLine> parse_rank_line(const std::string& line) {
  constexpr std::string_view kOpen = "[rank ";
  const std::size_t close = line.find("]: ");
  if (line.rfind(kOpen, 0) != 0 || close == std::string::npos) return std::nullopt;
  RankLine parsed;
  try {
    parsed.rank = std::stoi(line.substr(kOpen.size(), close - kOpen.size()));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  parsed.body = line.substr(close + 3);
  return parsed;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The value of "C10D_STORE_TOKEN=" in the first "env" line of `out`.
std::string token_in(const std::string& out) {
  const std::string key = "C10D_STORE_TOKEN=";
  const std::size_t at = out.find(key);
  if (at == std::string::npos) return {};
  const std::size_t from = at + key.size();
  return out.substr(from, out.find('\n', from) - from);
}

// The port in the first "MASTER_PORT=" of `out`.
std::uint16_t port_in(const std::string& out) {
  const std::string key = "MASTER_PORT=";
  return static_cast<std::uint16_t>(std::stoi(out.substr(out.find(key) + key.size())));
}

// The pid in "c10drun: rank R (pid P) <verb>", or -1.
pid_t pid_in_report(const std::string& err, int rank, const std::string& verb) {
  const std::string head = "c10drun: rank " + std::to_string(rank) + " (pid ";
  for (const std::string& line : lines_of(err)) {
    if (line.rfind(head, 0) != 0 || !contains(line, ") " + verb + ": ")) continue;
    return static_cast<pid_t>(std::stol(line.substr(head.size())));
  }
  return -1;
}

class C10drunTest : public ::testing::Test {
 protected:
  static std::string launcher() { return (test::build_dir() / "tools" / "c10drun").string(); }
  static std::string child_program() {
    return (test::build_dir() / "tests" / "launcher_child").string();
  }

  // Nothing from the test's own environment may steer the launcher or its children.
  static EnvChanges clean_env(const EnvChanges& extra = {}) {
    EnvChanges env = {{"RANK", std::nullopt},
                      {"LOCAL_RANK", std::nullopt},
                      {"WORLD_SIZE", std::nullopt},
                      {"LOCAL_WORLD_SIZE", std::nullopt},
                      {"GROUP_RANK", std::nullopt},
                      {"MASTER_ADDR", std::nullopt},
                      {"MASTER_PORT", std::nullopt},
                      {"OMPI_COMM_WORLD_RANK", std::nullopt},
                      {"OMPI_COMM_WORLD_SIZE", std::nullopt},
                      {"C10D_STORE_EXTERNAL", std::nullopt},
                      {"C10D_STORE_TOKEN", std::nullopt}};
    for (const auto& [key, value] : extra) env[key] = value;
    return env;
  }

  // Starts `c10drun FLAGS... launcher_child STEPS...`.
  std::unique_ptr<ChildProcess> start(const std::vector<std::string>& flags,
                                      const std::vector<std::string>& steps,
                                      const EnvChanges& env = {}) {
    std::vector<std::string> argv = {launcher()};
    argv.insert(argv.end(), flags.begin(), flags.end());
    argv.push_back(child_program());
    argv.insert(argv.end(), steps.begin(), steps.end());
    return start_argv(argv, env);
  }

  std::unique_ptr<ChildProcess> start_argv(const std::vector<std::string>& argv,
                                           const EnvChanges& env = {}) {
    EXPECT_TRUE(std::filesystem::exists(launcher())) << launcher() << " is not built";
    EXPECT_TRUE(std::filesystem::exists(child_program())) << child_program() << " is not built";
    started_ = Clock::now();
    return std::make_unique<ChildProcess>(argv, clean_env(env), dir_.path(),
                                          "c10drun" + std::to_string(runs_++));
  }

  LaunchResult finish(ChildProcess& launched) {
    LaunchResult result;
    result.exit = launched.wait(Clock::now() + kRunDeadline);
    result.elapsed = Clock::now() - started_;
    result.out = launched.out();
    result.err = launched.err();
    result.description = launched.describe();
    return result;
  }

  // Runs `c10drun FLAGS... launcher_child STEPS...` to its end.
  LaunchResult run(const std::vector<std::string>& flags, const std::vector<std::string>& steps,
                   const EnvChanges& env = {}) {
    return finish(*start(flags, steps, env));
  }

  // Waits until the launcher's stdout holds `count` lines "[rank R]: <body>".
  static void wait_for_lines(ChildProcess& launched, const std::string& body, std::size_t count) {
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (occurrences(launched.out(), "]: " + body + "\n") < count) {
      ASSERT_TRUE(launched.running()) << launched.describe();
      ASSERT_LT(Clock::now(), deadline) << "waiting for '" << body << "'\n" << launched.describe();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }

  static void expect_exit(const LaunchResult& result, int code) {
    EXPECT_TRUE(result.exit.exited && result.exit.code == code) << "expected exit " << code << "\n"
                                                                << result.description;
  }

  // Every child reaped by the launcher is gone (and the launcher has exited).
  static void expect_gone(pid_t pid) {
    ASSERT_GT(pid, 0);
    EXPECT_EQ(::kill(pid, 0), -1) << "pid " << pid << " still exists";
    EXPECT_EQ(errno, ESRCH);
  }

  static void expect_usage_error(const LaunchResult& result, const std::string& named) {
    expect_exit(result, 2);
    const std::string first_line = result.err.substr(0, result.err.find('\n'));
    EXPECT_EQ(first_line.rfind("c10drun: ", 0), 0u) << first_line;
    EXPECT_TRUE(contains(first_line, named)) << "'" << named << "' not in: " << first_line;
    EXPECT_TRUE(contains(result.err, "usage:")) << result.description;
  }

  test::TempDir dir_;
  Clock::time_point started_;
  int runs_ = 0;
};

TEST_F(C10drunTest, SetsRankVariablesForEveryLocalProcess) {
  const LaunchResult result = run({"--nproc-per-node", "3"}, {"env"});
  expect_exit(result, 0);
  const std::vector<std::string> lines = lines_of(result.out);
  ASSERT_EQ(lines.size(), 3u) << result.description;
  const std::string port_key = "MASTER_PORT=";
  const std::size_t port_at = result.out.find(port_key) + port_key.size();
  const std::string port = result.out.substr(port_at, result.out.find(' ', port_at) - port_at);
  EXPECT_GT(std::stoi(port), 0) << "the store's real port, not 0";
  // No token given: the launcher made one up for its store (32 random bytes in hex).
  const std::string token = token_in(result.out);
  EXPECT_EQ(token.size(), 64u) << result.out;
  EXPECT_EQ(token.find_first_not_of("0123456789abcdef"), std::string::npos) << token;
  for (int rank = 0; rank < 3; ++rank) {
    const std::string expected = fmt::format(
        "[rank {0}]: env RANK={0} LOCAL_RANK={0} WORLD_SIZE=3 LOCAL_WORLD_SIZE=3 "
        "GROUP_RANK=0 MASTER_ADDR=127.0.0.1 MASTER_PORT={1} C10D_STORE_EXTERNAL=1 "
        "C10D_STORE_TOKEN={2}",
        rank, port, token);
    EXPECT_EQ(occurrences(result.out, expected + "\n"), 1u) << expected << "\n"
                                                            << result.description;
  }
  EXPECT_EQ(result.err, "");
}

TEST_F(C10drunTest, SecondNodeGetsGlobalRanksAndJoinsTheMastersStore) {
  // The test plays node 0: it hosts the store and stands for ranks 0 and 1 at the barrier.
  store::ServerOptions server_options;
  server_options.host = "127.0.0.1";
  TCPStoreServer server(server_options);
  const std::string port = std::to_string(server.port());
  TCPStoreOptions client_options;
  client_options.port = server.port();
  client_options.timeout = Milliseconds(5000);
  TCPStore node0(client_options);
  node0.add("launcher_child/arrived", 2);

  const LaunchResult result = run({"--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "2",
                                   "--master-addr", "127.0.0.1", "--master-port", port},
                                  {"env", "barrier"});
  expect_exit(result, 0);
  for (int local_rank = 0; local_rank < 2; ++local_rank) {
    const int rank = 2 + local_rank;
    const std::string env = fmt::format(
        "[rank {0}]: env RANK={0} LOCAL_RANK={1} WORLD_SIZE=4 LOCAL_WORLD_SIZE=2 GROUP_RANK=1 "
        "MASTER_ADDR=127.0.0.1 MASTER_PORT={2} C10D_STORE_EXTERNAL=1 C10D_STORE_TOKEN=-\n",
        rank, local_rank, port);
    EXPECT_TRUE(contains(result.out, env)) << env << result.description;
    const std::string passed = fmt::format("[rank {0}]: rank {0} of 4 passed the barrier\n", rank);
    EXPECT_TRUE(contains(result.out, passed)) << passed << result.description;
  }
  EXPECT_EQ(node0.get_string("launcher_child/open"), "1");
  // No token on several nodes: the job is open, and the launcher says so, once.
  EXPECT_EQ(occurrences(result.err, "c10drun: warning: C10D_STORE_TOKEN is not set"), 1u)
      << result.err;
  EXPECT_TRUE(contains(result.err, "set C10D_STORE_TOKEN to the same secret on every node"))
      << result.err;
}

TEST_F(C10drunTest, EveryRankMeetsTheOthersInTheLaunchersStore) {
  const LaunchResult result = run({"--nproc-per-node", "4"}, {"barrier"});
  expect_exit(result, 0);
  for (int rank = 0; rank < 4; ++rank) {
    const std::string passed = fmt::format("[rank {0}]: rank {0} of 4 passed the barrier\n", rank);
    EXPECT_TRUE(contains(result.out, passed)) << passed << result.description;
  }
}

TEST_F(C10drunTest, PrefixesEveryLineWithItsRankAndNeverSplitsOne) {
  constexpr int kRanks = 4;
  constexpr int kLines = 300;
  const LaunchResult result = run({"--nproc-per-node", std::to_string(kRanks)},
                                  {"lines=" + std::to_string(kLines), "tail"});
  expect_exit(result, 0);

  // Each stream holds, for every rank and in order, exactly the lines that rank wrote to it;
  // the partial "tail" line comes last, completed with a newline.
  for (const auto& [text, tag] : {std::pair{result.out, "out"}, std::pair{result.err, "err"}}) {
    std::vector<int> next(kRanks, 0);
    std::vector<bool> tail_seen(kRanks, false);
    for (const std::string& line : lines_of(text)) {
      const std::optional<RankLine> parsed = parse_rank_line(line);
      ASSERT_TRUE(parsed && parsed->rank >= 0 && parsed->rank < kRanks) << "bad line: " << line;
      const int rank = parsed->rank;
      ASSERT_FALSE(tail_seen[static_cast<std::size_t>(rank)]) << "line after the tail: " << line;
      if (parsed->body == fmt::format("tail {}", rank)) {
        tail_seen[static_cast<std::size_t>(rank)] = true;
        continue;
      }
      int& i = next[static_cast<std::size_t>(rank)];
      const std::string expected = fmt::format(
          "{} {} {} {}", tag, rank, i, std::string(static_cast<std::size_t>(10 + i % 50), 'x'));
      ASSERT_EQ(parsed->body, expected) << "in the launcher's std" << tag;
      ++i;
    }
    for (int rank = 0; rank < kRanks; ++rank) {
      EXPECT_EQ(next[static_cast<std::size_t>(rank)], kLines) << tag << " of rank " << rank;
      EXPECT_EQ(tail_seen[static_cast<std::size_t>(rank)], std::string(tag) == "out") << rank;
    }
  }
  EXPECT_EQ(result.out.back(), '\n');
}

TEST_F(C10drunTest, StoreTokenPassesThroughAndGuardsTheHostedStore) {
  auto launched = start({"--nproc-per-node", "2"}, {"env", "barrier", "ready", "wait-key=test/go"},
                        {{"C10D_STORE_TOKEN", "s3cret"}});
  ASSERT_NO_FATAL_FAILURE(wait_for_lines(*launched, "ready", 2));
  const std::string out = launched->out();
  EXPECT_TRUE(contains(out, "C10D_STORE_EXTERNAL=1 C10D_STORE_TOKEN=s3cret\n")) << out;
  const std::string port_key = "MASTER_PORT=";
  const std::size_t port_at = out.find(port_key) + port_key.size();
  TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(std::stoi(out.substr(port_at)));
  options.timeout = Milliseconds(5000);
  EXPECT_THROW(TCPStore{options}.num_keys(), StoreError) << "a client without the token";
  options.token = "s3cret";
  TCPStore with_token(options);
  with_token.set("test/go", std::string_view("1"));  // lets the ranks finish
  const LaunchResult result = finish(*launched);
  expect_exit(result, 0);
}

// With one node and no token, the launcher's store is still closed: its processes get the
// token it made up, and a client without it is refused.
TEST_F(C10drunTest, HandsItsProcessesATokenOfItsOwnByDefault) {
  auto launched = start({"--nproc-per-node", "2"}, {"env", "barrier", "ready", "wait-key=test/go"});
  ASSERT_NO_FATAL_FAILURE(wait_for_lines(*launched, "ready", 2));
  const std::string out = launched->out();
  const std::string token = token_in(out);
  ASSERT_EQ(token.size(), 64u) << out;
  TCPStoreOptions options;
  options.port = port_in(out);
  options.timeout = Milliseconds(5000);
  EXPECT_THROW(TCPStore{options}.num_keys(), StoreError) << "a client without the token";
  options.token = token;
  TCPStore with_token(options);
  with_token.set("test/go", std::string_view("1"));  // lets the ranks finish
  const LaunchResult result = finish(*launched);
  expect_exit(result, 0);
  EXPECT_FALSE(contains(result.err, "warning")) << result.err;
}

// An empty token would turn authentication off: refused, before anything starts.
TEST_F(C10drunTest, AnEmptyTokenIsRefused) {
  const LaunchResult result = run({"--nproc-per-node", "2"}, {"env"}, {{"C10D_STORE_TOKEN", ""}});
  expect_exit(result, 1);
  EXPECT_EQ(result.err.rfind("c10drun: C10D_STORE_TOKEN is empty: an empty token would turn "
                             "authentication off",
                             0),
            0u)
      << result.err;
  EXPECT_EQ(result.out, "");
}

TEST_F(C10drunTest, FirstFailureStopsTheOthersAndIsReportedAsTheCause) {
  const LaunchResult result = run({"--nproc-per-node", "3", "--grace-period-ms", "4000"},
                                  {"barrier", "@1:exit=3", "sleep=60000"});
  expect_exit(result, 1);
  EXPECT_LT(result.elapsed, std::chrono::seconds(3)) << "SIGTERM should stop the sleepers at once";
  EXPECT_EQ(occurrences(result.err, "failed: "), 1u) << result.err;
  const pid_t failed = pid_in_report(result.err, 1, "failed");
  EXPECT_TRUE(contains(
      result.err, fmt::format("c10drun: rank 1 (pid {}) failed: exited with code 3\n", failed)))
      << result.err;
  for (int rank : {0, 2}) {
    const pid_t pid = pid_in_report(result.err, rank, "stopped");
    EXPECT_TRUE(
        contains(result.err, fmt::format("c10drun: rank {} (pid {}) stopped: killed by signal 15 "
                                         "(SIGTERM)\n",
                                         rank, pid)))
        << result.err;
    expect_gone(pid);
  }
}

// Rank 1 fails, but only after rank 2 stopped (SIGSTOP): the launcher reports rank 2 as the
// cause, and resumes it after the SIGTERM so that it ends well within the grace period.
TEST_F(C10drunTest, StoppedProcessIsReportedAsTheCauseRatherThanTheFirstToFail) {
  const LaunchResult result =
      run({"--nproc-per-node", "3", "--grace-period-ms", "8000"},
          {"barrier", "@2:stop", "@1:sleep=300", "@1:exit=3", "sleep=60000"});
  expect_exit(result, 1);
  EXPECT_LT(result.elapsed, std::chrono::seconds(4)) << "SIGCONT should let SIGTERM stop rank 2";
  const pid_t stopped = pid_in_report(result.err, 2, "is the cause");
  EXPECT_TRUE(contains(result.err, fmt::format("c10drun: rank 2 (pid {}) is the cause: it was "
                                               "stopped (state T) and made no progress\n",
                                               stopped)))
      << result.err;
  const pid_t failed = pid_in_report(result.err, 1, "failed");
  EXPECT_TRUE(contains(result.err, fmt::format("c10drun: rank 1 (pid {}) failed: exited with code "
                                               "3, after rank 2 made no progress\n",
                                               failed)))
      << result.err;
  expect_gone(stopped);
}

// Nobody is stopped, but the ranks' stall records say their waits led to rank 2 (busy, or
// stuck in a loop): the launcher reports it, with the ranks that timed out waiting for it.
TEST_F(C10drunTest, RankTheStallRecordsNameIsReportedAsTheCause) {
  const LaunchResult result =
      run({"--nproc-per-node", "3"}, {"barrier", "@0:stall=1:2", "@1:wait-key=c10d/stalls",
                                      "@1:stall=2:2", "@1:exit=3", "sleep=60000"});
  expect_exit(result, 1);
  const pid_t named = pid_in_report(result.err, 2, "is the cause");
  EXPECT_TRUE(contains(result.err,
                       fmt::format("c10drun: rank 2 (pid {}) is the cause: it made no progress; "
                                   "ranks 0, 1 timed out waiting for it",
                                   named)))
      << result.err;
  EXPECT_TRUE(contains(result.err, "after rank 2 made no progress")) << result.err;
  expect_gone(named);
}

TEST_F(C10drunTest, ProcessesThatIgnoreSigtermGetSigkillAfterTheGracePeriod) {
  const LaunchResult result = run({"--nproc-per-node", "2", "--grace-period-ms", "500"},
                                  {"ignore-term", "barrier", "@1:exit=3", "sleep=60000"});
  expect_exit(result, 1);
  EXPECT_GE(result.elapsed, std::chrono::milliseconds(500));
  EXPECT_LT(result.elapsed, std::chrono::seconds(5));
  EXPECT_TRUE(contains(result.err, "failed: exited with code 3\n")) << result.err;
  const pid_t pid = pid_in_report(result.err, 0, "stopped");
  EXPECT_TRUE(contains(result.err, "still running after the 500 ms grace period; sending SIGKILL"))
      << result.err;
  EXPECT_TRUE(contains(result.err, fmt::format("c10drun: rank 0 (pid {}) stopped: killed by signal "
                                               "9 (SIGKILL)\n",
                                               pid)))
      << result.err;
  expect_gone(pid);
}

TEST_F(C10drunTest, ChildKilledBySignalIsReportedByTheSignalsName) {
  const LaunchResult result =
      run({"--nproc-per-node", "2"}, {"barrier", "@0:kill=9", "sleep=60000"});
  expect_exit(result, 1);
  const pid_t pid = pid_in_report(result.err, 0, "failed");
  EXPECT_TRUE(
      contains(result.err,
               fmt::format("c10drun: rank 0 (pid {}) failed: killed by signal 9 (SIGKILL)\n", pid)))
      << result.err;
  EXPECT_TRUE(contains(result.err, "c10drun: rank 1 (pid ")) << result.err;
}

class C10drunSignalTest : public C10drunTest, public ::testing::WithParamInterface<int> {};

TEST_P(C10drunSignalTest, ForwardsTheSignalToEveryProcessAndExitsNonZero) {
  const int signal = GetParam();
  const std::string name = signal == SIGINT ? "SIGINT" : "SIGTERM";
  auto launched = start({"--nproc-per-node", "3"}, {"report-signals", "ready", "sleep=60000"});
  ASSERT_NO_FATAL_FAILURE(wait_for_lines(*launched, "ready", 3));
  launched->send_signal(signal);
  const LaunchResult result = finish(*launched);
  expect_exit(result, 128 + signal);
  EXPECT_LT(result.elapsed, std::chrono::seconds(4));
  for (int rank = 0; rank < 3; ++rank) {
    const std::string got = fmt::format("[rank {}]: got {}\n", rank, name);
    EXPECT_TRUE(contains(result.out, got)) << got << result.description;
  }
  EXPECT_TRUE(contains(result.err,
                       "c10drun: received " + name + "; forwarding it to 3 running processes\n"))
      << result.err;
}

INSTANTIATE_TEST_SUITE_P(StopSignals, C10drunSignalTest, ::testing::Values(SIGTERM, SIGINT),
                         [](const ::testing::TestParamInfo<int>& param) {
                           return std::string(param.param == SIGINT ? "Sigint" : "Sigterm");
                         });

TEST_F(C10drunTest, FindsTheProgramThroughPath) {
  const char* path = std::getenv("PATH");
  const std::string dirs =
      (test::build_dir() / "tests").string() + (path != nullptr ? std::string(":") + path : "");
  auto launched = start_argv({launcher(), "launcher_child", "env"}, {{"PATH", dirs}});
  const LaunchResult result = finish(*launched);
  expect_exit(result, 0);
  EXPECT_TRUE(contains(result.out, "[rank 0]: env RANK=0 LOCAL_RANK=0 WORLD_SIZE=1 "))
      << result.description;
}

TEST_F(C10drunTest, ProgramThatCannotRunExits127InItsChild) {
  auto launched = start_argv({launcher(), "--nproc-per-node", "2", "c10drun-test-no-such-program"});
  const LaunchResult result = finish(*launched);
  expect_exit(result, 1);
  EXPECT_TRUE(contains(result.err,
                       "]: c10drun: cannot run 'c10drun-test-no-such-program': No such file or "
                       "directory\n"))
      << result.err;
  EXPECT_TRUE(contains(result.err, "failed: exited with code 127\n")) << result.err;
}

// Each rank's CPUs from the "cpus RANK C1,C2,..." lines of `out` (launcher_child's cpus step).
std::map<int, std::vector<int>> cpus_by_rank(const std::string& out) {
  std::map<int, std::vector<int>> by_rank;
  for (const std::string& line : lines_of(out)) {
    std::istringstream in(line.substr(line.find("]: ") + 3));
    std::string word;
    std::string list;
    int rank = -1;
    in >> word >> rank >> list;
    if (word != "cpus") continue;
    std::istringstream items(list);
    for (std::string item; std::getline(items, item, ',');)
      by_rank[rank].push_back(std::stoi(item));
  }
  return by_rank;
}

TEST_F(C10drunTest, BindsEachProcessToItsShareOfTheLaunchersCpus) {
  // This process's CPUs, which the launcher inherits (c10drun_unit_test checks allowed_cpus).
  const std::vector<int> mine = launcher::allowed_cpus();
  ASSERT_FALSE(mine.empty());
  {
    const LaunchResult result = run({"--nproc-per-node", "2"}, {"cpus"});
    expect_exit(result, 0);
    const auto cpus = cpus_by_rank(result.out);
    ASSERT_EQ(cpus.size(), 2u) << result.description;
    if (mine.size() < 2) {
      // More processes than CPUs: one CPU each in turn, here the only one.
      EXPECT_EQ(cpus.at(0), mine);
      EXPECT_EQ(cpus.at(1), mine);
    } else {
      // Disjoint contiguous shares that together are the launcher's CPUs.
      ASSERT_FALSE(cpus.at(0).empty());
      ASSERT_FALSE(cpus.at(1).empty());
      EXPECT_LT(cpus.at(0).back(), cpus.at(1).front());
      std::vector<int> both = cpus.at(0);
      both.insert(both.end(), cpus.at(1).begin(), cpus.at(1).end());
      EXPECT_EQ(both, mine) << result.description;
    }
  }
  {
    const LaunchResult result = run({"--nproc-per-node", "3", "--bind-to", "core"}, {"cpus"});
    expect_exit(result, 0);
    const auto cpus = cpus_by_rank(result.out);
    ASSERT_EQ(cpus.size(), 3u) << result.description;
    for (int rank = 0; rank < 3; ++rank) {
      EXPECT_EQ(cpus.at(rank), std::vector<int>{mine[static_cast<std::size_t>(rank) % mine.size()]})
          << "rank " << rank << "\n"
          << result.description;
    }
  }
  {
    const LaunchResult result = run({"--nproc-per-node", "2", "--bind-to=none"}, {"cpus"});
    expect_exit(result, 0);
    const auto cpus = cpus_by_rank(result.out);
    ASSERT_EQ(cpus.size(), 2u) << result.description;
    EXPECT_EQ(cpus.at(0), mine);
    EXPECT_EQ(cpus.at(1), mine);
  }
}

TEST_F(C10drunTest, HelpPrintsTheUsageAndRunsNothing) {
  const LaunchResult result = finish(*start_argv({launcher(), "--help"}));
  expect_exit(result, 0);
  EXPECT_EQ(result.out.rfind("usage:", 0), 0u) << result.out;
}

TEST_F(C10drunTest, UsageErrorsExitTwoAndNameTheFlag) {
  const std::string program = child_program();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "missing the program"},
      {{"--nproc-per-node", "0", program}, "--nproc-per-node 0 is out of range"},
      {{"--nproc-per-node", "three", program}, "--nproc-per-node 'three' is not an integer"},
      {{"--nproc-per-node"}, "--nproc-per-node needs a value"},
      {{"--nnodes", "2", "--node-rank", "2", "--master-port", "1234", program}, "--node-rank 2"},
      {{"--nnodes", "2", program}, "--master-port is required"},
      {{"--master-port", "70000", program}, "--master-port 70000 is out of range"},
      {{"--grace-period-ms", "-5", program}, "--grace-period-ms -5 is out of range"},
      {{"--bind-to", "socket", program}, "--bind-to 'socket'"},
      {{"--bogus", program}, "unknown flag '--bogus'"},
  };
  for (const auto& [args, named] : cases) {
    std::vector<std::string> argv = {launcher()};
    argv.insert(argv.end(), args.begin(), args.end());
    SCOPED_TRACE(named);
    expect_usage_error(finish(*start_argv(argv)), named);
  }
}

}  // namespace
}  // namespace c10d::inline v1
