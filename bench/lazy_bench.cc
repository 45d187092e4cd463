// c10d-lazy-bench: what the lazy core's fusion buys on one thread.
//
// Cases, each timed in this one run as the median of --reps repetitions after one warm-up:
//   tanh   y = tanh(x*x + 1) * 0.5 over --n float32 elements
//          - lazy:  the ops recorded and run by mark_step() as one fused, tiled kernel (graph
//                   building, hashing and the cache lookup are inside the timed region)
//          - hand:  the same formula as one Eigen array expression over the whole buffer
//                   (vectorized tanh, one pass), writing a preallocated output
//          - eager: our eager mode, one full pass over memory per op
//   affine y = (x*x + 1) * 0.5, lazy, against memcpy of the same bytes (read n*4, write n*4)
// Targets: lazy tanh within 1.5x of hand and >= 3x faster than eager; lazy affine within 1.5x
// of memcpy. Results are verified against the hand loop outside the timed region.
//
// Sections are functions taking Options; another section (e.g. a training step) is one more
// function and one more call in main(). See bench/mlp_bench.cc for the MLP step.
//
//   c10d-lazy-bench [--n ELEMENTS] [--reps R]
#include <Eigen/Core>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "c10d/lazy.h"
#include "cli_args.h"

namespace {

using c10d::Tensor;
namespace lazy = c10d::lazy;
using Clock = std::chrono::steady_clock;

struct Options {
  std::int64_t n = 16 << 20;
  int reps = 7;
};

// Times every case `reps` times, interleaved (case 1, case 2, ..., case 1, ...) so that load
// from other processes on a shared machine hits all cases alike; returns each case's median.
std::vector<double> median_seconds(int reps, const std::vector<std::function<void()>>& cases) {
  for (const auto& body : cases) body();  // warm-up: compiles, faults pages in, fills pools
  std::vector<std::vector<double>> t(cases.size());
  for (int r = 0; r < reps; ++r) {
    for (std::size_t c = 0; c < cases.size(); ++c) {
      const auto t0 = Clock::now();
      cases[c]();
      t[c].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
  }
  std::vector<double> out;
  for (auto& v : t) {
    std::sort(v.begin(), v.end());
    out.push_back(v[v.size() / 2]);
  }
  return out;
}

struct Row {
  std::string name;
  double seconds;
  std::string vs;
  double ratio;
  std::string target;
  bool met;
};

void print(const Options& o, const std::vector<Row>& rows) {
  const double bytes = 2.0 * static_cast<double>(o.n) * 4;  // read x, write y
  std::printf("%-26s %10s %9s   %-22s %s\n", "case", "median ms", "GB/s", "ratio", "target");
  for (const Row& r : rows) {
    std::printf(
        "%-26s %10.3f %9.2f   %-22s %s%s\n", r.name.c_str(), r.seconds * 1e3,
        bytes / r.seconds * 1e-9,
        r.vs.empty() ? "" : (r.vs + " " + std::to_string(r.ratio).substr(0, 5) + "x").c_str(),
        r.target.c_str(), r.target.empty() ? "" : (r.met ? "  met" : "  NOT met"));
  }
}

// Max |a - b| over the elements.
double max_diff(const float* a, const float* b, std::int64_t n) {
  double m = 0;
  for (std::int64_t i = 0; i < n; ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

bool elementwise_section(const Options& o) {
  std::vector<float> xs(static_cast<std::size_t>(o.n));
  for (std::int64_t i = 0; i < o.n; ++i) {
    xs[static_cast<std::size_t>(i)] =
        static_cast<float>(std::sin(0.001 * static_cast<double>(i)) * 2.0);
  }
  Tensor x = Tensor::from_blob(xs.data(), {o.n}, c10d::DType::kFloat32);
  std::vector<float> hand_out(xs.size()), copy_out(xs.size());
  using Arr = Eigen::Map<Eigen::ArrayXf>;
  Arr hx(xs.data(), static_cast<Eigen::Index>(o.n));

  Tensor y_lazy, y_eager, y_affine;
  auto run_lazy = [&](Tensor& y, bool affine) {
    lazy::set_lazy(true);
    y = Tensor();
    y = affine ? (x * x + 1.0) * 0.5 : lazy::tanh(x * x + 1.0) * 0.5;
    lazy::mark_step();
  };
  const std::vector<double> med = median_seconds(
      o.reps, {[&] {
                 Arr(hand_out.data(), static_cast<Eigen::Index>(o.n)) =
                     (hx * hx + 1.0f).tanh() * 0.5f;
               },
               [&] { run_lazy(y_lazy, false); },
               [&] {
                 lazy::set_lazy(false);
                 y_eager = Tensor();
                 y_eager = lazy::tanh(x * x + 1.0) * 0.5;
                 lazy::set_lazy(true);
               },
               [&] { std::memcpy(copy_out.data(), xs.data(), xs.size() * sizeof(float)); },
               [&] { run_lazy(y_affine, true); }});
  const double hand = med[0], fused = med[1], eager = med[2], copy = med[3], affine = med[4];
  const double lazy_diff = max_diff(y_lazy.data<float>(), hand_out.data(), o.n);
  const double eager_diff = max_diff(y_eager.data<float>(), hand_out.data(), o.n);
  double affine_diff = 0;
  for (std::int64_t i = 0; i < o.n; ++i) {
    const float v = xs[static_cast<std::size_t>(i)];
    affine_diff = std::max(affine_diff, std::abs(static_cast<double>((v * v + 1.0f) * 0.5f) -
                                                 y_affine.data<float>()[i]));
  }

  std::printf("c10d-lazy-bench: n = %lld float32, median of %d, one thread\n",
              static_cast<long long>(o.n), o.reps);
  print(o,
        {{"tanh: hand loop (Eigen)", hand, "", 0, "", true},
         {"tanh: lazy fused", fused, "vs hand", fused / hand, "<= 1.5x hand", fused <= 1.5 * hand},
         {"tanh: eager", eager, "vs fused", eager / fused, ">= 3x fused", eager >= 3 * fused},
         {"affine: memcpy", copy, "", 0, "", true},
         {"affine: lazy fused", affine, "vs memcpy", affine / copy, "<= 1.5x memcpy",
          affine <= 1.5 * copy}});
  std::printf("max |diff| vs hand loop: lazy %.3g, eager %.3g; affine vs formula %.3g\n", lazy_diff,
              eager_diff, affine_diff);
  std::printf("%s", lazy::metrics_report().c_str());
  const bool ok = lazy_diff < 1e-6 && eager_diff < 1e-6 && affine_diff == 0;
  if (!ok) std::printf("VERIFY FAILED\n");
  return ok;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  const auto usage_error = [](const std::string& why) {
    std::fprintf(stderr, "c10d-lazy-bench: %s\nusage: c10d-lazy-bench [--n ELEMENTS] [--reps R]\n",
                 why.c_str());
    return 2;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") {
      std::printf("usage: c10d-lazy-bench [--n ELEMENTS] [--reps R]\n");
      return 0;
    }
    if (flag != "--n" && flag != "--reps") return usage_error("unknown flag " + flag);
    if (i + 1 >= argc) return usage_error(flag + " needs a value");
    const std::string v = argv[++i];
    const long long max = flag == "--n" ? (1LL << 40) : 10'000;
    const auto n = c10d::bench::parse_integer<long long>(v, 1, max);
    if (!n)
      return usage_error(flag + " takes an integer from 1 to " + std::to_string(max) + ", not '" +
                         v + "'");
    if (flag == "--n") {
      o.n = *n;
    } else {
      o.reps = static_cast<int>(*n);
    }
  }
  // The input, the hand loop's and memcpy's outputs, the three lazy and eager results and the
  // eager mode's intermediates: about ten float32 buffers of n, all touched.
  if (const std::string why = c10d::bench::memory_fault(
          "--n " + std::to_string(o.n), 10 * 4 * static_cast<std::uint64_t>(o.n), 1);
      !why.empty()) {
    return usage_error(why);
  }
  try {
    return elementwise_section(o) ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d-lazy-bench: %s\n", e.what());
    return 1;
  }
}
