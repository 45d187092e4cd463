// train_fmnist's checkpoints: the whole state of a training run, so that a run resumed from one
// goes on exactly as the run that wrote it would have (the same losses, bit for bit).
//
// A checkpoint is one state_dict file (nn::save_state_dict: written to <path>.tmp, fsynced,
// renamed onto <path>, the directory fsynced, so a kill at any moment leaves the old file or
// the new one) holding
//   model.<name>   the model's parameters
//   optim.<name>   the optimizer's state (its step count and momentum buffers)
//   progress       int64 [epoch, step, global_step, world, batch, limit, seed]: the epoch in
//                  progress (0-based), the steps of it done, the steps done in all, and what
//                  fixes which samples each step takes, which a resume must not change. The
//                  seed (its bits) gives the model's initial values and every epoch's data order
//                  (DistributedSampler shuffles by seed and epoch), so the data-order state is
//                  (seed, epoch, step); the run draws no other random numbers
//   loss_sums      float64 [world]: each rank's sum of its losses so far this epoch, so that the
//                  epoch's mean loss is the same after a resume
//   checksum       int64 [crc32, bytes]: a CRC-32 of every entry before it (name, dtype, shape,
//                  data) and how many bytes that covered
// A file that is truncated, fails the format's checks, or whose checksum does not match is
// refused with an InvalidArgument naming the file and the fault: it is never loaded.
//
// --checkpoint-dir D keeps step-<global step, 10 digits>.ckpt files there; the newest
// kKeepCheckpoints stay, so that a damaged newest one still leaves one to resume from.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "c10d/nn.h"
#include "c10d/optim.h"

namespace fmnist {

inline constexpr int kKeepCheckpoints = 3;

// Where training stands, besides the model and the optimizer.
struct Progress {
  std::int64_t epoch = 0;        // the epoch in progress, 0-based
  std::int64_t step = 0;         // steps of it done
  std::int64_t global_step = 0;  // steps done in all epochs
  std::int64_t world = 0;
  std::int64_t batch = 0;
  std::int64_t limit = 0;
  std::uint64_t seed = 0;
  std::vector<double> loss_sums;  // by rank
};

// Writes the checkpoint at `path` (atomically; nn::save_state_dict).
void save_checkpoint(const std::string& path, const c10d::nn::Module& model,
                     const c10d::optim::Optimizer& opt, const Progress& progress);

// Checks the file at `path` whole (format and checksum) and returns its progress, loading
// nothing. Throws InvalidArgument naming the file and what is wrong.
Progress verify_checkpoint(const std::string& path);

// Checks the file as verify_checkpoint does, then loads it into `model` and `opt`.
Progress load_checkpoint(const std::string& path, c10d::nn::Module& model,
                         c10d::optim::Optimizer& opt);

// Why a run with `want`'s world, batch, limit and seed cannot resume from `have`, or "".
std::string mismatch(const Progress& have, const Progress& want);

// Why rank 0 could not write the checkpoint `path` (--checkpoint), or "" when it can: checked
// before training, so a typo costs seconds, not an epoch. Creates and removes the temporary
// the save writes (<path>.tmp), the one test that covers permissions, read-only file systems
// and a directory in the way alike.
std::string checkpoint_fault(const std::string& path);

// The same for --checkpoint-dir `dir`, which is made first when missing (as mkdir -p).
std::string checkpoint_dir_fault(const std::string& dir);

// The checkpoints of --checkpoint-dir.
class CheckpointDir {
 public:
  explicit CheckpointDir(std::filesystem::path dir) : dir_(std::move(dir)) {}

  std::string path_for(std::int64_t global_step) const;
  // The global steps of the checkpoints there, newest first.
  std::vector<std::int64_t> steps_newest_first() const;
  // Removes all but the newest kKeepCheckpoints, and temporaries a killed writer left.
  void prune() const;
  const std::filesystem::path& dir() const { return dir_; }

 private:
  std::filesystem::path dir_;
};

}  // namespace fmnist
