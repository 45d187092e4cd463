// The launcher's pure parts, in-process: its command line (launch_options.h), the cutting of
// child output into prefixed lines (line_prefixer.h), the choice of the rank to blame
// (blame.h), what follows a failed attempt (restarts.h) and the CPUs of each rank
// (cpu_binding.h).
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "launcher/blame.h"
#include "launcher/cpu_binding.h"
#include "launcher/launch_options.h"
#include "launcher/line_prefixer.h"
#include "launcher/restarts.h"

namespace c10d::inline v1::launcher {
namespace {

LaunchOptions parse(const std::vector<std::string>& args) { return parse_launch_options(args); }

// The UsageError's message for `args`, or "" when they parse.
std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(LaunchOptionsTest, DefaultsToOneProcessOnOneNodeWithAFreePort) {
  const LaunchOptions options = parse({"train", "--lr", "0.1"});
  EXPECT_EQ(options.nproc_per_node, 1);
  EXPECT_EQ(options.nnodes, 1);
  EXPECT_EQ(options.node_rank, 0);
  EXPECT_EQ(options.master_addr, "127.0.0.1");
  EXPECT_FALSE(options.master_port.has_value());
  EXPECT_EQ(options.grace_period, Milliseconds(5000));
  EXPECT_EQ(options.program, (std::vector<std::string>{"train", "--lr", "0.1"}));
  EXPECT_TRUE(options.hosts_store());
}

TEST(LaunchOptionsTest, FlagsStopAtTheProgramAndItsFlagsPassThrough) {
  const LaunchOptions options = parse({"--nproc-per-node", "2", "prog", "--nnodes", "5", "--help"});
  EXPECT_EQ(options.nproc_per_node, 2);
  EXPECT_EQ(options.nnodes, 1);
  EXPECT_FALSE(options.help);
  EXPECT_EQ(options.program, (std::vector<std::string>{"prog", "--nnodes", "5", "--help"}));
}

TEST(LaunchOptionsTest, DoubleDashEndsTheFlags) {
  const LaunchOptions options = parse({"--nproc-per-node=2", "--", "--odd-program", "x"});
  EXPECT_EQ(options.program, (std::vector<std::string>{"--odd-program", "x"}));
}

TEST(LaunchOptionsTest, AcceptsEqualsAndTorchrunUnderscoreSpellings) {
  const LaunchOptions options =
      parse({"--nproc_per_node=4", "--nnodes", "3", "--node_rank=2", "--master_addr", "10.0.0.1",
             "--master-port=29500", "--grace-period-ms", "100", "prog"});
  EXPECT_EQ(options.nproc_per_node, 4);
  EXPECT_EQ(options.nnodes, 3);
  EXPECT_EQ(options.node_rank, 2);
  EXPECT_EQ(options.master_addr, "10.0.0.1");
  EXPECT_EQ(options.master_port, 29500);
  EXPECT_EQ(options.grace_period, Milliseconds(100));
  EXPECT_FALSE(options.hosts_store());
  EXPECT_EQ(options.world_size(), 12);
  EXPECT_EQ(options.global_rank(0), 8);
  EXPECT_EQ(options.global_rank(3), 11);
}

TEST(LaunchOptionsTest, HelpAnywhereAmongTheFlagsWins) {
  EXPECT_TRUE(parse({"--nproc-per-node", "2", "--help"}).help);
  EXPECT_TRUE(parse({"-h"}).help);
  EXPECT_NE(launch_usage().find("usage:"), std::string_view::npos);
}

TEST(LaunchOptionsTest, BadCommandLinesNameTheFlag) {
  EXPECT_EQ(usage_error({}), "missing the program to run");
  EXPECT_EQ(usage_error({"--nproc-per-node", "2"}), "missing the program to run");
  EXPECT_EQ(usage_error({"--nproc-per-node", "0", "p"}),
            "--nproc-per-node 0 is out of range [1, 4096]");
  EXPECT_EQ(usage_error({"--nproc-per-node", "2x", "p"}),
            "--nproc-per-node '2x' is not an integer in [1, 4096]");
  EXPECT_EQ(usage_error({"--nproc-per-node", "", "p"}),
            "--nproc-per-node is empty, not a number in [1, 4096]");
  EXPECT_EQ(usage_error({"--nnodes", "99999999999999999999", "p"}),
            "--nnodes '99999999999999999999' is out of range [1, 100000]");
  EXPECT_EQ(usage_error({"--nnodes", "2", "--node-rank", "2", "--master-port", "1", "p"}),
            "--node-rank 2 is out of range [0, 1] for --nnodes 2");
  EXPECT_EQ(usage_error({"--node-rank", "1", "p"}),
            "--node-rank 1 is out of range [0, 0] for --nnodes 1");
  EXPECT_NE(usage_error({"--nnodes", "2", "p"}).find("--master-port is required"),
            std::string::npos);
  EXPECT_NE(usage_error({"--nnodes", "2", "--master-port", "0", "p"}).find("--master-port 0"),
            std::string::npos);
  EXPECT_EQ(usage_error({"--master-port", "65536", "p"}),
            "--master-port 65536 is out of range [0, 65535]");
  EXPECT_EQ(usage_error({"--master-addr=", "p"}), "--master-addr is empty");
  EXPECT_EQ(usage_error({"--grace-period-ms", "-1", "p"}),
            "--grace-period-ms -1 is out of range [0, 86400000]");
  EXPECT_EQ(usage_error({"--bogus", "p"}), "unknown flag '--bogus'");
  EXPECT_EQ(usage_error({"--bogus=1", "p"}), "unknown flag '--bogus'");
  EXPECT_EQ(usage_error({"-x", "p"}), "unknown flag '-x'");
  EXPECT_EQ(usage_error({"--nnodes"}), "--nnodes needs a value");
  EXPECT_EQ(usage_error({"--nnodes", "1", "--nnodes=1", "p"}), "--nnodes is given twice");
  EXPECT_EQ(usage_error({"--max-restarts", "-1", "p"}),
            "--max-restarts -1 is out of range [0, 1000000]");
}

TEST(LaunchOptionsTest, BindToDefaultsToAutoAndNamesABadValue) {
  EXPECT_EQ(parse({"p"}).bind_to, CpuBinding::kAuto);
  EXPECT_EQ(parse({"--bind-to", "core", "p"}).bind_to, CpuBinding::kCore);
  EXPECT_EQ(parse({"--bind_to=none", "p"}).bind_to, CpuBinding::kNone);
  EXPECT_EQ(parse({"--bind-to", "auto", "p"}).bind_to, CpuBinding::kAuto);
  EXPECT_EQ(usage_error({"--bind-to", "socket", "p"}),
            "--bind-to 'socket': expected auto, core or none");
  EXPECT_EQ(usage_error({"--bind-to", "", "p"}), "--bind-to '': expected auto, core or none");
}

using Cpus = std::vector<std::vector<int>>;

TEST(CpuBindingTest, AutoSplitsTheCpusIntoEqualContiguousShares) {
  EXPECT_EQ(rank_cpus(CpuBinding::kAuto, 2, {0, 1}), (Cpus{{0}, {1}}));
  EXPECT_EQ(rank_cpus(CpuBinding::kAuto, 1, {0, 1}), (Cpus{{0, 1}}));
  EXPECT_EQ(rank_cpus(CpuBinding::kAuto, 3, {0, 1, 2, 3, 4, 5, 6, 7}),
            (Cpus{{0, 1}, {2, 3, 4}, {5, 6, 7}}));
  // The launcher's own CPUs, not the machine's (taskset, a cgroup's cpuset).
  EXPECT_EQ(rank_cpus(CpuBinding::kAuto, 2, {2, 5, 7, 9}), (Cpus{{2, 5}, {7, 9}}));
}

TEST(CpuBindingTest, AutoGivesMoreProcessesThanCpusOneEachInTurn) {
  EXPECT_EQ(rank_cpus(CpuBinding::kAuto, 3, {0, 1}), (Cpus{{0}, {1}, {0}}));
  EXPECT_EQ(rank_cpus(CpuBinding::kAuto, 4, {3, 5}), (Cpus{{3}, {5}, {3}, {5}}));
  // No CPU list (sched_getaffinity failed): nothing to bind to.
  EXPECT_EQ(rank_cpus(CpuBinding::kAuto, 2, {}), (Cpus{{}, {}}));
}

TEST(CpuBindingTest, CoreGivesOneCpuEachInTurnAndNoneNothing) {
  EXPECT_EQ(rank_cpus(CpuBinding::kCore, 3, {0, 1, 2, 3}), (Cpus{{0}, {1}, {2}}));
  EXPECT_EQ(rank_cpus(CpuBinding::kCore, 3, {4, 6}), (Cpus{{4}, {6}, {4}}));
  EXPECT_EQ(rank_cpus(CpuBinding::kNone, 2, {0, 1}), (Cpus{{}, {}}));
}

TEST(CpuBindingTest, AllowedCpusAreThisProcesssAffinity) {
  const std::vector<int> cpus = allowed_cpus();
  ASSERT_FALSE(cpus.empty());
  EXPECT_TRUE(std::is_sorted(cpus.begin(), cpus.end()));
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(::sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(cpus.size(), static_cast<std::size_t>(CPU_COUNT(&set)));
  for (const int cpu : cpus) EXPECT_TRUE(CPU_ISSET(cpu, &set)) << cpu;
}

TEST(LaunchOptionsTest, MaxRestartsDefaultsToNone) {
  EXPECT_EQ(parse({"p"}).max_restarts, 0);
  EXPECT_EQ(parse({"--max-restarts", "3", "p"}).max_restarts, 3);
  EXPECT_EQ(parse({"--max_restarts=2", "p"}).max_restarts, 2);
}

TEST(RestartsTest, NextStepAfterAnAttempt) {
  using O = NodeOutcome;
  const std::vector<O> ok = {O::kSucceeded, O::kSucceeded};
  const std::vector<O> failed = {O::kSucceeded, O::kFailed};
  const std::vector<O> stopped = {O::kFailed, O::kStopped};
  EXPECT_EQ(next_step(ok, 0, 3), NextStep::kSucceed);
  EXPECT_EQ(next_step(ok, 3, 3), NextStep::kSucceed);
  EXPECT_EQ(next_step(failed, 0, 3), NextStep::kRestart);
  EXPECT_EQ(next_step(failed, 2, 3), NextStep::kRestart);
  EXPECT_EQ(next_step(failed, 3, 3), NextStep::kFail) << "K restarts make K + 1 attempts";
  EXPECT_EQ(next_step(failed, 0, 0), NextStep::kFail);
  EXPECT_EQ(next_step(stopped, 0, 3), NextStep::kStop) << "a stop signal is never restarted";
}

TEST(RestartsTest, LinesNameTheAttemptAndWhatFailed) {
  EXPECT_EQ(restart_line(0, 3, "rank 1 (pid 7): exited with code 3", NextStep::kRestart),
            "c10drun: attempt 0 failed: rank 1 (pid 7): exited with code 3; restarting the job "
            "(restart 1 of 3): attempt 1, C10D_RESTART_COUNT=1");
  EXPECT_EQ(
      restart_line(3, 3, "node 1: rank 5 (pid 9): killed by signal 9 (SIGKILL)", NextStep::kFail),
      "c10drun: attempt 3 failed: node 1: rank 5 (pid 9): killed by signal 9 (SIGKILL); no "
      "restart left (--max-restarts 3)");
}

// Feeds `pieces` to a prefixer with the given limit and returns everything it produced,
// finish() included.
std::string prefixed(const std::vector<std::string>& pieces, std::size_t max_line_bytes = 64) {
  LinePrefixer lines("[rank 7]: ", max_line_bytes);
  std::string out;
  for (const std::string& piece : pieces) lines.feed(piece, out);
  lines.finish(out);
  return out;
}

TEST(LinePrefixerTest, PrefixesEveryWholeLine) {
  EXPECT_EQ(prefixed({"a\nbb\n"}), "[rank 7]: a\n[rank 7]: bb\n");
  EXPECT_EQ(prefixed({"\n\n"}), "[rank 7]: \n[rank 7]: \n");
  EXPECT_EQ(prefixed({""}), "");
}

TEST(LinePrefixerTest, JoinsALineThatArrivesInPieces) {
  LinePrefixer lines("[rank 7]: ");
  std::string out;
  lines.feed("hel", out);
  EXPECT_EQ(out, "") << "half a line waits";
  lines.feed("lo\nwor", out);
  EXPECT_EQ(out, "[rank 7]: hello\n");
  lines.feed("ld\n", out);
  EXPECT_EQ(out, "[rank 7]: hello\n[rank 7]: world\n");
}

TEST(LinePrefixerTest, FinishEndsAnUnfinishedLastLine) {
  EXPECT_EQ(prefixed({"a\n", "tail"}), "[rank 7]: a\n[rank 7]: tail\n");
}

TEST(LinePrefixerTest, CutsLinesLongerThanTheLimitIntoPrefixedPieces) {
  EXPECT_EQ(prefixed({"abcdefghij\n"}, 4), "[rank 7]: abcd\n[rank 7]: efgh\n[rank 7]: ij\n");
  // The same line arriving byte by byte is cut the same way.
  std::vector<std::string> bytes;
  for (char c : std::string("abcdefghij\n")) bytes.emplace_back(1, c);
  EXPECT_EQ(prefixed(bytes, 4), "[rank 7]: abcd\n[rank 7]: efgh\n[rank 7]: ij\n");
  // A line of exactly the limit stays one line, however it arrives.
  EXPECT_EQ(prefixed({"abcd", "\n"}, 4), "[rank 7]: abcd\n");
  EXPECT_EQ(prefixed({"abcdefgh", "\n"}, 4), "[rank 7]: abcd\n[rank 7]: efgh\n");
  // A newline-free stream never holds more than the limit.
  LinePrefixer lines("> ", 4);
  std::string out;
  lines.feed("0123456789", out);
  EXPECT_EQ(out, "> 0123\n> 4567\n");
}

TEST(BlameTest, StallRecordsRoundTripAndBadLinesAreSkipped) {
  const std::string text = transport::encode_stall_record({1, 2, 3, "all_reduce #12\nx"}) +
                           "garbage\n7 8\n" +
                           transport::encode_stall_record({0, 1, -1, "barrier #3"});
  const auto records = transport::decode_stall_records(text, 4);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].rank, 1);
  EXPECT_EQ(records[0].awaited, 2);
  EXPECT_EQ(records[0].suspect, 3);
  EXPECT_EQ(records[0].doing, "all_reduce #12 x");
  EXPECT_EQ(records[1].suspect, -1);
  EXPECT_EQ(records[1].doing, "barrier #3");
}

TEST(BlameTest, AStoppedProcessIsTheCauseWithTheRanksThatWaitedForIt) {
  const std::vector<ProcessView> processes{
      {0, 100, true, 'S'}, {1, 101, false, '?'}, {2, 102, true, 'T'}, {3, 103, true, 'R'}};
  const Cause cause = find_cause(processes, 1, {{1, 0, 2, "all_reduce #5"}, {3, 2, 2, "x"}});
  EXPECT_EQ(cause.rank, 2);
  EXPECT_EQ(cause.pid, 102);
  EXPECT_EQ(cause.evidence,
            "it was stopped (state T) and made no progress; ranks 1, 3 timed out waiting for it");
}

TEST(BlameTest, WithoutAStoppedProcessTheRankTheRecordsNameMostIsTheCause) {
  const std::vector<ProcessView> processes{
      {0, 100, true, 'S'}, {1, 101, false, '?'}, {2, 102, true, 'R'}};
  const Cause cause = find_cause(processes, 1, {{1, 2, 2, "all_reduce #5"}, {0, 1, 0, "y"}});
  EXPECT_EQ(cause.rank, 2);
  EXPECT_EQ(cause.pid, 102);
  EXPECT_EQ(cause.evidence,
            "it made no progress; rank 1 timed out waiting for it (rank 1 in all_reduce #5)");
  // A rank on another node has no pid here, and may be cut off rather than stopped.
  const Cause far = find_cause({{0, 100, false, '?'}}, 0, {{0, 7, 7, "z"}});
  EXPECT_EQ(far.pid, -1);
  EXPECT_EQ(far.evidence,
            "it made no progress or is unreachable; rank 0 timed out waiting for it (rank 0 in z)");
}

// Records are read from the store, which anyone who can write it can fill: one that names a rank
// outside the job is not evidence, and a long or control-laden `doing` is cut and made printable.
TEST(BlameTest, RecordsNamingRanksOutsideTheJobAreNotEvidence) {
  const std::vector<ProcessView> processes{
      {0, 100, true, 'S'}, {1, 101, false, '?'}, {2, 102, true, 'R'}};
  const std::string forged = "1 2 99 x\n0 1 99 y\n";
  EXPECT_EQ(find_cause(processes, 1, transport::decode_stall_records(forged, 100)).rank, 99)
      << "in a job of 100 ranks";
  EXPECT_TRUE(transport::decode_stall_records(forged, 3).empty());
  EXPECT_TRUE(transport::decode_stall_records("0 7 2 z\n", 3).empty()) << "awaits rank 7";
  EXPECT_TRUE(transport::decode_stall_records("3 1 2 z\n", 3).empty()) << "from rank 3";
  EXPECT_TRUE(transport::decode_stall_records("0 1 -2 z\n1 -1 0 z\n", 3).empty())
      << "negative ranks other than a cycle's suspect";
  const auto kept = transport::decode_stall_records("1 2 2 z\n0 1 -1 a cycle\n", 3);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(find_cause(processes, 1, kept).rank, 2);
  const auto decoded =
      transport::decode_stall_records("1 2 2 " + std::string(1000, 'a') + "\x1b[31m\n", 3);
  ASSERT_EQ(decoded.size(), 1u);
  EXPECT_EQ(decoded[0].doing, std::string(transport::kMaxStallDoingBytes, 'a'));
  EXPECT_EQ(transport::decode_stall_records("1 2 2 red\x1b[31m\n", 3)[0].doing, "red?[31m");
  EXPECT_TRUE(transport::decode_stall_records("1x 2 2 a\n+1 2 2 a\n1 2\n", 3).empty());
}

TEST(BlameTest, NoEvidenceOrTheFailedRankItselfLeavesTheFailedRankAsTheCause) {
  const std::vector<ProcessView> processes{{0, 100, true, 'S'}, {1, 101, false, '?'}};
  EXPECT_EQ(find_cause(processes, 1, {}).rank, -1);
  EXPECT_EQ(find_cause(processes, 1, {{0, 1, 1, "x"}}).rank, -1);
  EXPECT_EQ(find_cause(processes, 1, {{0, 1, -1, "a cycle"}}).rank, -1);
}

TEST(BlameTest, ProcessStateReadsProc) {
  EXPECT_EQ(process_state(::getpid()), 'R');
  EXPECT_EQ(process_state(-5), '?');
}

}  // namespace
}  // namespace c10d::inline v1::launcher
