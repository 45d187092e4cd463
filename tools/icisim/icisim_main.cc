// c10d-icisim: the ICI backend's collectives timed on a whole TPU slice, without data. Runs the
// very plans the ICI process group runs (src/backends/tpu_ici/torus_plans.h) for every chip at
// once under the timing-only simulator (timing_sim.h), and prints nccl-tests columns with the
// simulated time, then the link utilization of each axis.
//
//   c10d-icisim --preset v5e --topology 16x16 --collective all_reduce -b 1K -e 1G -f 4
//   c10d-icisim --preset v5p --topology 16x16x24 --collective all_reduce -b 1M -e 1G -f 4
//
// Own flags (everything else is nccl-tests' sweep flags, bench/sweep_args.h; -n, -w and -c are
// accepted and ignored: a simulation has no iterations and no data to check):
//   --preset v4|v5e|v5p         link bandwidth, latency and wraparound rule (topology.h)
//   --topology AxBxC            the slice (required)
//   --collective NAME           all_reduce | all_gather | reduce_scatter | all_to_all | broadcast
//   --wrap all|none|1,0,1       override the preset's wraparound
//   --link-gbps G               override the one-way link bandwidth (GB/s)
//   --hop-latency-us U          override the hop latency
//   --down-links 1-2,5-6        links marked down (messages detour; a cut route fails)
//   --validate                  print the closed-form validation table of docs/ici.md instead
//                               (alone: it takes no other flag)
// Every flag needs a value (no empty one); --link-gbps and --hop-latency-us take positive
// numbers; a slice has at most 16384 chips.
//
// Columns: size count type redop root, then time (simulated, us) algbw busbw #wrong (always N/A:
// no data moves), then the utilization of each axis's links over the collective: busy time over
// (links x time), in percent. Exit status 0; 2 for bad flags or a slice that cannot be.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <string_view>
#include <vector>

#include "backends/tpu_ici/timing_sim.h"
#include "backends/tpu_ici/topology.h"
#include "backends/tpu_ici/torus_plans.h"
#include "cli_args.h"
#include "nccl_sweep.h"
#include "sweep_args.h"
#include "validation.h"

namespace {

using namespace c10d;
using namespace c10d::tpu_ici;
using bench::Collective;

constexpr std::string_view kProgram = "c10d-icisim";
// The largest slice simulated: above the biggest pods (v5p: 8960 chips), and a bound on the
// simulator's time and memory, which grow with the chips.
constexpr long long kMaxChips = 1 << 14;

struct SimArgs {
  TopologySpec spec;
  std::string collective = "all_reduce";
  std::vector<char*> sweep;  // the rest, for parse_sweep_args
};

int usage_error(const std::string& why) {
  fmt::print(stderr,
             "{}: {}\nusage: {} --topology AxB [--preset v4|v5e|v5p] [--collective NAME] "
             "[--wrap all|none|1,0] [--link-gbps G] [--hop-latency-us U] [--down-links 1-2] "
             "[nccl-tests flags: -b -e -f -i -d -o -r]\n",
             kProgram, why, kProgram);
  return 2;
}

Plan plan_for(const Torus& t, int rank, Collective c, std::int64_t count, std::size_t elem,
              int root, const std::vector<std::int64_t>& a2a_counts,
              const std::vector<std::int64_t>& a2a_offsets) {
  switch (c) {
    case Collective::kAllReduce:
      return multi_axis_all_reduce(t, rank, count, elem);
    case Collective::kAllGather:
      return torus_all_gather(t, rank, count * static_cast<std::int64_t>(elem));
    case Collective::kReduceScatter:
      return torus_reduce_scatter(t, rank, count, elem);
    case Collective::kAllToAll:
      return routed_all_to_all(rank, t.size(), a2a_counts, a2a_offsets, a2a_counts, a2a_offsets);
    case Collective::kBroadcast:
      return torus_broadcast(t, rank, root, count * static_cast<std::int64_t>(elem));
    case Collective::kReduce:
      break;
  }
  return {};
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  SimArgs sim;
  double gbps = 0, latency_us = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--validate") {
      if (argc != 2) return usage_error("--validate takes no other flags");
      return print_validation_table();
    }
    const bool own = arg == "--preset" || arg == "--topology" || arg == "--collective" ||
                     arg == "--wrap" || arg == "--down-links" || arg == "--link-gbps" ||
                     arg == "--hop-latency-us";
    if (!own) {
      sim.sweep.push_back(argv[i]);
      continue;
    }
    if (i + 1 >= argc || std::string_view(argv[i + 1]).empty()) {
      return usage_error(fmt::format("{} needs a value", arg));
    }
    const std::string value = argv[++i];
    if (arg == "--preset") {
      sim.spec.preset = value;
    } else if (arg == "--topology") {
      sim.spec.topology = value;
    } else if (arg == "--collective") {
      sim.collective = value;
    } else if (arg == "--wrap") {
      sim.spec.wrap = value;
    } else if (arg == "--down-links") {
      sim.spec.down_links = value;
    } else {
      // A positive, finite number: 0 or less would silently mean "the preset's value".
      const auto number = bench::parse_real(value, 0, 1e12);
      if (!number || *number <= 0) {
        return usage_error(fmt::format("{} takes a positive number, not '{}'", arg, value));
      }
      (arg == "--link-gbps" ? gbps : latency_us) = *number;
    }
  }
  if (sim.spec.topology.empty()) return usage_error("--topology is required");
  sim.spec.link_bandwidth = gbps * 1e9;
  sim.spec.hop_latency = latency_us * 1e-6;
  std::vector<char*> sweep_argv{sim.collective.data()};
  sweep_argv.insert(sweep_argv.end(), sim.sweep.begin(), sim.sweep.end());
  const auto parsed = bench::parse_sweep_args(kProgram, sweep_argv, false);
  if (!parsed.error.empty()) return usage_error(parsed.error);
  const bench::SweepArgs& args = parsed.args;
  if (args.help) {
    fmt::print("{}", bench::usage(kProgram, false));
    return 0;
  }
  if (args.collective == Collective::kReduce) {
    return usage_error("reduce runs the shared binomial tree, which has no torus plan to simulate");
  }

  std::vector<int> dims;
  if (auto e = parse_dims(sim.spec.topology, dims); !e.empty()) return usage_error(e);
  long long chips = 1;
  for (int d : dims) {
    chips *= d;
    if (chips > kMaxChips) {
      return usage_error(fmt::format("--topology {} has more than {} chips, the most simulated",
                                     sim.spec.topology, kMaxChips));
    }
  }
  std::optional<Torus> torus;
  try {
    torus.emplace(make_torus(sim.spec, static_cast<int>(chips)));
  } catch (const std::exception& e) {
    return usage_error(e.what());
  }
  const Torus& t = *torus;
  const int n = t.size();
  if (args.root >= n) return usage_error(fmt::format("root {} is not a chip of {}", args.root, n));
  if (const std::string why = bench::size_error(args, n); !why.empty()) return usage_error(why);
  const std::size_t elem = element_size(args.dtype);

  fmt::print("# {} {}: {} chips, {}{}\n", kProgram, bench::collective_name(args.collective), n,
             sim.spec.preset.empty() ? "" : sim.spec.preset + " ", t.describe());
  fmt::print("# time: simulated (timing-only run of the ICI backend's schedules, no data)\n");
  if (const std::string note = bench::skipped_sizes_note(args, n); !note.empty()) {
    fmt::print("# {}\n", note);
  }
  std::string axes_header;
  for (int a = 0; a < t.ndims(); ++a) axes_header += fmt::format("  {:>6}", fmt::format("ax{}", a));
  fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}{}\n", "size",
             "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", axes_header);
  fmt::print("# {:>10}  {:>12}  {:>8}  {:>6}  {:>6}  {:>7}  {:>6}  {:>6}  {:>5}{}\n", "(B)",
             "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
             std::string(axes_header.size() > 0 ? axes_header.size() - 6 : 0, ' ') + "(util%)");

  const auto wall_start = std::chrono::steady_clock::now();
  double busbw_sum = 0;
  int rows = 0;
  for (std::optional<std::size_t> size = bench::first_sweep_size(args, n); size;
       size = bench::next_sweep_size(args, *size)) {
    const std::int64_t count = bench::sweep_count(args, *size, n);
    const bool split = args.collective == Collective::kAllGather ||
                       args.collective == Collective::kReduceScatter ||
                       args.collective == Collective::kAllToAll;
    const std::int64_t bytes = (split ? count * n : count) * static_cast<std::int64_t>(elem);
    std::vector<std::int64_t> a2a_counts, a2a_offsets;
    if (args.collective == Collective::kAllToAll) {
      const std::int64_t block = count * static_cast<std::int64_t>(elem);
      a2a_counts.assign(static_cast<std::size_t>(n), block);
      for (int r = 0; r < n; ++r) a2a_offsets.push_back(r * block);
    }
    SimResult result;
    try {
      result = simulate(t, [&](int r) {
        return plan_for(t, r, args.collective, count, elem, args.root, a2a_counts, a2a_offsets);
      });
    } catch (const std::exception& e) {
      fmt::print(stderr, "{}: {}\n", kProgram, e.what());
      return 1;
    }
    const double seconds = result.seconds;
    const double algbw = seconds > 0 ? static_cast<double>(bytes) / 1e9 / seconds : 0;
    const double busbw = algbw * bench::bus_factor(args.collective, n);
    std::string util;
    for (const auto& u : axis_usage(t, result)) {
      util += fmt::format("  {:>6.1f}", 100 * u.utilization);
    }
    fmt::print("{}{}{}\n", bench::row_prefix(args, bytes, count),
               bench::cell_text(seconds * 1e6, algbw, busbw, ""), util);
    busbw_sum += busbw;
    ++rows;
  }
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - wall_start;
  fmt::print("# Avg bus bandwidth    : {:g}\n", rows ? busbw_sum / rows : 0.0);
  fmt::print("# simulated in {:.2f} s of wall time\n#\n", wall.count());
  return 0;
}
