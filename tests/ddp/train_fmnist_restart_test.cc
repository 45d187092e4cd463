// train_fmnist --checkpoint-dir under c10drun, small and quick (1024 samples, batch 32, 16 steps
// per epoch on 2 ranks): a run killed mid-epoch and restarted ends with the very checkpoint an
// uninterrupted run writes; a damaged newest checkpoint (truncated, or a flipped byte) is
// refused with a message naming it and the one before it is used; a checkpoint of other
// settings is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../store/child_process.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::TempDir;

// c10drun --nproc-per-node 2 [--max-restarts R] train_fmnist --limit 1024 --batch-size 32
// --progress 0 <args>.
struct Training {
  TempDir out_dir;
  std::unique_ptr<ChildProcess> launcher;
  test::ChildExit exit;

  explicit Training(std::vector<std::string> args, int max_restarts = 0) {
    std::vector<std::string> argv{(test::build_dir() / "tools" / "c10drun").string(),
                                  "--nproc-per-node",
                                  "2",
                                  "--max-restarts",
                                  std::to_string(max_restarts),
                                  (test::build_dir() / "examples" / "train_fmnist").string(),
                                  "--limit",
                                  "1024",
                                  "--batch-size",
                                  "32",
                                  "--progress",
                                  "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    launcher = std::make_unique<ChildProcess>(argv, test::EnvChanges{{"C10D_RESTART_COUNT", {}}},
                                              out_dir.path(), "c10drun");
    exit = launcher->wait(std::chrono::steady_clock::now() + 120s);
  }
  std::string out() const { return launcher->out(); }
  std::string err() const { return launcher->err(); }
  std::string describe() const { return launcher->describe(); }
};

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::string ckpt(const TempDir& dir, int step) {
  char name[32];
  std::snprintf(name, sizeof(name), "step-%010d.ckpt", step);
  return (dir.path() / name).string();
}

// Rank 1 dies before global step 23 (epoch 2, step 7); the restart resumes from the checkpoint
// of step 20 and re-runs steps 21-23. Model, optimizer and progress then end bit for bit as in
// a run that never stopped: the last checkpoints are the same bytes, and so are the losses.
TEST(TrainFmnistRestartTest, KilledRunResumesExactlyFromItsCheckpoint) {
  TempDir straight_dir, killed_dir;
  const std::vector<std::string> common = {"--epochs", "2", "--checkpoint-every", "5",
                                           "--log-steps"};
  std::vector<std::string> args = common;
  args.insert(args.end(), {"--checkpoint-dir", straight_dir.path().string()});
  Training straight(args);
  ASSERT_EQ(straight.exit.code, 0) << straight.describe();
  args = common;
  args.insert(args.end(), {"--checkpoint-dir", killed_dir.path().string(), "--kill-at", "1:23"});
  Training killed(args, /*max_restarts=*/1);
  ASSERT_EQ(killed.exit.code, 0) << killed.describe();

  EXPECT_TRUE(contains(killed.err(), "c10drun: attempt 0 failed: rank 1 (pid ")) << killed.err();
  EXPECT_TRUE(contains(killed.out(), "[rank 0]: resumed from " + ckpt(killed_dir, 20) +
                                         ": epoch 2 step 4, global step 20 (attempt 1)\n"))
      << killed.out();
  EXPECT_TRUE(contains(killed.out(), "[rank 0]: step 23 attempt 0\n")) << "ran before the kill";
  EXPECT_TRUE(contains(killed.out(), "[rank 0]: step 21 attempt 1\n")) << killed.out();
  EXPECT_FALSE(contains(killed.out(), "[rank 0]: step 20 attempt 1\n")) << killed.out();
  const std::string last = test::read_file(ckpt(straight_dir, 32));
  ASSERT_FALSE(last.empty());
  EXPECT_TRUE(last == test::read_file(ckpt(killed_dir, 32)))
      << "the final checkpoints differ: the resumed run did not continue exactly";
  // The epoch lines too (loss and accuracy), the resumed epoch's mean loss included.
  for (const std::string epoch : {"epoch 1 loss ", "epoch 2 loss "}) {
    const auto line_of = [&](const std::string& out) {  // up to the accuracy's '%'
      const std::size_t at = out.find(epoch);
      return at == std::string::npos ? std::string() : out.substr(at, out.find('%', at) - at);
    };
    EXPECT_EQ(line_of(killed.out()), line_of(straight.out())) << killed.out() << straight.out();
  }
}

// One epoch leaves checkpoints 10, 15 and 16 (the newest three). A damaged 16 is refused,
// named, and 15 is resumed from; a torn temporary of a write that never finished is not even
// considered.
TEST(TrainFmnistRestartTest, DamagedNewestCheckpointIsRefusedAndTheOneBeforeIsUsed) {
  struct Damage {
    std::string name;
    std::string message;
  };
  for (const Damage& damage :
       {Damage{"truncated", "truncated"}, Damage{"flipped", "checksum mismatch"}}) {
    SCOPED_TRACE(damage.name);
    TempDir dir;
    Training first(
        {"--epochs", "1", "--checkpoint-every", "5", "--checkpoint-dir", dir.path().string()});
    ASSERT_EQ(first.exit.code, 0) << first.describe();
    for (int step : {5, 10, 15, 16}) {
      EXPECT_EQ(std::filesystem::exists(ckpt(dir, step)), step != 5) << "step " << step;
    }
    const std::string newest = ckpt(dir, 16);
    std::string bytes = test::read_file(newest);
    if (damage.name == "truncated") {
      bytes.resize(bytes.size() / 2);
    } else {
      bytes[bytes.size() / 2] ^= 0x10;  // inside a weight: the format alone cannot tell
    }
    std::ofstream(newest, std::ios::binary | std::ios::trunc) << bytes;
    std::ofstream(ckpt(dir, 99) + ".tmp", std::ios::binary) << "half a checkpoint";

    Training resumed({"--epochs", "2", "--checkpoint-dir", dir.path().string()});
    ASSERT_EQ(resumed.exit.code, 0) << resumed.describe();
    EXPECT_TRUE(contains(resumed.err(), "train_fmnist: state_dict file '" + newest + "'") ||
                contains(resumed.err(), "train_fmnist: checkpoint '" + newest + "' is refused"))
        << resumed.err();
    EXPECT_TRUE(contains(resumed.err(), damage.message)) << resumed.err();
    EXPECT_TRUE(contains(resumed.err(), "; trying the one before it\n")) << resumed.err();
    EXPECT_TRUE(contains(resumed.out(), "[rank 0]: resumed from " + ckpt(dir, 15) +
                                            ": epoch 1 step 15, global step 15 (attempt 0)\n"))
        << resumed.out();
    EXPECT_TRUE(contains(resumed.out(), "epoch 2 loss ")) << resumed.out();
    EXPECT_FALSE(std::filesystem::exists(ckpt(dir, 99) + ".tmp")) << "pruned after a save";
  }
}

// A checkpoint fixes which samples every step takes: a run with another batch size (or world
// size, limit or seed) must not resume from it as if nothing changed.
TEST(TrainFmnistRestartTest, CheckpointOfOtherSettingsIsRefused) {
  TempDir dir;
  Training first({"--epochs", "1", "--checkpoint-dir", dir.path().string()});
  ASSERT_EQ(first.exit.code, 0) << first.describe();
  Training other({"--epochs", "2", "--seed", "7", "--checkpoint-dir", dir.path().string()});
  EXPECT_EQ(other.exit.code, 1) << other.describe();
  EXPECT_TRUE(contains(other.err(), "cannot resume from " + ckpt(dir, 16) +
                                        ": it was written by a run with --seed 0 (this run: 7)"))
      << other.err();
  EXPECT_FALSE(contains(other.out(), "epoch 2 loss")) << other.out();
}

}  // namespace
}  // namespace c10d::inline v1
