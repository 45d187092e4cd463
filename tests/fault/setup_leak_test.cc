// Shared-memory segments of ranks killed during set-up, with real processes: a rank stopped
// (C10D_TEST_FAULT_AT=<step>:stop, core/fault_point.h) at every step of the TCP backend's
// same-host channel and of the ICI fabric, then the whole job SIGKILLed as a launcher would;
// the next job on the host must succeed and leave no segment of any of those processes in
// /dev/shm. Also: a rank that dies by itself while the others fail on their own, and the rules
// of reclaiming (the owner's start time guards against a reused pid; other patterns, other
// pid namespaces and live owners are left alone).
#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <memory>
#include <set>
#include <sstream>
#include <vector>

#include "fault_ranks.h"
#include "transport/shared_memory.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::EnvChanges;
using test::Ranks;

// A backend's job: how its ranks are started and what its segments are called.
struct Backend {
  std::string kind;  // segment kind (shared_memory.h), and the fault steps' component
  int world = 0;
  EnvChanges env;
};

Backend tcp_shm() { return {"shm", 3, {{"C10D_BACKEND", "tcp"}, {"C10D_SHM", "1"}}}; }
Backend ici() { return {"ici", 4, {{"C10D_BACKEND", "ici"}, {"C10D_ICI_TOPOLOGY", "2x2"}}}; }

// The /dev/shm entries of c10d segments of `kind` whose name has `pid` as one of its
// dash-separated fields (whatever the naming scheme, so a leak shows under any).
std::vector<std::string> segments_of(const std::string& kind, pid_t pid) {
  std::vector<std::string> out;
  const std::string prefix = "c10d-" + kind + "-";
  const std::string field = std::to_string(pid);
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with(prefix)) continue;
    std::stringstream parts(name.substr(prefix.size()));
    for (std::string part; std::getline(parts, part, '-');) {
      if (part == field) {
        out.push_back(name);
        break;
      }
    }
  }
  return out;
}

// Starts the backend's ranks running pg_fault_child `args`; `victim` (when >= 0) also gets
// `victim_env`.
Ranks start_job(const Backend& b, const std::vector<std::string>& args, int victim = -1,
                const EnvChanges& victim_env = {}, const EnvChanges& extra = {}) {
  EnvChanges env = b.env;
  for (const auto& [k, v] : extra) env[k] = v;
  return Ranks(b.world, args, env, victim, victim_env);
}

std::vector<pid_t> pids_of(const Ranks& job) {
  std::vector<pid_t> out;
  for (const auto& r : job.children) out.push_back(r->pid());
  return out;
}

// Every rank exits 0 within the deadline.
void expect_success(Ranks& job) {
  const auto deadline = test::Clock::now() + 60s;
  for (auto& r : job.children) {
    const auto exit = r->wait(deadline);
    EXPECT_TRUE(exit.exited && exit.code == 0) << r->describe();
  }
}

// Stops rank 1 at `step`, checks what its segment looks like there, kills the job, and runs the
// next one: it succeeds, and no segment of the killed job's processes is left.
void kill_at_step_then_run_next_job(const Backend& b, const std::string& step) {
  SCOPED_TRACE(b.kind + ":" + step);
  std::vector<pid_t> killed;
  {
    Ranks job = start_job(b, {"ok"}, 1, {{"C10D_TEST_FAULT_AT", b.kind + ":" + step + ":stop"}});
    const pid_t victim = job.rank(1).pid();
    ASSERT_TRUE(test::wait_until_stopped(job.rank(1), test::Clock::now() + 30s))
        << "rank 1 never reached " << step << "\n"
        << job.rank(1).describe();
    const auto own = segments_of(b.kind, victim);
    if (step == "before_create") {
      EXPECT_TRUE(own.empty());
    } else {
      // The step is reached with the segment made (and not yet unlinked): what a kill leaks.
      ASSERT_EQ(own.size(), 1u) << "rank 1's segments at " << step;
      struct stat st {};
      ASSERT_EQ(::stat(("/dev/shm/" + own[0]).c_str(), &st), 0);
      EXPECT_EQ(st.st_mode & 07777, 0600u) << own[0];
      EXPECT_EQ(st.st_uid, ::geteuid()) << own[0];
    }
    killed = pids_of(job);
    test::kill_all(job.children);
  }
  {
    Ranks next = start_job(b, {"ok"});
    expect_success(next);
  }
  for (const pid_t pid : killed) {
    EXPECT_TRUE(segments_of(b.kind, pid).empty())
        << "a segment of killed pid " << pid
        << " is still in /dev/shm after the next job: " << segments_of(b.kind, pid)[0];
  }
}

const char* const kSteps[] = {"before_create", "after_create", "after_publish", "after_map",
                              "after_all_mapped"};

TEST(SetupLeakTest, TcpSharedMemoryRankKilledAtEveryStepLeavesNothingAfterTheNextJob) {
  for (const char* step : kSteps) kill_at_step_then_run_next_job(tcp_shm(), step);
}

TEST(SetupLeakTest, IciChipKilledAtEveryStepLeavesNothingAfterTheNextJob) {
  for (const char* step : kSteps) kill_at_step_then_run_next_job(ici(), step);
}

// Rank 1 dies by itself after publishing its segment; the others fail their set-up on their own
// (timing out, or unable to open a segment a set-up reclaimed) and remove their own segments
// as they fail; the next job removes rank 1's if nobody did.
TEST(SetupLeakTest, RankThatDiesAloneIsCleanedUpByTheNextJobAndTheOthersCleanUpThemselves) {
  std::vector<pid_t> pids;
  {
    Ranks job = start_job(tcp_shm(), {"ok"}, 1, {{"C10D_TEST_FAULT_AT", "shm:after_publish"}},
                          {{"C10D_TIMEOUT_MS", "2000"}});
    const auto deadline = test::Clock::now() + 30s;
    for (int r = 0; r < 3; ++r) {
      const auto exit = job.rank(r).wait(deadline);
      EXPECT_FALSE(exit.timed_out) << job.rank(r).describe();
      if (r == 1) {
        EXPECT_EQ(exit.signal, SIGKILL) << job.rank(1).describe();
      } else {
        EXPECT_EQ(exit.code, 1) << job.rank(r).describe();
      }
    }
    pids = pids_of(job);
  }
  EXPECT_TRUE(segments_of("shm", pids[0]).empty());
  EXPECT_TRUE(segments_of("shm", pids[2]).empty());
  // Rank 1 was killed holding its segment; a survivor whose own set-up began after that has
  // reclaimed it already (and then failed to open it), else it is still there.
  EXPECT_LE(segments_of("shm", pids[1]).size(), 1u);
  {
    Ranks next = start_job(tcp_shm(), {"ok"});
    expect_success(next);
  }
  EXPECT_TRUE(segments_of("shm", pids[1]).empty());
}

// ---- The reclaiming rules, on segments made by hand ----

std::string own_namespace_field() {
  const std::string prefix = transport::own_segment_prefix("c10d-test");  // kind-ns-pid-
  const auto first = prefix.find('-', std::string("c10d-test").size() + 1);
  return prefix.substr(std::string("c10d-test-").size(), first - std::string("c10d-test-").size());
}

std::uint64_t start_time_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  std::istringstream fields(line.substr(line.rfind(')') + 2));
  std::string f;
  for (int i = 3; i <= 22 && fields >> f; ++i) {
  }
  return std::stoull(f);
}

void make_segment(const std::string& name) {
  const int fd = ::shm_open(("/" + name).c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << name;
  ::close(fd);
}

bool exists(const std::string& name) { return std::filesystem::exists("/dev/shm/" + name); }

TEST(SetupLeakTest, ReclaimTakesOnlyOurPatternFromProcessesThatAreGone) {
  const std::string ns = own_namespace_field();
  const pid_t parent = ::getppid();
  const std::uint64_t parent_start = start_time_of(parent);
  // A process that ran and was reaped: its pid is free (or reused, with another start time).
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  int status = 0;
  ::waitpid(gone, &status, 0);
  const std::string tag = std::to_string(::getpid());
  const std::string dead = fmt::format("c10d-test-{}-{}-{}-{}dead", ns, gone, 1, tag);
  const std::string reused =
      fmt::format("c10d-test-{}-{}-{}-{}reused", ns, parent, parent_start + 1, tag);
  const std::string live = fmt::format("c10d-test-{}-{}-{}-{}live", ns, parent, parent_start, tag);
  const std::string other_ns = fmt::format("c10d-test-{}-{}-{}-{}otherns", 1, gone, 1, tag);
  const std::string other_kind = fmt::format("c10d-tes-{}-{}-{}-{}kind", ns, gone, 1, tag);
  const std::string malformed = fmt::format("c10d-test-{}-x{}-{}-{}bad", ns, gone, 1, tag);
  for (const auto& n : {dead, reused, live, other_ns, other_kind, malformed}) make_segment(n);

  EXPECT_GE(transport::reclaim_orphan_segments("c10d-test"), 2u);
  EXPECT_FALSE(exists(dead)) << "its pid is gone";
  EXPECT_FALSE(exists(reused)) << "its pid now belongs to a process that started later";
  EXPECT_TRUE(exists(live)) << "its owner is alive";
  EXPECT_TRUE(exists(other_ns)) << "another pid namespace: its pids are not ours to judge";
  EXPECT_TRUE(exists(other_kind));
  EXPECT_TRUE(exists(malformed));
  for (const auto& n : {dead, reused, live, other_ns, other_kind, malformed}) {
    ::shm_unlink(("/" + n).c_str());
  }
}

TEST(SetupLeakTest, SegmentsAreCreatedOwnerOnlyWhateverTheUmask) {
  for (const mode_t mask : {mode_t{0}, mode_t{0277}}) {
    const mode_t old = ::umask(mask);
    auto segment = transport::SharedSegment::create(
        transport::owned_segment_name("c10d-test", "mode" + std::to_string(mask)), 4096);
    ::umask(old);
    struct stat st {};
    ASSERT_EQ(::stat(("/dev/shm" + segment.name()).c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "umask " << mask;
    EXPECT_TRUE(segment.name().starts_with("/" + transport::own_segment_prefix("c10d-test")));
  }
}

}  // namespace
}  // namespace c10d::inline v1
