// train_fmnist's command line (the flags are listed in train_fmnist.cc). Every value is checked
// whole and against its range; a bad one prints the usage and exits 2 naming the flag.
#pragma once

#include <cstdint>
#include <string>

namespace fmnist {

struct Flags {
  std::string backend;
  int epochs = 3;
  std::int64_t batch = 64;
  double lr = 0.05;
  double momentum = 0.9;
  std::string mode = "ddp";
  std::string checkpoint;
  std::string resume;
  std::string checkpoint_dir;
  std::int64_t checkpoint_every = 0;  // 0: at the end of each epoch only
  bool log_steps = false;
  std::int64_t limit = 0;
  std::string data;
  std::uint64_t seed = 0;
  int progress = 100;
  double min_accuracy = 0;
  int kill_rank = -1;
  std::int64_t kill_step = -1;
};

// Prints `why` (when not empty) and the usage, to stderr (stdout for code 0), and exits.
[[noreturn]] void usage(const std::string& why, int code = 2);

Flags parse_flags(int argc, char** argv);

}  // namespace fmnist
