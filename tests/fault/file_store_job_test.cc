// file:// jobs never read another job's keys. A path reused after a run that was killed (its
// file full of dead addresses and segment names) must work every time; two live jobs on one path
// must never form a mixed group: one fails (or both), saying the file is in use by another job
// and naming the path. Real processes (pg_fault_child) for the jobs; threads for the rules of
// joining a generation (store.h FileStoreJob, file_store.cc).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "c10d/errors.h"
#include "c10d/rendezvous.h"
#include "c10d/store.h"
#include "fault_ranks.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::EnvChanges;
using test::TempDir;

// One job of `world` pg_fault_child ranks meeting at file://`path`, started rank by rank.
class Job {
 public:
  Job(const std::filesystem::path& dir, std::string name, const std::string& path, int world,
      std::vector<std::string> args, const EnvChanges& extra = {})
      : dir_(dir), name_(std::move(name)), world_(world), args_(std::move(args)) {
    env_ = {{"C10D_INIT_METHOD", "file://" + path},
            {"WORLD_SIZE", std::to_string(world)},
            {"C10D_BACKEND", "tcp"},
            {"C10D_TIMEOUT_MS", "15000"},
            {"C10D_TEST_FAULT_AT", std::nullopt},
            {"C10D_RUN_ID", std::nullopt},
            {"SLURM_JOB_ID", std::nullopt},
            {"PMIX_NAMESPACE", std::nullopt},
            {"OMPI_MCA_ess_base_jobid", std::nullopt},
            {"MASTER_ADDR", std::nullopt},
            {"MASTER_PORT", std::nullopt}};
    for (const auto& [k, v] : extra) env_[k] = v;
  }

  void start(int rank, const EnvChanges& more = {}) {
    EnvChanges env = env_;
    env["RANK"] = std::to_string(rank);
    for (const auto& [k, v] : more) env[k] = v;
    std::vector<std::string> argv{test::fault_child_path()};
    argv.insert(argv.end(), args_.begin(), args_.end());
    ranks.push_back(
        std::make_unique<ChildProcess>(argv, env, dir_, name_ + "_rank" + std::to_string(rank)));
  }
  Job& start_all() {
    for (int r = 0; r < world_; ++r) start(r);
    return *this;
  }

  bool all_print(const std::string& word, test::Clock::time_point deadline) {
    for (auto& r : ranks) {
      while (r->out().find(word) == std::string::npos) {
        if (!r->running() || test::Clock::now() >= deadline) return false;
        std::this_thread::sleep_for(5ms);
      }
    }
    return true;
  }

  void kill_all() { test::kill_all(ranks); }

  std::string describe() const {
    std::string out;
    for (const auto& r : ranks) out += r->describe() + "\n";
    return out;
  }

  std::vector<std::unique_ptr<ChildProcess>> ranks;

 private:
  std::filesystem::path dir_;
  std::string name_;
  int world_;
  std::vector<std::string> args_;
  EnvChanges env_;
};

// Leaves at `path` what a job killed mid-run leaves: a generation, its ranks' addresses and
// shared-memory segment names, and no process behind any of them. `mid_setup`: killed while
// rank 1 is stopped inside the shared-memory set-up, else after a first all_reduce.
void leave_a_killed_job(const TempDir& dir, const std::string& path, int world, int round,
                        bool mid_setup) {
  Job job(dir.path(), "killed" + std::to_string(round), path, world, {mid_setup ? "ok" : "hold"});
  if (mid_setup) {
    for (int r = 0; r < world; ++r) {
      job.start(
          r, r == 1 ? EnvChanges{{"C10D_TEST_FAULT_AT", "shm:after_publish:stop"}} : EnvChanges{});
    }
    ASSERT_TRUE(test::wait_until_stopped(*job.ranks[1], test::Clock::now() + 30s))
        << job.describe();
  } else {
    job.start_all();
    ASSERT_TRUE(job.all_print("READY", test::Clock::now() + 30s)) << job.describe();
  }
  job.kill_all();
  ASSERT_TRUE(std::filesystem::exists(path)) << "a killed job leaves its file";
}

TEST(FileStoreJobTest, RerunsOnAPathLeftByKilledJobsAllSucceed) {
  TempDir dir;
  const std::string path = (dir.path() / "store").string();
  constexpr int kWorld = 3;
  for (int round = 0; round < 6; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    leave_a_killed_job(dir, path, kWorld, round, round % 2 == 1);
    Job rerun(dir.path(), "rerun" + std::to_string(round), path, kWorld,
              {"sum", std::to_string(round + 1)});
    rerun.start_all();
    for (auto& r : rerun.ranks) {
      const auto exit = r->wait(test::Clock::now() + 60s);
      EXPECT_TRUE(exit.exited && exit.code == 0) << r->describe();
      EXPECT_NE(r->out().find("SUM " + std::to_string(kWorld * (round + 1))), std::string::npos)
          << r->describe();
    }
    EXPECT_FALSE(std::filesystem::exists(path)) << "the last rank to leave deletes the file";
  }
}

// Classifies how one job's ranks ended: every rank succeeded with its own job's sum, or every
// rank failed saying the file is in use by another job and naming the path. Anything else
// (a mixed sum, a partial failure) fails the test.
enum class Outcome { kSucceeded, kRefused };
Outcome outcome_of(Job& job, const std::string& path, float value) {
  int ok = 0;
  int refused = 0;
  for (auto& r : job.ranks) {
    const auto exit = r->wait(test::Clock::now() + 60s);
    const std::string out = r->out();
    EXPECT_EQ(out.find("MIXED"), std::string::npos) << "a cross-connected group:\n"
                                                    << r->describe();
    if (exit.exited && exit.code == 0 &&
        out.find(fmt::format("SUM {}", value * static_cast<float>(job.ranks.size()))) !=
            std::string::npos) {
      ++ok;
    } else if (exit.exited && exit.code == 1 &&
               out.find("is in use by another job") != std::string::npos &&
               out.find(path) != std::string::npos) {
      ++refused;
    }
  }
  const int n = static_cast<int>(job.ranks.size());
  EXPECT_TRUE(ok == n || refused == n)
      << ok << " ranks succeeded and " << refused << " were refused:\n"
      << job.describe();
  return ok == n ? Outcome::kSucceeded : Outcome::kRefused;
}

// Two jobs started at once on one path, each with its own run id (as C10D_RUN_ID, Slurm or
// mpirun give): whichever starts its generation first runs; the other is refused whole.
TEST(FileStoreJobTest, TwoJobsStartedTogetherOnOnePathNeverCrossConnect) {
  TempDir dir;
  const std::string path = (dir.path() / "store").string();
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const EnvChanges hold{{"C10D_TEST_HOLD_MS", "1500"}};
    auto a_env = hold;
    auto b_env = hold;
    a_env["C10D_RUN_ID"] = "job-a-" + std::to_string(round);
    b_env["C10D_RUN_ID"] = "job-b-" + std::to_string(round);
    Job a(dir.path(), "a" + std::to_string(round), path, 3, {"sum", "1"}, a_env);
    Job b(dir.path(), "b" + std::to_string(round), path, 3, {"sum", "100"}, b_env);
    // Interleaved starts, in another order each round: rank r of both jobs before rank r + 1
    // of either.
    for (int r = 0; r < 3; ++r) {
      const int first = round % 2 == 0 ? r : 2 - r;
      a.start(first);
      b.start(first);
    }
    const Outcome first = outcome_of(a, path, 1);
    const Outcome second = outcome_of(b, path, 100);
    EXPECT_FALSE(first == Outcome::kSucceeded && second == Outcome::kSucceeded)
        << "both jobs ran on one file at once";
  }
}

// Without run ids, a job that comes while another holds the path is refused whole.
TEST(FileStoreJobTest, AJobArrivingWhileAnotherHoldsThePathIsRefusedNamingIt) {
  TempDir dir;
  const std::string path = (dir.path() / "store").string();
  Job a(dir.path(), "a", path, 3, {"sum", "1"}, {{"C10D_TEST_HOLD_MS", "3000"}});
  a.start_all();
  ASSERT_TRUE(a.all_print("READY", test::Clock::now() + 30s)) << a.describe();
  Job b(dir.path(), "b", path, 3, {"sum", "100"});
  b.start_all();
  EXPECT_EQ(outcome_of(b, path, 100), Outcome::kRefused);
  EXPECT_EQ(outcome_of(a, path, 1), Outcome::kSucceeded);
}

// ---- The rules of joining, with ranks as threads ----

std::string temp_file(const TempDir& dir) { return (dir.path() / "store").string(); }

TEST(FileStoreJobTest, RankZeroStartsAfreshOverAStaleFileAndOthersWaitForIt) {
  TempDir dir;
  const std::string path = temp_file(dir);
  {
    FileStore stale(path, 5s);  // an earlier run's keys, no live job
    stale.set("default/addr/1", std::string_view("10.0.0.1:1"));
  }
  // Rank 1 comes first: it must not read the stale key, only the one of its own job.
  auto rank1 = std::async(std::launch::async, [&] {
    FileStore s(path, 10s, FileStoreJob{1, 2, ""});
    return s.get_string("default/addr/1");
  });
  std::this_thread::sleep_for(200ms);
  FileStore zero(path, 10s, FileStoreJob{0, 2, ""});
  EXPECT_FALSE(zero.check(std::vector<std::string>{"default/addr/1"}));
  zero.set("default/addr/1", std::string_view("fresh"));
  EXPECT_EQ(rank1.get(), "fresh");
}

TEST(FileStoreJobTest, ALiveJobsFileIsRefusedNamingThePathAndWhatDiffers) {
  TempDir dir;
  const std::string path = temp_file(dir);
  FileStore zero(path, 5s, FileStoreJob{0, 2, "run-a"});
  FileStore one(path, 5s, FileStoreJob{1, 2, "run-a"});
  const auto refused = [&](const FileStoreJob& job, const std::vector<std::string>& parts) {
    const auto start = test::Clock::now();
    try {
      FileStore other(path, 5s, job);
      ADD_FAILURE() << "rank " << job.rank << " joined a live job's file";
    } catch (const StoreError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("'" + path + "' is in use by another job"), std::string::npos) << what;
      for (const auto& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what;
    }
    EXPECT_LT(test::Clock::now() - start, 2s) << "refused at once, not at the timeout";
  };
  refused({0, 2, "run-a"}, {"run id 'run-a'"});                    // a second rank 0
  refused({1, 2, "run-a"}, {"rank 1 is a live process already"});  // rank taken
  refused({1, 3, "run-a"}, {"2 ranks, not 3"});
  refused({1, 2, "run-b"}, {"run id 'run-a', not 'run-b'"});
}

// A job whose rank 0 has left while its other ranks still run is ending (or hung): a new rank 0
// waits for it to end, but not for long, then calls the file in use.
TEST(FileStoreJobTest, RankZeroWaitsForAnEndingJobThenCallsTheFileInUse) {
  TempDir dir;
  const std::string path = temp_file(dir);
  auto old_zero = std::make_unique<FileStore>(path, 5s, FileStoreJob{0, 2, ""});
  auto old_one = std::make_unique<FileStore>(path, 5s, FileStoreJob{1, 2, ""});
  old_zero.reset();
  std::thread ending([&] {
    std::this_thread::sleep_for(200ms);
    old_one.reset();
  });
  {
    FileStore fresh(path, 5s, FileStoreJob{0, 2, ""});  // the old job ended meanwhile
    EXPECT_FALSE(fresh.check(std::vector<std::string>{"anything"}));
  }
  ending.join();

  auto hung_zero = std::make_unique<FileStore>(path, 5s, FileStoreJob{0, 2, ""});
  FileStore hung_one(path, 5s, FileStoreJob{1, 2, ""});
  hung_zero.reset();
  const auto start = test::Clock::now();
  try {
    FileStore fresh(path, 500ms, FileStoreJob{0, 2, ""});
    ADD_FAILURE() << "rank 0 took a file a live rank still holds";
  } catch (const StoreError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("is in use by another job"), std::string::npos) << what;
    EXPECT_NE(what.find("but not its rank 0"), std::string::npos) << what;
  }
  EXPECT_LT(test::Clock::now() - start, 3s);
}

TEST(FileStoreJobTest, TheLastMemberToLeaveDeletesTheFile) {
  TempDir dir;
  const std::string path = temp_file(dir);
  auto zero = std::make_unique<FileStore>(path, 5s, FileStoreJob{0, 2, ""});
  auto one = std::make_unique<FileStore>(path, 5s, FileStoreJob{1, 2, ""});
  zero.reset();
  EXPECT_TRUE(std::filesystem::exists(path)) << "rank 1 still holds it";
  one.reset();
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(FileStoreJobTest, AJoinerThatNeverSeesItsRankZeroTimesOutSayingWhatTheFileHeld) {
  TempDir dir;
  const std::string path = temp_file(dir);
  {
    FileStore stale(path, 5s);
    stale.set("k", std::string_view("v"));
  }
  try {
    FileStore one(path, 300ms, FileStoreJob{1, 2, ""});
    ADD_FAILURE() << "joined without a rank 0";
  } catch (const TimeoutError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find(path), std::string::npos) << what;
    EXPECT_NE(what.find("waiting for rank 0"), std::string::npos) << what;
    EXPECT_NE(what.find("no generation"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace c10d::inline v1
