// examples/train_fmnist as users run it, under c10drun with real processes and the lazy core:
// a rank killed mid-training makes the launcher exit non-zero within seconds naming it, a
// checkpoint round trip resumes with the same loss as a run that never stopped, and bad flags,
// checkpoint paths, resume files and a diverging loss each end the run naming the fault.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "../store/child_process.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::TempDir;

std::string train_path() { return (test::build_dir() / "examples" / "train_fmnist").string(); }
std::string launcher_path() { return (test::build_dir() / "tools" / "c10drun").string(); }

// c10drun --nproc-per-node n train_fmnist <args>, small and quick: 1024 samples, batch 32.
struct Training {
  TempDir dir;
  std::unique_ptr<ChildProcess> launcher;
  test::ChildExit exit;

  Training(int n, std::vector<std::string> args, std::chrono::seconds limit = 120s) {
    std::vector<std::string> argv{launcher_path(),   "--nproc-per-node",
                                  std::to_string(n), train_path(),
                                  "--limit",         "1024",
                                  "--batch-size",    "32",
                                  "--progress",      "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    launcher = std::make_unique<ChildProcess>(argv, test::EnvChanges{}, dir.path(), "c10drun");
    exit = launcher->wait(std::chrono::steady_clock::now() + limit);
  }
  std::string out() const { return launcher->out(); }
  std::string err() const { return launcher->err(); }
};

// The "loss X" of the line for `epoch`.
// (A plain search: std::regex trips GCC 12's -Wmaybe-uninitialized in the sanitized builds.)
std::string loss_of_epoch(const std::string& out, int epoch) {
  const std::string key = "epoch " + std::to_string(epoch) + " loss ";
  const std::size_t at = out.find(key);
  if (at == std::string::npos) return "(no epoch line)";
  const std::size_t from = at + key.size();
  const std::size_t to = out.find_first_not_of("0123456789.", from);
  return to == from ? std::string("(no epoch line)") : out.substr(from, to - from);
}

TEST(TrainFmnistTest, TwoRanksTrainAndReportEveryEpoch) {
  Training t(2, {"--epochs", "2"});
  ASSERT_EQ(t.exit.code, 0) << t.out() << t.err();
  EXPECT_NE(t.out().find("epoch 2 loss"), std::string::npos) << t.out();
  EXPECT_NE(t.out().find("test accuracy"), std::string::npos) << t.out();
  EXPECT_LT(std::stod(loss_of_epoch(t.out(), 2)), std::stod(loss_of_epoch(t.out(), 1)));
}

TEST(TrainFmnistTest, CheckpointRoundTripResumesWithTheSameLoss) {
  for (const std::string mode : {"ddp", "optimizer_step"}) {
    Training straight(2, {"--epochs", "2", "--mode", mode});
    ASSERT_EQ(straight.exit.code, 0) << straight.out() << straight.err();
    TempDir ckpt_dir;
    const std::string ckpt = (std::filesystem::path(ckpt_dir.path()) / "ckpt").string();
    Training first(2, {"--epochs", "1", "--mode", mode, "--checkpoint", ckpt});
    ASSERT_EQ(first.exit.code, 0) << first.out() << first.err();
    Training resumed(2, {"--epochs", "2", "--mode", mode, "--resume", ckpt});
    ASSERT_EQ(resumed.exit.code, 0) << resumed.out() << resumed.err();
    EXPECT_NE(resumed.out().find("resumed from"), std::string::npos) << resumed.out();
    EXPECT_EQ(resumed.out().find("epoch 1 loss"), std::string::npos) << resumed.out();
    EXPECT_EQ(loss_of_epoch(resumed.out(), 2), loss_of_epoch(straight.out(), 2))
        << mode << "\nstraight:\n"
        << straight.out() << "\nresumed:\n"
        << resumed.out();
  }
}

TEST(TrainFmnistTest, KilledRankStopsTheJobWithinSecondsNamingIt) {
  const auto start = std::chrono::steady_clock::now();
  Training t(3, {"--epochs", "1", "--kill-at", "1:3"}, 60s);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_FALSE(t.exit.timed_out);
  EXPECT_NE(t.exit.code, 0) << t.out() << t.err();
  EXPECT_LT(took, 30s);  // the data loading dominates; a hang would take the 120 s op timeout
  EXPECT_NE(t.err().find("rank 1"), std::string::npos) << t.err();
  EXPECT_NE(t.err().find("SIGKILL"), std::string::npos) << t.err();
}

TEST(TrainFmnistTest, BadFlagsAreUsageErrors) {
  // Each value is checked whole and against its range before anything starts, naming the flag.
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--mode", "sideways"}, "--mode is ddp or optimizer_step"},
      {{"--epochs", "3x"}, "--epochs takes an integer from 1 to 1000000, not '3x'"},
      {{"--epochs", "0"}, "--epochs takes an integer"},
      {{"--batch-size", "99999999999999999999"}, "--batch-size takes an integer"},
      {{"--limit", "-5"}, "--limit takes an integer"},
      {{"--seed", "-1"}, "--seed takes an integer"},
      {{"--lr", "nan"}, "--lr takes a positive number, not 'nan'"},
      {{"--lr", "-0.1"}, "--lr takes a positive number"},
      {{"--lr", "0.1x"}, "--lr takes a positive number"},
      {{"--momentum", "1"}, "--momentum takes a number from 0 up to (not including) 1"},
      {{"--min-accuracy", "85"}, "--min-accuracy takes a fraction from 0 to 1"},
      {{"--kill-at", "1:x"}, "--kill-at STEP takes an integer"},
      {{"--checkpoint", ""}, "--checkpoint needs a value"},
      {{"--epochs"}, "--epochs needs a value"},
      {{"--frobnicate", "1"}, "unknown flag --frobnicate"},
      {{"stray"}, "unexpected argument 'stray'"},
  };
  for (const auto& [args, message] : cases) {
    TempDir dir;
    std::vector<std::string> argv{train_path()};
    argv.insert(argv.end(), args.begin(), args.end());
    ChildProcess p(argv, {}, dir.path(), "train");
    const auto exit = p.wait(std::chrono::steady_clock::now() + 30s);
    EXPECT_EQ(exit.code, 2) << args[0];
    EXPECT_NE(p.err().find(message), std::string::npos) << p.err();
  }
}

// A checkpoint path rank 0 cannot write is found before training, not after the first epoch.
TEST(TrainFmnistTest, CheckpointInAMissingDirectoryFailsBeforeTraining) {
  TempDir ckpt_dir;
  const std::string ckpt = (ckpt_dir.path() / "missing" / "ckpt").string();
  Training t(2, {"--epochs", "1", "--checkpoint", ckpt});
  EXPECT_FALSE(t.exit.timed_out);
  EXPECT_NE(t.exit.code, 0) << t.out() << t.err();
  EXPECT_NE(t.err().find("--checkpoint " + ckpt + ": directory '" +
                         (ckpt_dir.path() / "missing").string() + "'"),
            std::string::npos)
      << t.err();
  EXPECT_EQ(t.out().find("epoch 1 loss"), std::string::npos) << t.out();
  EXPECT_EQ(t.out().find("train_fmnist: 2 ranks"), std::string::npos) << t.out();
}

// The checkpoint is written to <path>.tmp and renamed onto <path>: watched with inotify, the
// directory sees no other name (no doubled ".tmp.tmp").
TEST(TrainFmnistTest, CheckpointIsWrittenThroughOneTemporary) {
  TempDir ckpt_dir;
  const int watch = ::inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  ASSERT_GE(watch, 0);
  ASSERT_GE(
      ::inotify_add_watch(watch, ckpt_dir.path().c_str(), IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO),
      0);
  const std::string ckpt = (ckpt_dir.path() / "ckpt").string();
  Training t(1, {"--epochs", "2", "--checkpoint", ckpt});
  ASSERT_EQ(t.exit.code, 0) << t.out() << t.err();
  std::set<std::string> names;
  alignas(inotify_event) char buffer[64 << 10];
  for (;;) {
    const ssize_t n = ::read(watch, buffer, sizeof(buffer));
    if (n <= 0) break;
    for (ssize_t at = 0; at < n;) {
      const auto* event = reinterpret_cast<const inotify_event*>(buffer + at);
      if (event->len > 0) names.insert(event->name);
      at += static_cast<ssize_t>(sizeof(inotify_event) + event->len);
    }
  }
  ::close(watch);
  EXPECT_EQ(names, (std::set<std::string>{"ckpt", "ckpt.tmp"}));
  EXPECT_FALSE(std::filesystem::exists(ckpt + ".tmp"));
  EXPECT_TRUE(std::filesystem::is_regular_file(ckpt));
}

// --resume reads only a regular file with a good header: /dev/zero (which never ends) and a
// file of garbage each fail at once, naming the file and the fault.
TEST(TrainFmnistTest, ResumeFromANonRegularOrCorruptFileFailsNamingIt) {
  Training zero(1, {"--epochs", "1", "--resume", "/dev/zero"}, 60s);
  EXPECT_FALSE(zero.exit.timed_out);
  EXPECT_NE(zero.exit.code, 0);
  EXPECT_NE(zero.err().find("'/dev/zero' is a character device, not a regular file"),
            std::string::npos)
      << zero.err();

  TempDir dir;
  const std::string garbage = (dir.path() / "garbage").string();
  {
    std::ofstream out(garbage);
    out << "this is not a checkpoint, just some text that is long enough";
  }
  Training corrupt(1, {"--epochs", "1", "--resume", garbage}, 60s);
  EXPECT_NE(corrupt.exit.code, 0);
  EXPECT_NE(corrupt.err().find("'" + garbage + "'"), std::string::npos) << corrupt.err();
  EXPECT_NE(corrupt.err().find("bad magic"), std::string::npos) << corrupt.err();
}

// A loss that is not finite ends the run with a non-zero status naming the epoch, step and
// rank; a diverged run must not look like a finished one.
TEST(TrainFmnistTest, NonFiniteLossFailsTheRunNamingWhere) {
  Training t(2, {"--epochs", "1", "--lr", "1e30"});
  EXPECT_FALSE(t.exit.timed_out);
  EXPECT_NE(t.exit.code, 0) << t.out() << t.err();
  EXPECT_NE(t.err().find("the training loss is "), std::string::npos) << t.err();
  EXPECT_NE(t.err().find("at epoch 1 step "), std::string::npos) << t.err();
  // Every rank diverges at the same step (DDP keeps their weights equal); whichever reports
  // first ends the job.
  EXPECT_TRUE(t.err().find("rank 0: the training loss") != std::string::npos ||
              t.err().find("rank 1: the training loss") != std::string::npos)
      << t.err();
  EXPECT_EQ(t.out().find("epoch 1 loss"), std::string::npos) << t.out();
}

}  // namespace
}  // namespace c10d::inline v1
