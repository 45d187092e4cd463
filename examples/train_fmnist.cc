// train_fmnist: data-parallel training of an MLP (784-512-256-10, SGD with momentum) on
// Fashion-MNIST from Debian's dataset-fashion-mnist package. The main job of ./scripts/demo.
//
//   build/tools/c10drun --nproc-per-node 4 build/examples/train_fmnist --epochs 3
//   build/tools/c10drun --nproc-per-node 4 --max-restarts 3 build/examples/train_fmnist
//       --checkpoint-dir ckpt --checkpoint-every 100      (one line: survives failed ranks)
//   mpirun -np 4 build/examples/train_fmnist --backend mpi
//
// Flags (defaults in brackets; train_fmnist_flags.h parses them):
//   --backend tcp|mpi|ici   [C10D_BACKEND or tcp]     --epochs N        [3]
//   --batch-size N          [64, per rank]            --lr X            [0.05]
//   --momentum X            [0.9]                      --mode ddp|optimizer_step  [ddp]
//   --checkpoint PATH       rank 0 writes a checkpoint there after each epoch
//                           (checked writable before training starts)
//   --resume PATH           every rank reads it and carries on from where it was written
//   --checkpoint-dir DIR    rank 0 writes checkpoints there (made when missing) at the end of
//                           each epoch and every K steps; a run started on it resumes from
//                           the newest good one by itself (a restart under c10drun
//                           --max-restarts, or a new run)
//   --checkpoint-every K    [0: at the end of each epoch only] with --checkpoint-dir
//   --log-steps             rank 0 prints "step G attempt A" after each step it finishes (G
//                           counts from 1 over all epochs; A is C10D_RESTART_COUNT)
//   --limit N               train on the first N samples only (tests)
//   --data DIR              [/usr/share/datasets/fashion-mnist or C10D_FASHION_MNIST]
//   --seed N                [0]                        --progress N      [100, steps]
//   --min-accuracy X        exit 1 when the last epoch's test accuracy is below X (0 to 1)
//   --kill-at R:S           fault tests: rank R sends itself SIGKILL before step S (0-based,
//                           over all epochs), in attempt 0 only (C10D_RESTART_COUNT 0 or unset)
//
// Checkpoints (fmnist_checkpoint.h) hold the whole state (model, optimizer, epoch and step,
// the data order's seed, the epoch's losses so far), so a resumed run goes on exactly as the
// one that wrote it would have. Only rank 0 writes them: DDP keeps every rank's model and
// optimizer identical, so one copy is the whole state. Rank 0 also picks the checkpoint to
// resume from (the newest whose checksum holds; a damaged one is named and skipped) and tells
// the others which; every rank then reads that file, so the directory must be one that every
// rank sees (one host, or a shared file system).
//
// Every value is checked whole and against its range (exit 2 naming the flag). A loss that is
// not finite stops the run (exit 1) naming the rank, epoch and step.
//
// Each epoch rank 0 prints the mean training loss over all ranks, the test accuracy (every rank
// scores a share of the test set), samples per second over all ranks and, for DDP, the share
// of step time spent communicating (and the part of it not hidden under backward).
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "c10d/c10d.h"
#include "c10d/ddp.h"
#include "c10d/lazy.h"
#include "c10d/nn.h"
#include "c10d/optim.h"
#include "fmnist_checkpoint.h"
#include "train_fmnist_flags.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace lazy = c10d::lazy;
namespace nn = c10d::nn;
using fmnist::Flags;
using fmnist::Progress;
using fmnist::usage;

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

// The attempt of a job that c10drun restarts (C10D_RESTART_COUNT), 0 on the first run.
int attempt_from_env() {
  const char* text = std::getenv("C10D_RESTART_COUNT");
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  if (*end != '\0' || value < 0 || value > 1'000'000) {
    throw c10d::InvalidArgument(fmt::format("C10D_RESTART_COUNT '{}' is not an attempt", text));
  }
  return static_cast<int>(value);
}

// Rank 0's verdict, which every rank learns: "" to go on, else why (rank 0 prints it first:
// once the others exit, the launcher stops rank 0). Returns whether the run goes on.
bool agree_with_rank0(c10d::ProcessGroup& pg, const std::string& fault, const std::string& what) {
  if (!fault.empty()) fmt::print(stderr, "train_fmnist: {}\n", fault);
  auto bad = c10d::Tensor::from_vector(std::vector<std::int32_t>{fault.empty() ? 0 : 1},
                                       c10d::DType::kInt32);
  pg.broadcast({bad}, {.root = 0})->wait(60s);
  if (!fault.empty()) return false;
  if (bad.data<std::int32_t>()[0] != 0) {
    throw c10d::InvalidArgument(
        fmt::format("rank {}: rank 0 {} (its message says why)", pg.rank(), what));
  }
  return true;
}

// The newest checkpoint of `dir` that rank 0 finds whole, loaded on every rank; `fresh` when
// there is none. Damaged ones are named and skipped; one written by a run with another world
// size, batch, limit or seed stops the run (std::nullopt) rather than be silently ignored.
std::optional<Progress> resume_from_dir(const fmnist::CheckpointDir& dir, const Progress& fresh,
                                        nn::Module& model, c10d::optim::Optimizer& opt,
                                        c10d::ProcessGroup& pg, int attempt) {
  std::int64_t chosen = -1;
  std::string fault;
  if (pg.rank() == 0) {
    for (const std::int64_t step : dir.steps_newest_first()) {
      try {
        const Progress have = fmnist::verify_checkpoint(dir.path_for(step));
        if (const std::string why = fmnist::mismatch(have, fresh); !why.empty()) {
          fault = fmt::format(
              "cannot resume from {}: it was written by a run with {}; start it "
              "with the same settings, or use another --checkpoint-dir",
              dir.path_for(step), why);
        }
        chosen = step;
        break;
      } catch (const c10d::InvalidArgument& e) {
        fmt::print(stderr, "train_fmnist: {}; trying the one before it\n", e.what());
      }
    }
  }
  if (!agree_with_rank0(pg, fault, "cannot resume from --checkpoint-dir " + dir.dir().string())) {
    return std::nullopt;
  }
  auto chosen_t = c10d::Tensor::from_vector(std::vector<std::int64_t>{chosen}, c10d::DType::kInt64);
  pg.broadcast({chosen_t}, {.root = 0})->wait(60s);
  chosen = chosen_t.data<std::int64_t>()[0];
  if (chosen < 0) return fresh;
  const std::string path = dir.path_for(chosen);
  const Progress p = fmnist::load_checkpoint(path, model, opt);
  if (pg.rank() == 0) {
    fmt::print("resumed from {}: epoch {} step {}, global step {} (attempt {})\n", path,
               p.epoch + 1, p.step, p.global_step, attempt);
  }
  return p;
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

// Writes `progress` to --checkpoint-dir (rank 0), with every rank's loss sum so far: a
// collective, so every rank calls it.
void save_to_dir(const fmnist::CheckpointDir& dir, Progress progress, double loss_sum,
                 const nn::Module& model, const c10d::optim::Optimizer& opt, c10d::ProcessGroup& pg,
                 int attempt) {
  // Each rank fills its own slot; a sum of one value and zeros is that value, bit for bit.
  std::vector<double> sums(static_cast<std::size_t>(pg.size()), 0.0);
  sums[static_cast<std::size_t>(pg.rank())] = loss_sum;
  auto t = c10d::Tensor::from_vector(sums, c10d::DType::kFloat64);
  pg.all_reduce({t})->wait(60s);
  if (pg.rank() != 0) return;
  progress.loss_sums.assign(t.data<double>(), t.data<double>() + pg.size());
  const std::string path = dir.path_for(progress.global_step);
  fmnist::save_checkpoint(path, model, opt, progress);
  dir.prune();
  fmt::print("checkpoint {} at global step {} (epoch {} step {}, attempt {})\n", path,
             progress.global_step, progress.epoch + 1, progress.step, attempt);
  std::fflush(stdout);
}

int run(const Flags& f) {
  const int attempt = attempt_from_env();
  c10d::InitOptions init;
  if (!f.backend.empty()) init.backend = f.backend;
  init.timeout = 120s;
  auto pg = c10d::init_process_group(init);
  const int rank = pg->rank(), world = pg->size();
  const bool lead = rank == 0;

  // Rank 0 writes the checkpoints: it checks now that it can, and every rank learns the
  // answer, so a bad path stops the job before the first epoch instead of after it.
  if (!f.checkpoint.empty() &&
      !agree_with_rank0(*pg, lead ? fmnist::checkpoint_fault(f.checkpoint) : "",
                        "cannot write the checkpoint " + f.checkpoint)) {
    return 1;
  }
  if (!f.checkpoint_dir.empty() &&
      !agree_with_rank0(*pg, lead ? fmnist::checkpoint_dir_fault(f.checkpoint_dir) : "",
                        "cannot write checkpoints to " + f.checkpoint_dir)) {
    return 1;
  }

  auto model = make_model(f.seed);
  std::optional<c10d::ddp::DistributedDataParallel> ddp;
  if (f.mode == "ddp") {
    ddp.emplace(model, pg);
  } else {  // optimizer_step: the same start everywhere, from rank 0
    for (const auto& p : model->parameters()) pg->broadcast({p})->wait(60s);
  }
  c10d::optim::SGD opt(model->parameters(), {.lr = f.lr, .momentum = f.momentum});
  Progress progress{0, 0, 0, world, f.batch, f.limit, f.seed, std::vector<double>(world, 0.0)};
  const fmnist::CheckpointDir dir(f.checkpoint_dir);
  // Before the data: a bad file fails in a moment.
  if (!f.resume.empty()) {
    const Progress have = fmnist::load_checkpoint(f.resume, *model, opt);
    if (const std::string why = fmnist::mismatch(have, progress); !why.empty()) {
      throw c10d::InvalidArgument(
          fmt::format("--resume {}: it was written by a run with {}", f.resume, why));
    }
    progress = have;
    if (lead)
      fmt::print("resumed from {} at epoch {} step {}\n", f.resume, progress.epoch + 1,
                 progress.step);
  } else if (!f.checkpoint_dir.empty()) {
    const auto resumed = resume_from_dir(dir, progress, *model, opt, *pg, attempt);
    if (!resumed) return 1;
    progress = *resumed;
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
  if (progress.step >= steps) {
    throw c10d::InvalidArgument(
        fmt::format("the checkpoint is at step {} of an epoch of {} steps", progress.step, steps));
  }
  if (lead) {
    fmt::print(
        "train_fmnist: {} ranks over {}, {} samples ({} steps of {} per rank per epoch), "
        "mode {}, lazy {}\n",
        world, pg->backend_name(), train_size, steps, f.batch, f.mode, lazy::is_lazy());
    std::fflush(stdout);
  }
  std::optional<double> accuracy;
  for (; progress.epoch < f.epochs; ++progress.epoch, progress.step = 0) {
    const int epoch = static_cast<int>(progress.epoch);
    sampler.set_epoch(epoch);
    const auto order = sampler.indices();
    const auto t0 = Clock::now();
    const std::int64_t first = progress.step;
    double loss_sum = progress.loss_sums[static_cast<std::size_t>(rank)], comm = 0, exposed = 0;
    progress.loss_sums.assign(static_cast<std::size_t>(world), 0.0);  // the next epoch's start
    for (std::int64_t& s = progress.step; s < steps;) {
      std::vector<std::int64_t> idx(order.begin() + s * f.batch, order.begin() + (s + 1) * f.batch);
      const auto x = c10d::data::gather_rows(data.train.images, idx);
      const auto y = c10d::data::gather_rows(data.train.labels, idx);
      if (rank == f.kill_rank && attempt == 0 && progress.global_step == f.kill_step) {
        ::raise(SIGKILL);
      }
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
      ++s;
      ++progress.global_step;
      if (lead && f.log_steps) {
        fmt::print("step {} attempt {}\n", progress.global_step, attempt);
        std::fflush(stdout);
      }
      if (lead && f.progress > 0 && s % f.progress == 0) {
        fmt::print("  epoch {} step {}/{} loss {:.4f}\n", epoch + 1, s, steps,
                   loss_sum / static_cast<double>(s));
        std::fflush(stdout);
      }
      // The end of the epoch has its own checkpoint, below.
      if (f.checkpoint_every > 0 && progress.global_step % f.checkpoint_every == 0 && s < steps) {
        save_to_dir(dir, progress, loss_sum, *model, opt, *pg, attempt);
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
                 mean_loss.data<double>()[0], 100 * *accuracy,
                 double((steps - first) * f.batch * world) / secs, comm_text);
      std::fflush(stdout);
    }
    const Progress next{progress.epoch + 1,
                        0,
                        progress.global_step,
                        world,
                        f.batch,
                        f.limit,
                        f.seed,
                        std::vector<double>(world, 0.0)};
    if (lead && !f.checkpoint.empty()) fmnist::save_checkpoint(f.checkpoint, *model, opt, next);
    if (!f.checkpoint_dir.empty()) save_to_dir(dir, next, 0.0, *model, opt, *pg, attempt);
    pg->barrier()->wait(60s);  // the checkpoint is whole before anyone may resume from it
  }
  // Resumed after the last epoch's checkpoint: nothing trained, but the verdict still counts.
  if (!accuracy) accuracy = test_accuracy(*model, data.test, *pg);
  if (f.min_accuracy > 0 && *accuracy < f.min_accuracy) {
    if (lead) {
      fmt::print(stderr, "train_fmnist: test accuracy {:.2f}% is below the required {:.2f}%\n",
                 100 * *accuracy, 100 * f.min_accuracy);
    }
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags flags = fmnist::parse_flags(argc, argv);
  try {
    return run(flags);
  } catch (const std::exception& e) {
    fmt::print(stderr, "train_fmnist: {}\n", e.what());
    return 1;
  }
}
