// examples/train_fmnist as users run it, under c10drun with real processes and the lazy core:
// a rank killed mid-training makes the launcher exit non-zero within seconds naming it, and
// a checkpoint round trip resumes with the same loss as a run that never stopped.
#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <string>
#include <vector>

#include "../store/child_process.h"

namespace c10d {
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
  TempDir dir;
  ChildProcess p({train_path(), "--mode", "sideways"}, {}, dir.path(), "train");
  const auto exit = p.wait(std::chrono::steady_clock::now() + 30s);
  EXPECT_EQ(exit.code, 2);
  EXPECT_NE(p.err().find("--mode is ddp or optimizer_step"), std::string::npos) << p.err();
}

}  // namespace
}  // namespace c10d
