// Fault tests of the TCP process group with real processes: a rank killed with SIGKILL in the
// middle of an all_reduce makes every other rank fail within 5 s with an error naming it (those
// with no connection to it too), and
// c10drun exit non-zero naming it; a rank that fails its set-up makes the others' set-up fail
// within seconds naming it and its reason; a rank stopped with SIGSTOP is named by the ranks
// that time out waiting for it, and by c10drun, as the rank that made no progress; mismatched
// collectives under C10D_DEBUG=DETAIL fail on every rank with both calls named.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <memory>
#include <vector>

#include "fault_ranks.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::EnvChanges;
using test::fault_child_path;
using test::occurrences;
using test::Ranks;
using test::TempDir;

std::string launcher_path() { return (test::build_dir() / "tools" / "c10drun").string(); }

TEST(ProcessGroupFaultTest, KilledRankFailsEveryOtherRankQuicklyNamingIt) {
  constexpr int kVictim = 2;
  Ranks ranks(4, {"kill", std::to_string(kVictim)});
  test::expect_killed_rank_named_by_the_others(ranks, kVictim);
}

// Over TCP alone, connected on first use: the 4 MiB all_reduce is a ring, so rank 0 never
// connects to rank 2, the rank killed. It learns of the loss from its neighbours' abort notices
// (their connections to rank 2 broke) or from the failure record in the store, as quickly, and
// names rank 2 alike.
TEST(ProcessGroupFaultTest, KilledRankIsNamedByRanksThatHadNoConnectionToIt) {
  constexpr int kVictim = 2;
  Ranks ranks(4, {"kill", std::to_string(kVictim)}, {{"C10D_SHM", "0"}});
  test::expect_killed_rank_named_by_the_others(ranks, kVictim);
}

// A port free at the time of asking (bound, read, released).
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// Rank 0 hosts the store in its own process (env:// without an external server) and is the
// one killed: the store dies with it, and the others must still fail and exit within 5 s (a
// failing transport asks the store for the cause only within a short bound).
TEST(ProcessGroupFaultTest, KilledStoreHostingRankZeroStillFailsEveryOtherRankQuickly) {
  TempDir dir;
  const std::string port = std::to_string(free_port());
  std::vector<std::unique_ptr<ChildProcess>> children;
  for (int r = 0; r < 3; ++r) {
    EnvChanges env{{"RANK", std::to_string(r)},
                   {"WORLD_SIZE", "3"},
                   {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", port},
                   {"C10D_STORE_EXTERNAL", std::nullopt}};
    children.push_back(
        std::make_unique<ChildProcess>(std::vector<std::string>{fault_child_path(), "kill", "0"},
                                       env, dir.path(), "rank" + std::to_string(r)));
  }
  const auto victim = children[0]->wait(std::chrono::steady_clock::now() + 60s);
  ASSERT_FALSE(victim.exited) << children[0]->describe();
  const auto died = std::chrono::steady_clock::now();
  for (int r = 1; r < 3; ++r) {
    auto& child = *children[static_cast<std::size_t>(r)];
    const auto exit = child.wait(died + 5s);
    EXPECT_FALSE(exit.timed_out) << "rank " << r << " still running 5 s after rank 0 died";
    EXPECT_EQ(exit.code, 3) << child.describe();
    EXPECT_NE(child.out().find("rank 0"), std::string::npos) << child.out();
  }
}

// Every rank of `ranks` ends within `within` of `start`, exits 3, and prints "SETUP_FAILED" and
// `reason`; every rank but `victim` names it ("failed on rank V").
void expect_set_up_failure_named(Ranks& ranks, int victim,
                                 std::chrono::steady_clock::time_point start,
                                 std::chrono::seconds within, const std::string& reason) {
  for (std::size_t r = 0; r < ranks.children.size(); ++r) {
    auto& child = *ranks.children[r];
    const auto exit = child.wait(start + within);
    EXPECT_FALSE(exit.timed_out) << "rank " << r << " still running after " << within.count()
                                 << " s: " << child.out();
    EXPECT_EQ(exit.code, 3) << child.describe() << child.out() << child.err();
    const std::string out = child.out();
    EXPECT_NE(out.find("SETUP_FAILED"), std::string::npos) << "rank " << r << ": " << out;
    EXPECT_NE(out.find(reason), std::string::npos) << "rank " << r << ": " << out;
    if (static_cast<int>(r) != victim) {
      EXPECT_NE(out.find("failed on rank " + std::to_string(victim)), std::string::npos)
          << "rank " << r << ": " << out;
    }
  }
}

// Rank 1 cannot set up its shared memory (C10D_SHM_RING_BYTES is not a power of two): the other
// ranks, waiting in the shared-memory set-up for its host key, fail within seconds naming rank
// 1 and its reason, instead of waiting out their 30 s set-up timeout and blaming a missing key.
TEST(ProcessGroupFaultTest, RankThatFailsSharedMemorySetUpIsNamedToTheOthersWithinSeconds) {
  const auto start = std::chrono::steady_clock::now();
  Ranks ranks(4, {"setup_fail", "1", "shm"});
  expect_set_up_failure_named(ranks, 1, start, 10s, "C10D_SHM_RING_BYTES");
}

// The same for a failure in the TCP transport's set-up, of rank 0 (the others wait for its
// address in the store, or for it to accept), with shared memory off.
TEST(ProcessGroupFaultTest, RankThatFailsTcpSetUpIsNamedToTheOthersWithinSeconds) {
  const auto start = std::chrono::steady_clock::now();
  Ranks ranks(3, {"setup_fail", "0", "host"}, {{"C10D_SHM", "0"}});
  expect_set_up_failure_named(ranks, 0, start, 10s, "not-an-address");
}

// Rank `victim` of `n` stops (SIGSTOP) in the middle of an all_reduce. The ranks whose ops time
// out waiting (3 s) follow each other's waits to it, and every other rank names it as the one
// that made no progress, not the rank that gave up first.
void expect_stopped_rank_named(int n, int victim, const EnvChanges& env) {
  Ranks ranks(n, {"freeze", std::to_string(victim)}, env);
  const auto start = std::chrono::steady_clock::now();
  const std::string named = "rank " + std::to_string(victim) + " made no progress";
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    auto& child = *ranks.children[static_cast<std::size_t>(r)];
    const auto exit = child.wait(start + 60s);
    EXPECT_FALSE(exit.timed_out) << "rank " << r << ": " << child.out();
    EXPECT_EQ(exit.code, 3) << child.describe() << child.out() << child.err();
    const std::string out = child.out();
    EXPECT_NE(out.find("FAILED"), std::string::npos) << out;
    EXPECT_NE(out.find(named), std::string::npos) << "rank " << r << ": " << out;
  }
  if (::testing::Test::HasFailure()) {  // the other ranks' words, to follow the chain by hand
    for (int r = 0; r < n; ++r) {
      if (r != victim) ADD_FAILURE() << "rank " << r << ": " << ranks.children[r]->out();
    }
  }
  auto& stopped = *ranks.children[static_cast<std::size_t>(victim)];
  EXPECT_TRUE(stopped.running()) << stopped.describe();  // stopped, not dead
  stopped.send_signal(SIGKILL);
  EXPECT_FALSE(stopped.wait(std::chrono::steady_clock::now() + 10s).timed_out);
}

// Same-host ranks exchange their bytes through shared memory...
TEST(ProcessGroupFaultTest, StoppedRankIsNamedByEveryOtherRankAsTheOneThatMadeNoProgress) {
  expect_stopped_rank_named(4, 2, {});
}

// ... and over TCP with C10D_SHM=0.
TEST(ProcessGroupFaultTest, StoppedRankIsNamedByEveryOtherRankOverTcp) {
  expect_stopped_rank_named(3, 1, {{"C10D_SHM", "0"}});
}

// The same under c10drun: the launcher reports rank 2, stopped, as the cause (with the ranks
// that timed out waiting for it), not the first rank that failed, and leaves nothing running.
TEST(ProcessGroupFaultTest, LauncherReportsTheStoppedRankAsTheCause) {
  TempDir dir;
  ChildProcess launcher({launcher_path(), "--nproc-per-node", "4", "--grace-period-ms", "2000",
                         fault_child_path(), "freeze", "2"},
                        {}, dir.path(), "c10drun");
  const auto exit = launcher.wait(std::chrono::steady_clock::now() + 90s);
  EXPECT_FALSE(exit.timed_out);
  EXPECT_NE(exit.code, 0) << launcher.describe();
  const std::string err = launcher.err();
  const std::string out = launcher.out();
  const std::string cause_head = "c10drun: rank 2 (pid ";
  const std::size_t at = err.find(cause_head);
  ASSERT_NE(at, std::string::npos) << err << out;
  const std::size_t pid_from = at + cause_head.size();
  const std::size_t pid_to = err.find(") is the cause: it was stopped", pid_from);
  ASSERT_NE(pid_to, std::string::npos) << err << out;
  EXPECT_NE(err.find("timed out waiting for it"), std::string::npos) << err;
  EXPECT_NE(err.find("after rank 2 made no progress"), std::string::npos) << err;
  // Every rank that says why it failed names rank 2. The launcher stops the others as soon as
  // one fails, so on a loaded machine a rank may be stopped before it prints: at least the first
  // must have. (Plain searches: std::regex trips GCC 12's -Wmaybe-uninitialized in the sanitized
  // builds.)
  int named = 0;
  for (int r : {0, 1, 3}) {
    const std::string head = "[rank " + std::to_string(r) + "]: FAILED ";
    const std::size_t line_at = out.find(head);
    if (line_at == std::string::npos) continue;
    const std::string line = out.substr(line_at, out.find('\n', line_at) - line_at);
    EXPECT_NE(line.find("rank 2 made no progress"), std::string::npos)
        << "rank " << r << ": " << out;
    ++named;
  }
  EXPECT_GE(named, 1) << out;
  // The launcher reaped its children before it exited: the stopped rank is gone.
  const pid_t stopped = static_cast<pid_t>(std::stol(err.substr(pid_from, pid_to - pid_from)));
  EXPECT_EQ(::kill(stopped, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST(ProcessGroupFaultTest, MismatchedCollectivesUnderDetailFailOnEveryRankNamingBothCalls) {
  Ranks ranks(3, {"mismatch"}, {{"C10D_DEBUG", "DETAIL"}});
  for (int r = 0; r < 3; ++r) {
    auto& child = *ranks.children[static_cast<std::size_t>(r)];
    const auto exit = child.wait(std::chrono::steady_clock::now() + 30s);
    EXPECT_EQ(exit.code, 3) << child.describe();
    const std::string out = child.out();
    EXPECT_NE(out.find("rank 0 called all_reduce(float32, count 1048576, sum) #0"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("rank 1 called broadcast(float32, count 1048576, root 0) #0"),
              std::string::npos)
        << out;
  }
}

TEST(ProcessGroupFaultTest, LauncherExitsNonZeroNamingTheKilledRank) {
  TempDir dir;
  ChildProcess launcher({launcher_path(), "--nproc-per-node", "3", fault_child_path(), "kill", "1"},
                        {}, dir.path(), "c10drun");
  const auto exit = launcher.wait(std::chrono::steady_clock::now() + 60s);
  EXPECT_FALSE(exit.timed_out);
  EXPECT_NE(exit.code, 0) << launcher.describe();
  const std::string err = launcher.err();
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("SIGKILL"), std::string::npos) << err;
}

TEST(ProcessGroupFaultTest, HealthyRunUnderTheLauncherExitsZero) {
  TempDir dir;
  ChildProcess launcher({launcher_path(), "--nproc-per-node", "3", fault_child_path(), "ok"}, {},
                        dir.path(), "c10drun");
  const auto exit = launcher.wait(std::chrono::steady_clock::now() + 60s);
  EXPECT_EQ(exit.code, 0) << launcher.describe() << launcher.out() << launcher.err();
}

#ifdef C10D_TEST_MPIEXEC
// Runs pg_fault_child SCENARIO on `np` ranks under mpirun with the MPI backend and
// C10D_DEBUG=DETAIL, and expects every rank to fail naming rank 0's and rank 1's calls.
void expect_mismatch_named_on_every_mpi_rank(int np, const std::string& scenario,
                                             const std::string& rank0_call,
                                             const std::string& rank1_call) {
  TempDir dir;
  ChildProcess mpirun({C10D_TEST_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np",
                       std::to_string(np), fault_child_path(), scenario},
                      {{"C10D_DEBUG", "DETAIL"}, {"C10D_BACKEND", "mpi"}}, dir.path(), "mpirun");
  const auto exit = mpirun.wait(std::chrono::steady_clock::now() + 60s);
  EXPECT_FALSE(exit.timed_out) << mpirun.describe();
  EXPECT_NE(exit.code, 0) << mpirun.describe();
  const std::string out = mpirun.out();
  EXPECT_EQ(occurrences(out, "MISMATCH"), static_cast<std::size_t>(np)) << out << mpirun.err();
  EXPECT_NE(out.find("rank 0 called " + rank0_call), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 called " + rank1_call), std::string::npos) << out;
}

// The MPI backend under mpirun: the same DETAIL check, the same words, every rank.
TEST(ProcessGroupFaultTest, MismatchedCollectivesUnderDetailFailOnEveryMpiRank) {
  expect_mismatch_named_on_every_mpi_rank(3, "mismatch",
                                          "all_reduce(float32, count 1048576, sum) #0",
                                          "broadcast(float32, count 1048576, root 0) #0");
}

// all_to_all with split sizes on one rank and none on the others: MPI_Alltoallv against
// MPI_Alltoall, which MPI cannot match. DETAIL names it on every rank instead of a hang.
TEST(ProcessGroupFaultTest, AllToAllSplitSizesOnSomeMpiRanksFailUnderDetail) {
  expect_mismatch_named_on_every_mpi_rank(2, "split_mismatch",
                                          "all_to_all(float32, count 1048576) #0",
                                          "all_to_all(float32, with split sizes) #0");
}

// An op whose MPI call cannot even be made (its count exceeds MPI's int) fails its Work with the
// reason when the worker starts it, instead of leaving the Work to time out.
TEST(ProcessGroupFaultTest, MpiOpThatFailsToStartOnTheWorkerFailsItsWork) {
  TempDir dir;
  ChildProcess mpirun({C10D_TEST_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "1",
                       fault_child_path(), "start_fails"},
                      // Under AddressSanitizer, Open MPI's allocations kept past MPI_Finalize would
                      // fail the exit code (the mpi label's tests turn leak checks off alike).
                      {{"C10D_BACKEND", "mpi"}, {"ASAN_OPTIONS", "detect_leaks=0"}}, dir.path(),
                      "mpirun");
  const auto exit = mpirun.wait(std::chrono::steady_clock::now() + 60s);
  EXPECT_FALSE(exit.timed_out) << mpirun.describe();
  EXPECT_EQ(exit.code, 0) << mpirun.describe() << mpirun.out() << mpirun.err();
  EXPECT_NE(mpirun.out().find("START_FAILED"), std::string::npos) << mpirun.out();
  EXPECT_NE(mpirun.out().find("exceed MPI's int count limit"), std::string::npos) << mpirun.out();
}

// An error MPI returns (here MPI_ERR_TRUNCATE: a message longer than its receive) fails the op
// with a NetworkError that carries MPI_Error_string's text, instead of MPI aborting the job.
TEST(ProcessGroupFaultTest, AnMpiErrorFailsTheOpWithMpisOwnWords) {
  TempDir dir;
  ChildProcess mpirun({C10D_TEST_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                       fault_child_path(), "truncate"},
                      {{"C10D_BACKEND", "mpi"}, {"ASAN_OPTIONS", "detect_leaks=0"}}, dir.path(),
                      "mpirun");
  const auto exit = mpirun.wait(std::chrono::steady_clock::now() + 60s);
  EXPECT_FALSE(exit.timed_out) << mpirun.describe();
  EXPECT_EQ(exit.code, 0) << mpirun.describe() << mpirun.out() << mpirun.err();
  const std::string out = mpirun.out();
  EXPECT_NE(out.find("MPI_ERROR: "), std::string::npos) << out << mpirun.err();
  EXPECT_NE(out.find("MPI_ERR_TRUNCATE"), std::string::npos) << out;
  EXPECT_NE(out.find("recv"), std::string::npos) << out;
}

// Blocking MPI collectives (the default) cannot be cancelled: a waiter with a short wait gets
// its TimeoutError while the worker stays in MPI, and at the op's own deadline the watchdog
// names the op and aborts the whole job instead of leaving it hanging.
TEST(ProcessGroupFaultTest, BlockingMpiCollectivePastItsDeadlineAbortsTheJob) {
  TempDir dir;
  ChildProcess mpirun({C10D_TEST_MPIEXEC, "--allow-run-as-root", "--oversubscribe", "-np", "2",
                       fault_child_path(), "stall"},
                      {{"C10D_BACKEND", "mpi"}}, dir.path(), "mpirun");
  const auto started = std::chrono::steady_clock::now();
  const auto exit = mpirun.wait(started + 60s);
  const auto seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  EXPECT_FALSE(exit.timed_out) << mpirun.describe();
  EXPECT_NE(exit.code, 0) << mpirun.describe();
  EXPECT_LT(seconds, 20.0) << "rank 1 sleeps 30 s unless the job is aborted";
  const std::string all = mpirun.out() + mpirun.err();
  EXPECT_NE(all.find("WAITER_TIMEOUT"), std::string::npos) << all;
  EXPECT_EQ(all.find("UNEXPECTED"), std::string::npos) << all;
  EXPECT_NE(all.find("rank 0: all_reduce #0 (MPI group world) did not finish within its timeout "
                     "inside a blocking MPI call"),
            std::string::npos)
      << all;
}
#endif

}  // namespace
}  // namespace c10d::inline v1
