// c10d-setup-bench: what making groups costs, at a world size where it shows.
//
//   c10d-setup-bench [--group 8] [--iters 3] [--backend tcp|mpi] [--json FILE]
//
// Every rank runs this program, started by the launcher (c10drun --nproc-per-node N ...) or by
// mpirun; rank, world size and the store come from the environment (c10d::rendezvous("env://"),
// under mpirun rank 0 hosts the store). Each iteration, after a barrier in the store (so that
// every rank starts its clock within one store notification of the others), a rank times:
//   init        init_process_group over a store of the iteration's own (a PrefixStore), so no
//               iteration reads another's keys
//   first_op    the world group's first barrier: a transport that connects on first use pays
//               for its connections here, so init + first_op is the honest world figure
//   new_group   new_group of the first --group ranks (every rank calls it; the others get null)
//   sub_op      the subgroup's first barrier (members only; 0 for the others)
// Each rank puts its four times in the store; rank 0 prints, per iteration, the slowest rank's
// time of each phase (when the last rank had its group: what a job waits for) and the median
// rank's, and at the end the median over iterations of each. --json writes the same as one JSON
// object. bench/group_setup.py runs it against two builds, alternating.
//
// Exit status: 0; 1 when a group or op failed; 2 for a bad flag.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/process_group.h"
#include "c10d/rendezvous.h"
#include "c10d/store.h"
#include "c10d/work.h"
#include "cli_args.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr const char* kPhases[] = {"init", "first_op", "new_group", "sub_op"};
constexpr std::size_t kNumPhases = 4;

struct Args {
  int group = 8;
  int iters = 3;
  std::string backend = "tcp";
  std::string json;
};

struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (i + 1 >= argc) throw UsageError(fmt::format("{} needs a value", flag));
    const std::string_view value = argv[++i];
    if (flag == "--group" || flag == "--iters") {
      const auto n = c10d::bench::parse_integer<int>(value, 1, 1 << 20);
      if (!n) throw UsageError(fmt::format("{} {}: want a count from 1", flag, value));
      (flag == "--group" ? a.group : a.iters) = *n;
    } else if (flag == "--backend") {
      if (value != "tcp" && value != "mpi") {
        throw UsageError(fmt::format("--backend {}: want tcp or mpi", value));
      }
      a.backend = value;
    } else if (flag == "--json") {
      a.json = value;
    } else {
      throw UsageError(fmt::format("unknown flag {}", flag));
    }
  }
  return a;
}

std::span<const std::uint8_t> bytes_of(const std::string& s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// Every rank arrives at `name`; returns once all `world` have.
void store_barrier(c10d::Store& store, const std::string& name, int world) {
  if (store.add(name + "/arrived", 1) == world) store.set(name + "/go", bytes_of("1"));
  const std::string go = name + "/go";
  store.wait(std::span<const std::string>(&go, 1));
}

double us_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::micro>(b - a).count();
}

// The value at the middle of `v` (the upper one of two).
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One iteration on this rank: its four times in microseconds.
std::vector<double> time_once(const Args& args, const std::shared_ptr<c10d::Store>& store, int rank,
                              int world) {
  const std::vector<int> members = [&] {
    std::vector<int> m(static_cast<std::size_t>(std::min(args.group, world)));
    for (std::size_t i = 0; i < m.size(); ++i) m[i] = static_cast<int>(i);
    return m;
  }();
  store_barrier(*store, "start", world);
  const auto t0 = Clock::now();
  auto pg = c10d::init_process_group(
      {.backend = args.backend, .rank = rank, .world_size = world, .store = store});
  const auto t1 = Clock::now();
  pg->barrier()->wait();
  const auto t2 = Clock::now();
  auto sub = pg->new_group(members);
  const auto t3 = Clock::now();
  if (sub) sub->barrier()->wait();
  const auto t4 = Clock::now();
  // Every rank is done with both groups before any destroys them.
  store_barrier(*store, "end", world);
  sub.reset();
  pg.reset();
  return {us_between(t0, t1), us_between(t1, t2), us_between(t2, t3), us_between(t3, t4)};
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "c10d-setup-bench: %s\n", e.what());
    return 2;
  }
  try {
    const c10d::RendezvousResult rv = c10d::rendezvous("env://");
    const int rank = rv.rank;
    const int world = rv.world_size;
    std::vector<std::vector<double>> slowest(kNumPhases), middle(kNumPhases);
    if (rank == 0) {
      std::printf("# c10d-setup-bench: backend %s, %d ranks, subgroup of %d; times in ms\n",
                  args.backend.c_str(), world, std::min(args.group, world));
      std::printf("# %4s %12s %12s %12s %12s   (slowest rank / median rank)\n", "iter", "init",
                  "first_op", "new_group", "sub_op");
    }
    for (int it = 0; it < args.iters; ++it) {
      auto store = std::make_shared<c10d::PrefixStore>(fmt::format("setup-bench/{}", it), rv.store);
      const std::vector<double> mine = time_once(args, store, rank, world);
      store->set(fmt::format("result/{}", rank),
                 bytes_of(fmt::format("{} {} {} {}", mine[0], mine[1], mine[2], mine[3])));
      if (rank != 0) continue;
      std::vector<std::string> keys;
      for (int r = 0; r < world; ++r) keys.push_back(fmt::format("result/{}", r));
      std::vector<std::vector<double>> by_phase(kNumPhases);
      for (const c10d::Bytes& v : store->multi_get(keys)) {
        const std::string text(v.begin(), v.end());
        double p[kNumPhases] = {};
        if (std::sscanf(text.c_str(), "%lf %lf %lf %lf", &p[0], &p[1], &p[2], &p[3]) != 4) {
          throw std::runtime_error("a rank's result does not parse: " + text);
        }
        for (std::size_t i = 0; i < kNumPhases; ++i) by_phase[i].push_back(p[i]);
      }
      std::printf("  %4d", it);
      for (std::size_t i = 0; i < kNumPhases; ++i) {
        const double top = *std::max_element(by_phase[i].begin(), by_phase[i].end()) / 1e3;
        const double mid = median(by_phase[i]) / 1e3;
        slowest[i].push_back(top);
        middle[i].push_back(mid);
        std::printf(" %5.1f/%-6.1f", top, mid);
      }
      std::printf("\n");
      std::fflush(stdout);
    }
    if (rank == 0) {
      std::printf("# median over %d iterations (slowest rank):", args.iters);
      for (std::size_t i = 0; i < kNumPhases; ++i) {
        std::printf(" %s %.1f", kPhases[i], median(slowest[i]));
      }
      std::printf(" ms\n");
      if (!args.json.empty()) {
        nlohmann::ordered_json row = {
            {"backend", args.backend}, {"world", world}, {"group", std::min(args.group, world)}};
        for (std::size_t i = 0; i < kNumPhases; ++i) {
          row[fmt::format("{}_ms", kPhases[i])] = slowest[i];
          row[fmt::format("{}_median_rank_ms", kPhases[i])] = middle[i];
        }
        const std::string out = row.dump() + "\n";
        std::FILE* f = std::fopen(args.json.c_str(), "w");
        if (f == nullptr || std::fputs(out.c_str(), f) < 0 || std::fclose(f) != 0) {
          throw std::runtime_error("cannot write " + args.json);
        }
      }
    }
    // Rank 0 may host the store (under mpirun): it leaves once every other rank has.
    store_barrier(*rv.store, "setup-bench/exit", world);
    if (rank != 0 && rv.store->add("setup-bench/left", 1) == world - 1) {
      rv.store->set("setup-bench/all_left", bytes_of("1"));
    }
    if (rank == 0 && world > 1) {
      const std::string all_left = "setup-bench/all_left";
      rv.store->wait(std::span<const std::string>(&all_left, 1));
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d-setup-bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
