#include "train_fmnist_flags.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <set>
#include <system_error>

namespace fmnist {
namespace {

// Strict numbers: the whole value must be the number (no "3x", no " 3", no overflow), in range.
template <typename T>
T integer_flag(const std::string& flag, const std::string& v, T min, T max) {
  T out{};
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || out < min || out > max) {
    usage(fmt::format("{} takes an integer from {} to {}, not '{}'", flag, min, max, v));
  }
  return out;
}

// A finite number that `ok` accepts; `what` says which numbers those are.
template <typename Ok>
double real_flag(const std::string& flag, const std::string& v, const char* what, Ok ok) {
  double out = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), out);
  if (ec != std::errc() || end != v.data() + v.size() || !std::isfinite(out) || !ok(out)) {
    usage(fmt::format("{} takes {}, not '{}'", flag, what, v));
  }
  return out;
}

}  // namespace

[[noreturn]] void usage(const std::string& why, int code) {
  std::fprintf(code == 0 ? stdout : stderr,
               "%s%susage: train_fmnist [--backend tcp|mpi|ici] [--epochs N] "
               "[--batch-size N] [--lr X] [--momentum X] [--mode ddp|optimizer_step] "
               "[--checkpoint PATH] [--resume PATH] [--checkpoint-dir DIR] "
               "[--checkpoint-every K] [--log-steps] [--limit N] [--data DIR] [--seed N] "
               "[--progress N] [--min-accuracy X] [--kill-at RANK:STEP]\n",
               why.empty() ? "" : "train_fmnist: ", why.empty() ? "" : (why + "\n").c_str());
  std::exit(code);
}

Flags parse_flags(int argc, char** argv) {
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage("", 0);
    if (arg.rfind("--", 0) != 0) usage("unexpected argument '" + arg + "' (flags start with --)");
    if (arg == "--log-steps") {  // the one flag without a value
      f.log_steps = true;
      continue;
    }
    static const std::set<std::string> kFlags = {
        "--backend",      "--epochs",  "--batch-size",     "--lr",
        "--momentum",     "--mode",    "--checkpoint",     "--resume",
        "--limit",        "--data",    "--seed",           "--progress",
        "--min-accuracy", "--kill-at", "--checkpoint-dir", "--checkpoint-every"};
    if (kFlags.count(arg) == 0) usage("unknown flag " + arg);
    if (i + 1 >= argc) usage(arg + " needs a value");
    const std::string v = argv[++i];
    if (v.empty()) usage(arg + " needs a value, not an empty string");
    if (arg == "--backend") {
      f.backend = v;
    } else if (arg == "--epochs") {
      f.epochs = integer_flag(arg, v, 1, 1'000'000);
    } else if (arg == "--batch-size") {
      f.batch = integer_flag<std::int64_t>(arg, v, 1, kMaxInt);
    } else if (arg == "--lr") {
      f.lr = real_flag(arg, v, "a positive number", [](double x) { return x > 0; });
    } else if (arg == "--momentum") {
      f.momentum = real_flag(arg, v, "a number from 0 up to (not including) 1",
                             [](double x) { return x >= 0 && x < 1; });
    } else if (arg == "--mode") {
      if (v != "ddp" && v != "optimizer_step") {
        usage("--mode is ddp or optimizer_step, not '" + v + "'");
      }
      f.mode = v;
    } else if (arg == "--checkpoint") {
      f.checkpoint = v;
    } else if (arg == "--resume") {
      f.resume = v;
    } else if (arg == "--checkpoint-dir") {
      f.checkpoint_dir = v;
    } else if (arg == "--checkpoint-every") {
      f.checkpoint_every = integer_flag<std::int64_t>(arg, v, 1, kMaxInt64);
    } else if (arg == "--limit") {
      f.limit = integer_flag<std::int64_t>(arg, v, 0, kMaxInt64);
    } else if (arg == "--data") {
      f.data = v;
    } else if (arg == "--seed") {
      f.seed = integer_flag<std::uint64_t>(arg, v, 0, std::numeric_limits<std::uint64_t>::max());
    } else if (arg == "--progress") {
      f.progress = integer_flag(arg, v, 0, kMaxInt);
    } else if (arg == "--min-accuracy") {
      f.min_accuracy = real_flag(arg, v, "a fraction from 0 to 1 (0.85 for 85%)",
                                 [](double x) { return x >= 0 && x <= 1; });
    } else if (arg == "--kill-at") {
      const auto colon = v.find(':');
      if (colon == std::string::npos) usage("--kill-at takes RANK:STEP, not '" + v + "'");
      f.kill_rank = integer_flag(arg + " RANK", v.substr(0, colon), 0, kMaxInt);
      f.kill_step = integer_flag<std::int64_t>(arg + " STEP", v.substr(colon + 1), 0, kMaxInt64);
    }
  }
  if (f.checkpoint_every > 0 && f.checkpoint_dir.empty()) {
    usage("--checkpoint-every needs --checkpoint-dir");
  }
  if (!f.resume.empty() && !f.checkpoint_dir.empty()) {
    usage(
        "--resume and --checkpoint-dir do not go together: the directory's newest checkpoint "
        "is resumed by itself");
  }
  return f;
}

}  // namespace fmnist
