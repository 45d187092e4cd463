// c10d-trace-ring-bench: what the flight recorder costs an op (src/backends/common/trace_ring.h).
//
// Each op is what OpRunner does to the ring with the recorder on: add() when queued, update()
// when started and when completed, with the record's own transitions (a coarse clock read each)
// between them. Timed on one thread as the median of --runs runs of --ops ops, against the same
// loop calling functions that do nothing in the ring's place; the difference is the ring's cost.
// With --dumper, another thread snapshots the ring every millisecond meanwhile, as a dump would.
//
//   c10d-trace-ring-bench [--ops N] [--runs R] [--capacity C] [--dumper]
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <string_view>
#include <thread>
#include <vector>

#include "backends/common/trace_ring.h"
#include "cli_args.h"

namespace {

using c10d::backends::OpRecord;
using c10d::backends::TraceRing;
using Clock = std::chrono::steady_clock;

struct Options {
  std::uint64_t ops = 2'000'000;
  int runs = 9;
  std::size_t capacity = 2000;
  bool dumper = false;
};

// The baseline: the ring's calls made, doing nothing (not inlined, so the loop builds and passes
// the record as it does for the ring).
struct NullRing {
  [[gnu::noinline]] std::uint64_t add(const OpRecord& r, std::uint64_t, c10d::Milliseconds) {
    asm volatile("" : : "r"(&r) : "memory");
    return r.sequence;
  }
  [[gnu::noinline]] void update(std::uint64_t, const OpRecord& r) {
    asm volatile("" : : "r"(&r) : "memory");
  }
};

// ns per op of `ops` ops recorded in `ring`.
template <typename Ring>
double run_once(Ring& ring, const Options& o) {
  const auto t = c10d::Tensor::empty({1024}, c10d::DType::kFloat32);
  // Records made once (as a group's ops are, before the ring sees them); each op resets one.
  std::vector<OpRecord> records(64, OpRecord::of("all_reduce", t, c10d::ReduceOp::kSum, -1, 1024));
  for (auto& r : records) r.timed = true;
  const auto start = Clock::now();
  for (std::uint64_t i = 0; i < o.ops; ++i) {
    OpRecord& r = records[i % records.size()];
    r.sequence = i;
    r.state_ = OpRecord::State::kQueued;
    r.queued = c10d::core::coarse_now();
    const std::uint64_t id = ring.add(r, 0, c10d::Milliseconds(30000));
    r.move_to(OpRecord::State::kStarted);
    ring.update(id, r);
    r.move_to(OpRecord::State::kCompleted);
    ring.update(id, r);
  }
  const std::chrono::duration<double, std::nano> took = Clock::now() - start;
  return took.count() / static_cast<double>(o.ops);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int run(const Options& o) {
  TraceRing ring({.name = "0", .desc = "world", .ranks = {0}, .rank = 0}, o.capacity);
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> snapshots{0};
  std::thread dumper;
  if (o.dumper) {
    dumper = std::thread([&] {
      while (!done.load(std::memory_order_relaxed)) {
        if (!ring.snapshot().empty()) snapshots.fetch_add(1, std::memory_order_relaxed);
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  NullRing null;
  run_once(ring, o);  // warm-up: the ring fills
  std::vector<double> with, without;
  for (int i = 0; i < o.runs; ++i) {  // alternating, so drift hits both alike
    with.push_back(run_once(ring, o));
    without.push_back(run_once(null, o));
  }
  done.store(true);
  if (dumper.joinable()) dumper.join();
  const double w = median(with), wo = median(without);
  fmt::print("trace ring: {:.1f} ns/op with the ring, {:.1f} without: {:.1f} ns/op recording\n", w,
             wo, w - wo);
  fmt::print("  ({} runs of {} ops, capacity {}{})\n", o.runs, o.ops, o.capacity,
             o.dumper ? fmt::format(", {} snapshots meanwhile", snapshots.load()) : "");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  namespace bench = c10d::bench;
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--dumper") {
      o.dumper = true;
      continue;
    }
    if (i + 1 >= argc) {
      fmt::print(stderr, "c10d-trace-ring-bench: {} needs a value\n", flag);
      return 2;
    }
    const std::string_view value = argv[++i];
    bool ok = true;
    if (flag == "--ops") {
      const auto v = bench::parse_integer<std::uint64_t>(value, 1, 1'000'000'000);
      ok = v.has_value();
      if (ok) o.ops = *v;
    } else if (flag == "--runs") {
      const auto v = bench::parse_integer<int>(value, 1, 1000);
      ok = v.has_value();
      if (ok) o.runs = *v;
    } else if (flag == "--capacity") {
      const auto v = bench::parse_integer<std::size_t>(value, 1, 1 << 20);
      ok = v.has_value();
      if (ok) o.capacity = *v;
    } else {
      fmt::print(stderr,
                 "usage: c10d-trace-ring-bench [--ops N] [--runs R] [--capacity C] [--dumper]\n");
      return 2;
    }
    if (!ok) {
      fmt::print(stderr, "c10d-trace-ring-bench: bad value '{}' for {}\n", value, flag);
      return 2;
    }
  }
  return run(o);
}
