// c10d-ddp-bench: the training step of examples/train_fmnist's MLP (784-512-256-10, SGD with
// momentum, lazy mode) on every rank of a group, timed. Run it under c10drun at several world
// sizes (bench/ddp_scaling.py does, and prints the ratios):
//
//   build/tools/c10drun --nproc-per-node 2 build/bench/c10d-ddp-bench --steps 40 --mode ddp
//
// Flags: --steps N [40] timed steps after --warmup N [5]; --batch N [64] per rank;
// --mode ddp|optimizer_step|local [ddp] (local: no communication at all, the single-process
// step); --json FILE (rank 0 writes its row there too; it must be writable at the start).
// Values are checked whole (cli_args.h); a bad flag exits 2 naming it.
// Inputs are random (seeded), not Fashion-MNIST: the bench measures the step, not the reader.
// Rank 0 prints one row: world, mode, per-rank batch, the median step time over ranks'
// medians' maximum (the slowest rank sets the pace), steps/s, samples/s over all ranks, and for
// DDP the mean communication time per step, the part not hidden under backward, and overlap.
#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "c10d/c10d.h"
#include "c10d/ddp.h"
#include "c10d/lazy.h"
#include "c10d/nn.h"
#include "c10d/optim.h"
#include "cli_args.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
namespace lazy = c10d::lazy;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// A usage error: the message names the flag; exit status 2.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

int integer_flag(const std::string& flag, const std::string& v, int min, int max) {
  const auto n = c10d::bench::parse_integer(v, min, max);
  if (!n) {
    throw UsageError(fmt::format("{} takes an integer from {} to {}, not '{}'", flag, min, max, v));
  }
  return *n;
}

int run(int argc, char** argv) {
  int steps = 40, warmup = 5;
  std::int64_t batch = 64;
  std::string mode = "ddp", json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a != "--steps" && a != "--warmup" && a != "--batch" && a != "--mode" && a != "--json") {
      throw UsageError("unknown flag " + a + " (--steps, --warmup, --batch, --mode, --json)");
    }
    if (i + 1 >= argc || argv[i + 1][0] == '\0') throw UsageError(a + " needs a value");
    const std::string v = argv[++i];
    if (a == "--steps") {
      steps = integer_flag(a, v, 1, 1'000'000);
    } else if (a == "--warmup") {
      warmup = integer_flag(a, v, 0, 1'000'000);
    } else if (a == "--batch") {
      batch = integer_flag(a, v, 1, 1 << 20);
    } else if (a == "--mode") {
      mode = v;
    } else {
      json = v;
    }
  }
  if (mode != "ddp" && mode != "optimizer_step" && mode != "local") {
    throw UsageError("--mode is ddp, optimizer_step or local, not '" + mode + "'");
  }
  auto pg = c10d::init_process_group({.timeout = 120s});
  // Rank 0 writes the JSON row at the end: it opens the file now, so a bad path fails the run
  // before it is measured, on every rank.
  std::ofstream json_out;
  if (!json.empty()) {
    if (pg->rank() == 0) json_out.open(json, std::ios::trunc);
    auto bad = c10d::Tensor::from_vector(
        std::vector<std::int32_t>{pg->rank() == 0 && !json_out ? 1 : 0}, c10d::DType::kInt32);
    pg->broadcast({bad}, {.root = 0})->wait(60s);
    if (bad.data<std::int32_t>()[0] != 0) {
      throw std::runtime_error(
          fmt::format("--json {}: rank 0 cannot write it{}", json,
                      pg->rank() == 0 ? ": " + std::string(std::strerror(errno)) : std::string()));
    }
  }
  lazy::Generator gen(1);
  auto model = std::make_shared<c10d::nn::Sequential>();
  model->push_back(std::make_shared<c10d::nn::Linear>(784, 512, gen));
  model->push_back(std::make_shared<c10d::nn::ReLU>());
  model->push_back(std::make_shared<c10d::nn::Linear>(512, 256, gen));
  model->push_back(std::make_shared<c10d::nn::ReLU>());
  model->push_back(std::make_shared<c10d::nn::Linear>(256, 10, gen));
  std::optional<c10d::ddp::DistributedDataParallel> ddp;
  if (mode == "ddp") ddp.emplace(model, pg);
  c10d::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  lazy::Generator data_gen(100 + static_cast<std::uint64_t>(pg->rank()));
  const auto x = lazy::normal({batch, 784}, data_gen);
  std::vector<std::int64_t> labels;
  for (std::int64_t i = 0; i < batch; ++i) labels.push_back(i % 10);
  const auto y = c10d::Tensor::from_vector(labels, c10d::DType::kInt64);
  lazy::mark_step();

  std::vector<double> times, comm, exposed;
  for (int s = 0; s < warmup + steps; ++s) {
    const auto t0 = Clock::now();
    opt.zero_grad();
    if (ddp) {
      const auto loss = lazy::cross_entropy((*ddp)(x), y);
      ddp->backward(loss);
      opt.step();
      lazy::mark_step();
    } else {
      const auto loss = lazy::cross_entropy(model->forward(x), y);
      lazy::backward(loss);
      if (mode == "optimizer_step") {
        c10d::ddp::optimizer_step(opt, pg);
      } else {
        opt.step();
        lazy::mark_step();
      }
    }
    if (s < warmup) continue;
    times.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    if (ddp) {
      comm.push_back(ddp->last_stats().comm_seconds);
      exposed.push_back(ddp->last_stats().wait_seconds);
    }
  }
  // The slowest rank's median sets the pace of the job.
  auto pace = c10d::Tensor::from_vector(std::vector<double>{median(times)}, c10d::DType::kFloat64);
  c10d::AllreduceOptions max;
  max.reduce.op = c10d::ReduceOp::kMax;
  pg->all_reduce({pace}, max)->wait(60s);
  const double step = pace.data<double>()[0];
  if (pg->rank() == 0) {
    const double c = median(comm), e = median(exposed);
    const std::string row = fmt::format(
        "{:>5} {:>14} {:>5} {:>9.2f} {:>8.1f} {:>10.0f} {:>8.2f} {:>8.2f} {:>7.0f}%", pg->size(),
        mode, batch, step * 1e3, 1 / step, double(batch * pg->size()) / step, c * 1e3, e * 1e3,
        c > 0 ? 100 * std::max(0.0, 1 - e / c) : 0.0);
    fmt::print("#{:>4} {:>14} {:>5} {:>9} {:>8} {:>10} {:>8} {:>8} {:>8}\n", "world", "mode",
               "batch", "step_ms", "steps/s", "samples/s", "comm_ms", "wait_ms", "overlap");
    fmt::print("{}\n", row);
    if (json_out.is_open()) {
      // Milliseconds to 4 decimals: the timer's resolution, not the double's.
      const auto ms = [](double seconds) { return std::round(seconds * 1e7) / 1e4; };
      const nlohmann::ordered_json json_row = {{"world", pg->size()}, {"mode", mode},
                                               {"batch", batch},      {"step_ms", ms(step)},
                                               {"comm_ms", ms(c)},    {"wait_ms", ms(e)}};
      json_out << json_row.dump() << "\n";
      json_out.close();
      if (!json_out) throw std::runtime_error("--json " + json + ": writing it failed");
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "c10d-ddp-bench: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d-ddp-bench: %s\n", e.what());
    return 1;
  }
}
