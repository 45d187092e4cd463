// Threads as ranks: the harness the algorithm tests share. Every rank runs on its own thread
// over one in-process world (src/transport/inproc_transport.h).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "../rank_threads.h"
#include "algorithms/context.h"
#include "c10d/types.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::algorithms::testing {

// Makes rank r's transport; called on rank r's own thread (a transport's setup may wait for
// the other ranks).
using TransportFactory = std::function<std::unique_ptr<transport::Transport>(int rank)>;

// Runs fn(rank, transport) on `n` threads, each with the transport `make` gives it; rethrows
// the first error.
inline void run_ranks(int n, const TransportFactory& make,
                      const std::function<void(int, transport::Transport&)>& fn) {
  test::run_rank_threads(n, [&](int r) {
    const auto t = make(r);
    fn(r, *t);
  });
}

// The same over one in-process world.
inline void run_ranks(int n, const std::function<void(int, transport::Transport&)>& fn) {
  auto world = std::make_shared<transport::InProcWorld>(n);
  run_ranks(
      n, [&](int r) { return std::make_unique<transport::InProcTransport>(world, r); }, fn);
}

// An op's context: tag (group 0, `seq`) and a deadline far enough off for any test here.
inline Context context(transport::Transport& t, std::uint64_t seq = 1,
                       transport::Clock::duration timeout = std::chrono::seconds(20)) {
  return {t, transport::make_tag(0, seq), transport::Clock::now() + timeout};
}

// Rank r's element i of a reduction test: small enough that sums and products stay exact.
inline double value(int r, std::int64_t i) { return static_cast<double>((r + 1) + (i % 5)); }

// The closed form of element i reduced over n ranks (PREMUL_SUM's factor is 0.5).
inline double expected(ReduceOp op, int n, std::int64_t i) {
  double e = 0;
  for (int q = 0; q < n; ++q) {
    const double v = value(q, i);
    if (op == ReduceOp::kMax) {
      e = q == 0 ? v : std::max(e, v);
    } else {
      e += op == ReduceOp::kPremulSum ? 0.5 * v : v;
    }
  }
  return op == ReduceOp::kAvg ? e / n : e;
}

}  // namespace c10d::inline v1::algorithms::testing
