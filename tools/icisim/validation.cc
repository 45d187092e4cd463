#include "validation.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "backends/tpu_ici/timing_sim.h"
#include "backends/tpu_ici/torus_plans.h"

namespace c10d::inline v1::tpu_ici {
namespace {

struct Case {
  std::string what;
  std::string topology;
  std::string wrap;
  std::string collective;  // all_gather | all_reduce
  std::int64_t bytes;      // all_gather: the output; all_reduce: the vector
  std::string formula;
  // The closed form in seconds, from the torus (B one way, L per hop, N chips, V received).
  std::function<double(const Torus&, double v)> closed;
};

std::string size_text(std::int64_t b) {
  if (b >= (1 << 20)) return fmt::format("{} MiB", b >> 20);
  if (b >= (1 << 10)) return fmt::format("{} KiB", b >> 10);
  return fmt::format("{} B", b);
}

}  // namespace

int print_validation_table() {
  const auto lat = [](const Torus& t) { return t.hop_latency(); };
  const auto w = [](const Torus& t) { return 2 * t.link_bandwidth(); };
  const std::vector<Case> cases = {
      {"1-axis bidirectional all_gather", "8", "all", "all_gather", 1 << 10, "max(L*X/2, V/W)",
       [&](const Torus& t, double v) { return std::max(lat(t) * 4, v / w(t)); }},
      {"1-axis bidirectional all_gather", "8", "all", "all_gather", 256 << 20, "max(L*X/2, V/W)",
       [&](const Torus& t, double v) { return std::max(lat(t) * 4, v / w(t)); }},
      {"1-axis all_reduce", "8", "all", "all_reduce", 1 << 10, "2 max(L*X/2, V/W)",
       [&](const Torus& t, double v) { return 2 * std::max(lat(t) * 4, v / w(t)); }},
      {"1-axis all_reduce", "8", "all", "all_reduce", 256 << 20, "2 max(L*X/2, V/W)",
       [&](const Torus& t, double v) { return 2 * std::max(lat(t) * 4, v / w(t)); }},
      {"2 axes all_reduce", "8x8", "all", "all_reduce", 256 << 20, "2 V/(2W)",
       [&](const Torus& t, double v) { return 2 * v / (2 * w(t)); }},
      {"3 axes all_reduce", "4x4x4", "all", "all_reduce", 256 << 20, "2 V/(3W)",
       [&](const Torus& t, double v) { return 2 * v / (3 * w(t)); }},
      {"no wraparound all_gather", "8", "none", "all_gather", 256 << 20, "2 V/W",
       [&](const Torus& t, double v) { return 2 * v / w(t); }},
      {"no wraparound 2 axes all_reduce", "8x8", "none", "all_reduce", 256 << 20, "2 (2 V/(2W))",
       [&](const Torus& t, double v) { return 2 * 2 * v / (2 * w(t)); }},
      {"v5e 16x16 all_reduce", "16x16", "all", "all_reduce", std::int64_t{1} << 30, "2 V/(2W)",
       [&](const Torus& t, double v) { return 2 * v / (2 * w(t)); }},
      {"unequal axes all_reduce", "16x16x24", "all", "all_reduce", std::int64_t{1} << 30,
       "2 V/(3W)", [&](const Torus& t, double v) { return 2 * v / (3 * w(t)); }},
  };
  fmt::print(
      "| case | slice (wrap) | size | closed form | closed form (us) | simulated (us) | "
      "simulated / closed |\n|---|---|---|---|---:|---:|---:|\n");
  bool all_ok = true;
  for (const Case& c : cases) {
    std::vector<int> dims;
    parse_dims(c.topology, dims);
    int n = 1;
    for (int d : dims) n *= d;
    const Torus t = make_torus({.topology = c.topology, .wrap = c.wrap}, n);
    const bool gather = c.collective == "all_gather";
    const SimResult r = simulate(t, [&](int rank) {
      return gather ? torus_all_gather(t, rank, c.bytes / n)
                    : multi_axis_all_reduce(t, rank, c.bytes / 4, 4);
    });
    const double v = static_cast<double>(c.bytes) * (n - 1) / n;
    const double closed = c.closed(t, v);
    const double ratio = r.seconds / closed;
    all_ok = all_ok && std::abs(ratio - 1) <= 0.03;
    fmt::print("| {} | {} ({}) | {} | {} | {:.3f} | {:.3f} | {:.4f} |\n", c.what, c.topology,
               c.wrap, size_text(c.bytes), c.formula, closed * 1e6, r.seconds * 1e6, ratio);
  }
  return all_ok ? 0 : 1;
}

}  // namespace c10d::inline v1::tpu_ici
