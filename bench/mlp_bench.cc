// c10d-mlp-bench: one lazy training step of an MLP against the matrix products it contains.
//
// Words. A step is zero_grad, forward, cross_entropy, backward, SGD step and mark_step on one
// fixed batch (784-1024-1024-10, batch 64, as train_fmnist). The GEMMs of a step are the 8 matrix
// products it performs: 3 in the forward pass (X W1^T, H1 W2^T, H2 W3^T) and 5 in the backward
// pass (dW3 = G3^T H2, dH2 = G3 W3, dW2 = G2^T H1, dH1 = G2 W2, dW1 = G1^T X; the input needs
// no gradient, so there is no dX). "GEMMs alone" runs exactly those 8 products with Eigen on
// row-major maps, the layout the lazy core uses, on one thread: the floor a fused step can
// approach. The ratio step / GEMMs alone is the overhead of everything else (elementwise
// work, reductions, the optimizer update, graph building, hashing and cache lookup). The two
// are timed in turns (a step, then a pass of the GEMMs) and compared by their medians.
// Also for context: the same step in eager mode (C10D_LAZY=0).
//
// Also reported: the first step's time and its compile time (metrics().compile_seconds), and
// the programs compiled after step 2 (must be 0: the cache serves every later step).
// Verification, outside the timed loop: every loss is finite and the loss falls.
//
//   c10d-mlp-bench [--steps N] [--batch B] [--hidden H] [--smoke]
#include <fmt/format.h>

#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "c10d/lazy.h"
#include "c10d/nn.h"
#include "c10d/optim.h"
#include "cli_args.h"

namespace {

using c10d::Tensor;
namespace lazy = c10d::lazy;
using Clock = std::chrono::steady_clock;
using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Options {
  int steps = 50;
  std::int64_t batch = 64;
  std::int64_t in = 784;
  std::int64_t hidden = 1024;
  std::int64_t classes = 10;
};

// The 8 GEMMs of one step on Eigen, with their operands allocated once.
class Gemms {
 public:
  explicit Gemms(const Options& o)
      : x_(RowMatrix::Random(o.batch, o.in)),
        w1_(RowMatrix::Random(o.hidden, o.in)),
        w2_(RowMatrix::Random(o.hidden, o.hidden)),
        w3_(RowMatrix::Random(o.classes, o.hidden)),
        g3_(RowMatrix::Random(o.batch, o.classes)),
        h1_(o.batch, o.hidden),
        h2_(o.batch, o.hidden),
        logits_(o.batch, o.classes),
        g2_(o.batch, o.hidden),
        g1_(o.batch, o.hidden),
        dw1_(o.hidden, o.in),
        dw2_(o.hidden, o.hidden),
        dw3_(o.classes, o.hidden) {}

  // Seconds for one pass over the 8 products.
  double run() {
    const auto t0 = Clock::now();
    h1_.noalias() = x_ * w1_.transpose();
    h2_.noalias() = h1_ * w2_.transpose();
    logits_.noalias() = h2_ * w3_.transpose();
    dw3_.noalias() = g3_.transpose() * h2_;
    g2_.noalias() = g3_ * w3_;
    dw2_.noalias() = g2_.transpose() * h1_;
    g1_.noalias() = g2_ * w2_;
    dw1_.noalias() = g1_.transpose() * x_;
    const double s = seconds_since(t0);
    sink_ += dw1_(0, 0) + dw2_(0, 0) + dw3_(0, 0) + logits_(0, 0);  // keep the results live
    return s;
  }
  float sink() const { return sink_; }

 private:
  RowMatrix x_, w1_, w2_, w3_, g3_, h1_, h2_, logits_, g2_, g1_, dw1_, dw2_, dw3_;
  float sink_ = 0;
};

// The model, optimizer and batch of the benchmark, built the same way in either mode.
struct Trainer {
  std::shared_ptr<c10d::nn::Sequential> net = std::make_shared<c10d::nn::Sequential>();
  std::unique_ptr<c10d::optim::SGD> sgd;
  Tensor x, labels;

  explicit Trainer(const Options& o) {
    lazy::Generator gen(2024);
    net->push_back(std::make_shared<c10d::nn::Linear>(o.in, o.hidden, gen));
    net->push_back(std::make_shared<c10d::nn::ReLU>());
    net->push_back(std::make_shared<c10d::nn::Linear>(o.hidden, o.hidden, gen));
    net->push_back(std::make_shared<c10d::nn::ReLU>());
    net->push_back(std::make_shared<c10d::nn::Linear>(o.hidden, o.classes, gen));
    sgd =
        std::make_unique<c10d::optim::SGD>(net->parameters(), c10d::optim::SGDOptions{.lr = 0.01});
    // Data tensors (materialized), like a batch from a loader.
    x = lazy::uniform({o.batch, o.in}, gen, 0.0, 1.0);
    labels = lazy::argmax(lazy::uniform({o.batch, o.classes}, gen), 1);
    lazy::mark_step();
    x.raw_data();
    labels.raw_data();
  }

  Tensor step() {
    sgd->zero_grad();
    Tensor loss = lazy::cross_entropy(net->forward(x), labels);
    lazy::backward(loss);
    sgd->step();
    lazy::mark_step();
    return loss;
  }
};

// Median seconds of eager steps, and the first step's loss.
std::pair<double, double> eager_steps(const Options& o, int steps) {
  lazy::set_lazy(false);
  Trainer t(o);
  const double first_loss = *t.step().data<float>();
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    const auto t0 = Clock::now();
    t.step();
    times.push_back(seconds_since(t0));
  }
  lazy::set_lazy(true);
  return {median(times), first_loss};
}

int run(const Options& o) {
  lazy::set_lazy(true);
  Eigen::setNbThreads(1);
  Trainer trainer(o);
  auto step = [&] { return trainer.step(); };

  std::vector<double> losses;
  lazy::reset_metrics();
  auto t0 = Clock::now();
  losses.push_back(*step().data<float>());
  const double first_step = seconds_since(t0);
  const double first_compile = lazy::metrics().compile_seconds;
  losses.push_back(*step().data<float>());
  const auto compiles_after_2 = lazy::metrics().compiles;

  // A lazy step and a pass of the GEMMs alone take turns, so load from other processes hits
  // both alike (the machine is 2 shared cores).
  Gemms gemms(o);
  gemms.run();
  std::vector<double> times, gemm_times;
  std::vector<Tensor> kept;  // read the losses after timing: a read inside would be a sync
  for (int s = 0; s < o.steps; ++s) {
    t0 = Clock::now();
    kept.push_back(step());
    times.push_back(seconds_since(t0));
    gemm_times.push_back(gemms.run());
  }
  const auto m = lazy::metrics();
  for (const Tensor& l : kept) losses.push_back(*l.data<float>());
  const double step_s = median(times);
  const double gemm_s = median(gemm_times);
  // 2 b (in h + h h + h c) forward; 2 b (c h + c h + h h + h h + h in) backward.
  const double b = static_cast<double>(o.batch), in = static_cast<double>(o.in),
               h = static_cast<double>(o.hidden), c = static_cast<double>(o.classes);
  const double flops = 2.0 * b * (2.0 * in * h + 3.0 * h * h + 3.0 * h * c);

  const auto [eager_s, eager_first_loss] = eager_steps(o, std::max(3, o.steps / 5));

  bool ok = true;
  for (double l : losses) ok = ok && std::isfinite(l);
  ok = ok && losses.back() < losses.front();
  // The same first step in both modes gives the same loss.
  const bool same = std::abs(eager_first_loss - losses.front()) <= 1e-4 * std::abs(losses.front());

  std::printf("mlp %lld-%lld-%lld-%lld, batch %lld, SGD, lazy, %d timed steps\n",
              static_cast<long long>(o.in), static_cast<long long>(o.hidden),
              static_cast<long long>(o.hidden), static_cast<long long>(o.classes),
              static_cast<long long>(o.batch), o.steps);
  std::printf("step_ms (median):            %.3f\n", step_s * 1e3);
  std::printf("steps_per_s:                 %.1f\n", 1.0 / step_s);
  std::printf("gemms_alone_ms (8 GEMMs):    %.3f\n", gemm_s * 1e3);
  std::printf("step / gemms_alone:          %.2fx (target <= 1.5x)\n", step_s / gemm_s);
  std::printf("step_gflops:                 %.1f\n", flops / step_s * 1e-9);
  std::printf("eager_step_ms (median):      %.3f (lazy is %.2fx faster)\n", eager_s * 1e3,
              eager_s / step_s);
  std::printf("first_step_ms:               %.1f\n", first_step * 1e3);
  std::printf("first_step_compile_ms:       %.1f\n", first_compile * 1e3);
  std::printf("recompiles_after_step_2:     %lld\n",
              static_cast<long long>(m.compiles - compiles_after_2));
  std::printf("fused_kernels_per_step:      %.1f\n",
              static_cast<double>(m.fused_kernels) / static_cast<double>(o.steps + 2));
  std::printf("kernels_per_step:            %.1f\n",
              static_cast<double>(m.kernels_run) / static_cast<double>(o.steps + 2));
  std::printf("gemm_checksum:               %g\n", static_cast<double>(gemms.sink()));
  std::printf("loss first -> last:          %.4f -> %.4f (%s)\n", losses.front(), losses.back(),
              ok ? "ok" : "WRONG");
  std::printf("eager first loss:            %.6f (lazy %.6f, %s)\n", eager_first_loss,
              losses.front(), same ? "same" : "DIFFERENT");
  ok = ok && same;
  if (m.compiles != compiles_after_2) {
    std::printf("FAIL: the step recompiled after step 2\n");
    return 1;
  }
  return ok ? 0 : 1;
}

// A usage error: the message names the flag; exit status 2.
[[noreturn]] void usage_error(const std::string& why) {
  std::fprintf(stderr,
               "c10d-mlp-bench: %s\nusage: c10d-mlp-bench [--steps N] [--batch B] [--hidden H] "
               "[--smoke]\n",
               why.c_str());
  std::exit(2);
}

// What a run of `o` holds at least, in bytes: the weights four times over (parameters, their
// gradients, SGD's momentum, the Eigen copies) and a dozen batch x hidden activations.
double bytes_needed(const Options& o) {
  const double params =
      static_cast<double>(o.hidden) * static_cast<double>(o.in + o.hidden + o.classes);
  const double activations =
      12.0 * static_cast<double>(o.batch) * static_cast<double>(std::max(o.hidden, o.in));
  return 4.0 * (4 * params + activations);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&](long long max) -> long long {
      if (i + 1 >= argc) usage_error(a + " needs a value");
      const std::string v = argv[++i];
      const auto n = c10d::bench::parse_integer<long long>(v, 1, max);
      if (!n) usage_error(fmt::format("{} takes an integer from 1 to {}, not '{}'", a, max, v));
      return *n;
    };
    if (a == "--steps") {
      o.steps = static_cast<int>(next(1'000'000));
    } else if (a == "--batch") {
      o.batch = next(1 << 20);
    } else if (a == "--hidden") {
      o.hidden = next(1 << 16);
    } else if (a == "--smoke") {
      o.steps = 3;
      o.hidden = 32;
      o.batch = 8;
    } else if (a == "-h" || a == "--help") {
      std::printf("usage: c10d-mlp-bench [--steps N] [--batch B] [--hidden H] [--smoke]\n");
      return 0;
    } else {
      usage_error("unknown flag " + a);
    }
  }
  const double need = bytes_needed(o);
  if (const std::string why =
          c10d::bench::memory_fault(fmt::format("--batch {} --hidden {}", o.batch, o.hidden),
                                    static_cast<std::uint64_t>(need), 1);
      !why.empty()) {
    usage_error(why);
  }
  try {
    return run(o);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d-mlp-bench: %s\n", e.what());
    return 1;
  }
}
