// train_fmnist: data-parallel training of an MLP (784-512-256-10, SGD with momentum) on
// Fashion-MNIST from Debian's dataset-fashion-mnist package. The main job of ./scripts/demo.
//
//   build/tools/c10drun --nproc-per-node 4 build/examples/train_fmnist --epochs 3
//   mpirun -np 4 build/examples/train_fmnist --backend mpi
//
// Flags (defaults in brackets):
//   --backend tcp|mpi|ici   [C10D_BACKEND or tcp]     --epochs N        [3]
//   --batch-size N          [64, per rank]            --lr X            [0.05]
//   --momentum X            [0.9]                      --mode ddp|optimizer_step  [ddp]
//   --checkpoint PATH       rank 0 writes model, optimizer and epoch there after each epoch
//                           (checked writable before training starts)
//   --resume PATH           every rank reads it and carries on from the next epoch
//   --limit N               train on the first N samples only (tests)
//   --data DIR              [/usr/share/datasets/fashion-mnist or C10D_FASHION_MNIST]
//   --seed N                [0]                        --progress N      [100, steps]
//   --min-accuracy X        exit 1 when the last epoch's test accuracy is below X (0 to 1)
//   --kill-at R:S           fault tests: rank R sends itself SIGKILL at step S of epoch 1
//
// Every value is checked whole and against its range (exit 2 naming the flag). A loss that is
// not finite stops the run (exit 1) naming the rank, epoch and step.
//
// Each epoch rank 0 prints the mean training loss over all ranks, the test accuracy (every rank
// scores a share of the test set), samples per second over all ranks and, for DDP, the share
// of step time spent communicating (and the part of it not hidden under backward).
#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "c10d/c10d.h"
#include "c10d/ddp.h"
#include "c10d/lazy.h"
#include "c10d/nn.h"
#include "c10d/optim.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace lazy = c10d::lazy;
namespace nn = c10d::nn;

struct Flags {
  std::string backend;
  int epochs = 3;
  std::int64_t batch = 64;
  double lr = 0.05;
  double momentum = 0.9;
  std::string mode = "ddp";
  std::string checkpoint;
  std::string resume;
  std::int64_t limit = 0;
  std::string data;
  std::uint64_t seed = 0;
  int progress = 100;
  double min_accuracy = 0;
  int kill_rank = -1;
  std::int64_t kill_step = -1;
};

[[noreturn]] void usage(const std::string& why, int code = 2) {
  std::fprintf(code == 0 ? stdout : stderr,
               "%s%susage: train_fmnist [--backend tcp|mpi|ici] [--epochs N] "
               "[--batch-size N] [--lr X] [--momentum X] [--mode ddp|optimizer_step] "
               "[--checkpoint PATH] [--resume PATH] [--limit N] [--data DIR] [--seed N] "
               "[--progress N] [--min-accuracy X] [--kill-at RANK:STEP]\n",
               why.empty() ? "" : "train_fmnist: ", why.empty() ? "" : (why + "\n").c_str());
  std::exit(code);
}

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

Flags parse(int argc, char** argv) {
  constexpr int kMaxInt = std::numeric_limits<int>::max();
  constexpr std::int64_t kMaxInt64 = std::numeric_limits<std::int64_t>::max();
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage("", 0);
    if (arg.rfind("--", 0) != 0) usage("unexpected argument '" + arg + "' (flags start with --)");
    static const std::set<std::string> kFlags = {
        "--backend", "--epochs",     "--batch-size",   "--lr",     "--momentum",
        "--mode",    "--checkpoint", "--resume",       "--limit",  "--data",
        "--seed",    "--progress",   "--min-accuracy", "--kill-at"};
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
  return f;
}

std::shared_ptr<nn::Sequential> make_model(std::uint64_t seed) {
  lazy::Generator gen(seed);
  auto m = std::make_shared<nn::Sequential>();
  m->push_back(std::make_shared<nn::Linear>(784, 512, gen));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(512, 256, gen));
  m->push_back(std::make_shared<nn::ReLU>());
  m->push_back(std::make_shared<nn::Linear>(256, 10, gen));
  return m;
}

// One checkpoint file: the model's entries as "model.<name>", the optimizer's as
// "optim.<name>", and "epoch" (the last epoch done, int64). nn::save_state_dict writes
// <path>.tmp, fsyncs it and renames it onto <path>: a reader never sees half a checkpoint.
void save_checkpoint(const std::string& path, const nn::Module& model,
                     const c10d::optim::Optimizer& opt, int epoch) {
  nn::NamedTensors all;
  for (auto& [name, t] : model.state_dict()) all.emplace_back("model." + name, t);
  for (auto& [name, t] : opt.state_dict()) all.emplace_back("optim." + name, t);
  all.emplace_back(
      "epoch", c10d::Tensor::from_vector(std::vector<std::int64_t>{epoch}, c10d::DType::kInt64));
  nn::save_state_dict(all, path);
}

// Why rank 0 could not write a checkpoint to `path` at the end of an epoch, or "" when it can:
// checked before training so a typo costs seconds, not an epoch. Creates and removes the
// temporary the save writes (<path>.tmp), the one test that covers permissions, read-only file
// systems and a directory in the way alike.
std::string checkpoint_fault(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string dir = p.has_parent_path() ? p.parent_path().string() : ".";
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return fmt::format("--checkpoint {}: directory '{}' {}", path, dir, std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return fmt::format("--checkpoint {}: '{}' is not a directory", path, dir);
  }
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return fmt::format("--checkpoint {}: it exists and is not a regular file", path);
  }
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fmt::format("--checkpoint {}: cannot write '{}' in '{}': {}", path, tmp, dir,
                       std::strerror(errno));
  }
  ::close(fd);
  ::unlink(tmp.c_str());
  return "";
}

int load_checkpoint(const std::string& path, nn::Module& model, c10d::optim::Optimizer& opt) {
  nn::NamedTensors model_state, opt_state;
  std::optional<std::int64_t> epoch;
  for (auto& [name, t] : nn::read_state_dict(path)) {
    if (name.rfind("model.", 0) == 0) {
      model_state.emplace_back(name.substr(6), t);
    } else if (name.rfind("optim.", 0) == 0) {
      opt_state.emplace_back(name.substr(6), t);
    } else if (name == "epoch") {
      if (t.dtype() != c10d::DType::kInt64 || t.numel() != 1) {
        throw c10d::InvalidArgument(
            fmt::format("{}: 'epoch' must be one int64, not {}", path, t.to_string()));
      }
      epoch = t.data<std::int64_t>()[0];
    }
  }
  if (!epoch) throw c10d::InvalidArgument(path + ": not a train_fmnist checkpoint (no epoch)");
  if (*epoch < 0 || *epoch >= std::numeric_limits<int>::max()) {
    throw c10d::InvalidArgument(fmt::format("{}: epoch {} is out of range", path, *epoch));
  }
  model.load_state_dict(model_state);
  opt.load_state_dict(opt_state);
  return static_cast<int>(*epoch);
}

// Correct predictions and samples on this rank's share of the test set, summed over ranks.
double test_accuracy(nn::Module& model, const c10d::data::LabeledImages& test,
                     c10d::ProcessGroup& pg) {
  lazy::NoGradGuard no_grad;
  const std::int64_t n = test.labels.numel();
  const std::int64_t from = n * pg.rank() / pg.size(), to = n * (pg.rank() + 1) / pg.size();
  std::int64_t correct = 0;
  for (std::int64_t at = from; at < to; at += 1000) {
    const std::int64_t end = std::min(to, at + 1000);
    auto pred = lazy::argmax(model.forward(test.images.narrow_rows(at, end)), 1);
    const auto* p = pred.data<std::int64_t>();
    const auto* l = test.labels.data<std::int64_t>() + at;
    for (std::int64_t i = 0; i < end - at; ++i) correct += p[i] == l[i];
  }
  auto counts = c10d::Tensor::from_vector(std::vector<double>{double(correct), double(to - from)},
                                          c10d::DType::kFloat64);
  pg.all_reduce({counts})->wait(60s);
  return counts.data<double>()[0] / counts.data<double>()[1];
}

int run(const Flags& f) {
  c10d::InitOptions init;
  if (!f.backend.empty()) init.backend = f.backend;
  init.timeout = 120s;
  auto pg = c10d::init_process_group(init);
  const int rank = pg->rank(), world = pg->size();
  const bool lead = rank == 0;

  // Rank 0 writes the checkpoint: it checks now that it can, and every rank learns the answer,
  // so a bad path stops the job before the first epoch instead of after it.
  if (!f.checkpoint.empty()) {
    const std::string fault = lead ? checkpoint_fault(f.checkpoint) : "";
    // Said before the others hear of it: once one of them exits, the launcher stops this rank.
    if (!fault.empty()) fmt::print(stderr, "train_fmnist: {}\n", fault);
    auto bad = c10d::Tensor::from_vector(std::vector<std::int32_t>{fault.empty() ? 0 : 1},
                                         c10d::DType::kInt32);
    pg->broadcast({bad}, {.root = 0})->wait(60s);
    if (!fault.empty()) return 1;
    if (bad.data<std::int32_t>()[0] != 0) {
      throw c10d::InvalidArgument(
          fmt::format("rank {}: rank 0 cannot write the checkpoint {} (its message says why)", rank,
                      f.checkpoint));
    }
  }

  auto model = make_model(f.seed);
  std::optional<c10d::ddp::DistributedDataParallel> ddp;
  if (f.mode == "ddp") {
    ddp.emplace(model, pg);
  } else {  // optimizer_step: the same start everywhere, from rank 0
    for (const auto& p : model->parameters()) pg->broadcast({p})->wait(60s);
  }
  c10d::optim::SGD opt(model->parameters(), {.lr = f.lr, .momentum = f.momentum});
  int start_epoch = 0;
  if (!f.resume.empty()) {  // before the data: a bad file fails in a moment
    start_epoch = load_checkpoint(f.resume, *model, opt) + 1;
    if (lead) fmt::print("resumed from {} after epoch {}\n", f.resume, start_epoch);
  }

  const auto data = c10d::data::load_fashion_mnist(
      f.data.empty() ? c10d::data::default_fashion_mnist_dir() : std::filesystem::path(f.data));
  // Standardized with the training set's pixel mean and deviation (0.2860, 0.3530), as the
  // usual Fashion-MNIST recipes do: SGD converges faster on centred inputs.
  for (const auto* part : {&data.train, &data.test}) {
    float* px = part->images.data<float>();
    for (std::int64_t i = 0; i < part->images.numel(); ++i) px[i] = (px[i] - 0.2860f) / 0.3530f;
  }
  std::int64_t train_size = data.train.labels.numel();
  if (f.limit > 0) train_size = std::min(train_size, f.limit);

  c10d::data::DistributedSampler sampler(train_size, world, rank, /*shuffle=*/true, f.seed,
                                         /*drop_last=*/true);
  const std::int64_t steps = sampler.num_samples() / f.batch;
  if (steps == 0) usage("fewer samples per rank than one batch");
  if (lead) {
    fmt::print(
        "train_fmnist: {} ranks over {}, {} samples ({} steps of {} per rank per epoch), "
        "mode {}, lazy {}\n",
        world, pg->backend_name(), train_size, steps, f.batch, f.mode, lazy::is_lazy());
    std::fflush(stdout);
  }
  double accuracy = 0;
  for (int epoch = start_epoch; epoch < f.epochs; ++epoch) {
    sampler.set_epoch(epoch);
    const auto order = sampler.indices();
    const auto t0 = Clock::now();
    double loss_sum = 0, comm = 0, exposed = 0;
    for (std::int64_t s = 0; s < steps; ++s) {
      std::vector<std::int64_t> idx(order.begin() + s * f.batch, order.begin() + (s + 1) * f.batch);
      const auto x = c10d::data::gather_rows(data.train.images, idx);
      const auto y = c10d::data::gather_rows(data.train.labels, idx);
      if (rank == f.kill_rank && epoch == start_epoch && s == f.kill_step) ::raise(SIGKILL);
      opt.zero_grad();
      float step_loss = 0;
      if (ddp) {
        const auto loss = lazy::cross_entropy((*ddp)(x), y);
        ddp->backward(loss);
        opt.step();
        lazy::mark_step();
        step_loss = loss.data<float>()[0];
        comm += ddp->last_stats().comm_seconds;
        exposed += ddp->last_stats().wait_seconds;
      } else {
        const auto loss = lazy::cross_entropy(model->forward(x), y);
        lazy::backward(loss);
        c10d::ddp::optimizer_step(opt, pg);
        step_loss = loss.data<float>()[0];
      }
      // A diverged run must not finish "successfully": its checkpoint and accuracy are garbage.
      if (!std::isfinite(step_loss)) {
        throw c10d::Error(fmt::format(
            "rank {}: the training loss is {} at epoch {} step {} of {} (diverged; try a lower "
            "--lr, now {})",
            rank, step_loss, epoch + 1, s + 1, steps, f.lr));
      }
      loss_sum += step_loss;
      if (lead && f.progress > 0 && (s + 1) % f.progress == 0) {
        fmt::print("  epoch {} step {}/{} loss {:.4f}\n", epoch + 1, s + 1, steps,
                   loss_sum / static_cast<double>(s + 1));
        std::fflush(stdout);
      }
    }
    const double secs = std::chrono::duration<double>(Clock::now() - t0).count();
    auto mean_loss = c10d::Tensor::from_vector(std::vector<double>{loss_sum / double(steps)},
                                               c10d::DType::kFloat64);
    c10d::AllreduceOptions avg;
    avg.reduce.op = c10d::ReduceOp::kAvg;
    pg->all_reduce({mean_loss}, avg)->wait(60s);
    accuracy = test_accuracy(*model, data.test, *pg);
    if (lead) {
      const std::string comm_text =
          ddp ? fmt::format(", comm {:.0f}% of step time ({:.0f}% not overlapped)",
                            100 * comm / secs, 100 * exposed / secs)
              : "";
      fmt::print("epoch {} loss {:.4f} test accuracy {:.2f}% {:.0f} samples/s{}\n", epoch + 1,
                 mean_loss.data<double>()[0], 100 * accuracy,
                 double(steps * f.batch * world) / secs, comm_text);
      std::fflush(stdout);
    }
    if (lead && !f.checkpoint.empty()) save_checkpoint(f.checkpoint, *model, opt, epoch);
    pg->barrier()->wait(60s);  // the checkpoint is whole before anyone may resume from it
  }
  if (f.min_accuracy > 0 && accuracy < f.min_accuracy) {
    if (lead) {
      fmt::print(stderr, "train_fmnist: test accuracy {:.2f}% is below the required {:.2f}%\n",
                 100 * accuracy, 100 * f.min_accuracy);
    }
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = parse(argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    fmt::print(stderr, "train_fmnist: {}\n", e.what());
    return 1;
  }
}
