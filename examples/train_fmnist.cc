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
//   --resume PATH           every rank reads it and carries on from the next epoch
//   --limit N               train on the first N samples only (tests)
//   --data DIR              [/usr/share/datasets/fashion-mnist or C10D_FASHION_MNIST]
//   --seed N                [0]                        --progress N      [100, steps]
//   --min-accuracy X        exit 1 when the last epoch's test accuracy is below X
//   --kill-at R:S           fault tests: rank R sends itself SIGKILL at step S of epoch 1
//
// Each epoch rank 0 prints the mean training loss over all ranks, the test accuracy (every rank
// scores a share of the test set), samples per second over all ranks and, for DDP, the share
// of step time spent communicating (and the part of it not hidden under backward).
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <optional>
#include <string>

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

Flags parse(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") usage("", 0);
    if (i + 1 >= argc) usage(arg + " needs a value");
    const std::string v = argv[++i];
    try {
      if (arg == "--backend")
        f.backend = v;
      else if (arg == "--epochs")
        f.epochs = std::stoi(v);
      else if (arg == "--batch-size")
        f.batch = std::stoll(v);
      else if (arg == "--lr")
        f.lr = std::stod(v);
      else if (arg == "--momentum")
        f.momentum = std::stod(v);
      else if (arg == "--mode")
        f.mode = v;
      else if (arg == "--checkpoint")
        f.checkpoint = v;
      else if (arg == "--resume")
        f.resume = v;
      else if (arg == "--limit")
        f.limit = std::stoll(v);
      else if (arg == "--data")
        f.data = v;
      else if (arg == "--seed")
        f.seed = std::stoull(v);
      else if (arg == "--progress")
        f.progress = std::stoi(v);
      else if (arg == "--min-accuracy")
        f.min_accuracy = std::stod(v);
      else if (arg == "--kill-at") {
        const auto colon = v.find(':');
        if (colon == std::string::npos) usage("--kill-at takes RANK:STEP");
        f.kill_rank = std::stoi(v.substr(0, colon));
        f.kill_step = std::stoll(v.substr(colon + 1));
      } else
        usage("unknown flag " + arg);
    } catch (const std::logic_error&) {
      usage("bad value '" + v + "' for " + arg);
    }
  }
  if (f.mode != "ddp" && f.mode != "optimizer_step") usage("--mode is ddp or optimizer_step");
  if (f.epochs < 1 || f.batch < 1) usage("--epochs and --batch-size must be positive");
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
// "optim.<name>", and "epoch" (the last epoch done, int64).
void save_checkpoint(const std::string& path, const nn::Module& model,
                     const c10d::optim::Optimizer& opt, int epoch) {
  nn::NamedTensors all;
  for (auto& [name, t] : model.state_dict()) all.emplace_back("model." + name, t);
  for (auto& [name, t] : opt.state_dict()) all.emplace_back("optim." + name, t);
  all.emplace_back(
      "epoch", c10d::Tensor::from_vector(std::vector<std::int64_t>{epoch}, c10d::DType::kInt64));
  const std::string tmp = path + ".tmp";
  nn::save_state_dict(all, tmp);
  std::filesystem::rename(tmp, path);  // a reader never sees half a checkpoint
}

int load_checkpoint(const std::string& path, nn::Module& model, c10d::optim::Optimizer& opt) {
  nn::NamedTensors model_state, opt_state;
  int epoch = -1;
  for (auto& [name, t] : nn::read_state_dict(path)) {
    if (name.rfind("model.", 0) == 0) {
      model_state.emplace_back(name.substr(6), t);
    } else if (name.rfind("optim.", 0) == 0) {
      opt_state.emplace_back(name.substr(6), t);
    } else if (name == "epoch") {
      epoch = static_cast<int>(t.data<std::int64_t>()[0]);
    }
  }
  if (epoch < 0) throw c10d::InvalidArgument(path + ": not a train_fmnist checkpoint (no epoch)");
  model.load_state_dict(model_state);
  opt.load_state_dict(opt_state);
  return epoch;
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

  auto model = make_model(f.seed);
  std::optional<c10d::ddp::DistributedDataParallel> ddp;
  if (f.mode == "ddp") {
    ddp.emplace(model, pg);
  } else {  // optimizer_step: the same start everywhere, from rank 0
    for (const auto& p : model->parameters()) pg->broadcast({p})->wait(60s);
  }
  c10d::optim::SGD opt(model->parameters(), {.lr = f.lr, .momentum = f.momentum});
  int start_epoch = 0;
  if (!f.resume.empty()) {
    start_epoch = load_checkpoint(f.resume, *model, opt) + 1;
    if (lead) fmt::print("resumed from {} after epoch {}\n", f.resume, start_epoch);
  }

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
      if (ddp) {
        const auto loss = lazy::cross_entropy((*ddp)(x), y);
        ddp->backward(loss);
        opt.step();
        lazy::mark_step();
        loss_sum += loss.data<float>()[0];
        comm += ddp->last_stats().comm_seconds;
        exposed += ddp->last_stats().wait_seconds;
      } else {
        const auto loss = lazy::cross_entropy(model->forward(x), y);
        lazy::backward(loss);
        c10d::ddp::optimizer_step(opt, pg);
        loss_sum += loss.data<float>()[0];
      }
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
