// pg_fault_child: one rank of the process-group fault tests. Joins the group with
// c10d::init_process_group() (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT from the environment)
// and runs one scenario:
//
//   kill VICTIM     every rank loops all_reduce on 4 MiB; rank VICTIM starts its 20th and
//                   SIGKILLs itself while it runs. Survivors print "FAILED <ms> <message>" (ms
//                   since their failing op was issued) and exit 3.
//   mismatch        with C10D_DEBUG=DETAIL: rank 1 calls broadcast while the others call
//                   all_reduce; every rank prints "MISMATCH <message>" and exits 3.
//   split_mismatch  the same, but rank 1 calls all_to_all with (even) split sizes while the
//                   others pass none (the MPI backend calls MPI_Alltoallv and MPI_Alltoall).
//   ok              20 all_reduces, checked; prints "OK" and exits 0.
//   large           all_reduce, broadcast and send/recv of sizes around the shared-memory
//                   single-copy threshold and of several MiB, checked; prints "OK", exits 0.
//   sum VALUE       prints "READY" once the group is made, sleeps C10D_TEST_HOLD_MS (default
//                   0), then all_reduces VALUE five times: prints "SUM <total>" and exits 0
//                   when every total is world size x VALUE, else "MIXED <total>" and exits 4
//                   (a rank of another job in the group: the file:// tests run two jobs with
//                   different values).
//   loop            all_reduces 64 KiB every 5 ms until one fails (a test kills ranks or cuts a
//                   link): prints "READY <rank> <pid>" after the first, then "FAILED <ms>
//                   <message>" (ms since the failing op was issued) and exits 3. At most 120 s.
//   hold            prints "READY" once the group is made and one all_reduce is done, then
//                   sleeps 60 s (the test kills it, leaving what a killed job leaves).
//   setup_fail VICTIM HOW
//                   rank VICTIM fails its set-up with a genuinely bad setting: HOW "shm", an
//                   impossible C10D_SHM_RING_BYTES; "host", a C10D_HOST that is no address.
//                   Every rank prints "SETUP_FAILED <ms> <message>" (ms since it began
//                   init_process_group) and exits 3.
//   freeze VICTIM   as kill, with a 3 s timeout per all_reduce, but rank VICTIM stops itself
//                   (SIGSTOP) in its 20th; the others print "FAILED <ms> <message>" and exit 3.
//   stall           (MPI backend, blocking collectives) rank 0 calls all_reduce with a 2 s
//                   timeout that rank 1 never joins: wait(100 ms) must throw TimeoutError
//                   ("WAITER_TIMEOUT") while the worker runs the blocking call, then the
//                   watchdog must end the job at the op's deadline. No rank may get further
//                   ("UNEXPECTED").
//   trace_mismatch  (C10D_TRACE_DIR set) 3 all_reduces, then rank 2 calls broadcast where the
//                   others call all_reduce #3: prints "FAILED <ms> <message>" and exits 3 when
//                   it fails (the recorder dumps first), else dumps (c10d::dump_traces), prints
//                   "DONE" and exits 0.
//   trace_skip      as trace_mismatch, but rank 2 skips all_reduce #3: it raises SIGUSR1 and
//                   prints "DUMPED" once its dump file appears (at most 20 s), exiting 0.
// Any other outcome prints "UNEXPECTED ..." and exits 1. Every wait is bounded (30 s, or
// C10D_TIMEOUT_MS).
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "c10d/c10d.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// Prints "<what> <ms since `since`> <error>" for the test to read, and returns the exit status
// of a rank that failed as expected.
int report_failure(std::string_view what, Clock::time_point since, const c10d::Error& e) {
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - since).count();
  fmt::print("{} {} {}\n", what, ms, e.what());
  std::fflush(stdout);
  return 3;
}

// The "large" scenario: every rank's bytes reach the others exact, whichever way they went.
int run_large(c10d::ProcessGroup& pg) {
  const int rank = pg.rank();
  const int n = pg.size();
  for (const std::int64_t bytes :
       {(2 << 20) - 4, 2 << 20, (2 << 20) + 4, (4 << 20) + 4, 16 << 20}) {
    const std::int64_t count = bytes / 4;
    auto t = c10d::Tensor::from_vector(std::vector<float>(count, 0.0f), c10d::DType::kFloat32);
    float* d = t.data<float>();
    for (std::int64_t j = 0; j < count; ++j) d[j] = static_cast<float>(rank + j % 7);
    pg.all_reduce({t})->wait(30s);
    for (std::int64_t j = 0; j < count; ++j) {
      if (d[j] != static_cast<float>(n * (n - 1) / 2 + n * (j % 7))) {
        fmt::print("UNEXPECTED: all_reduce of {} bytes: {} at {}\n", bytes, d[j], j);
        return 1;
      }
    }
    for (std::int64_t j = 0; j < count; ++j) d[j] = rank == 0 ? static_cast<float>(j) : -1.0f;
    pg.broadcast({t})->wait(30s);
    if (d[count - 1] != static_cast<float>(count - 1) ||
        d[count / 2] != static_cast<float>(count / 2)) {
      fmt::print("UNEXPECTED: broadcast of {} bytes\n", bytes);
      return 1;
    }
    // Rank r sends to r + 1 and receives from r - 1 (a ring of sends).
    for (std::int64_t j = 0; j < count; ++j) d[j] = static_cast<float>(rank * 1000 + j % 11);
    auto got = c10d::Tensor::from_vector(std::vector<float>(count, 0.0f), c10d::DType::kFloat32);
    auto recv = pg.recv({got}, (rank + n - 1) % n);
    pg.send({t}, (rank + 1) % n)->wait(30s);
    recv->wait(30s);
    const float* g = got.data<float>();
    for (std::int64_t j = 0; j < count; ++j) {
      if (g[j] != static_cast<float>((rank + n - 1) % n * 1000 + j % 11)) {
        fmt::print("UNEXPECTED: recv of {} bytes: {} at {}\n", bytes, g[j], j);
        return 1;
      }
    }
  }
  fmt::print("OK\n");
  return 0;
}

// The flight recorder scenarios (trace_mismatch, trace_skip): rank 2 strays at collective #3.
int run_trace(c10d::ProcessGroup& pg, const std::string& scenario) {
  auto t = c10d::Tensor::from_vector(std::vector<float>(4096, 1.0f), c10d::DType::kFloat32);
  for (int i = 0; i < 3; ++i) pg.all_reduce({t})->wait(30s);
  if (pg.rank() == 2 && scenario == "trace_skip") {
    const auto file = std::string(std::getenv("C10D_TRACE_DIR")) + "/c10d_trace_rank_2.json";
    ::raise(SIGUSR1);
    for (auto until = Clock::now() + 20s; Clock::now() < until; std::this_thread::sleep_for(10ms)) {
      if (::access(file.c_str(), F_OK) == 0) {
        fmt::print("DUMPED\n");
        return 0;
      }
    }
    fmt::print("UNEXPECTED: no dump after SIGUSR1\n");
    return 1;
  }
  const auto issued = Clock::now();
  try {
    (pg.rank() == 2 ? pg.broadcast({t}) : pg.all_reduce({t}))->wait(30s);
  } catch (const c10d::Error& e) {
    return report_failure("FAILED", issued, e);
  }
  c10d::dump_traces();
  fmt::print("DONE\n");
  return 0;
}

int run(const std::string& scenario, int victim, const std::string& how) {
  c10d::InitOptions options;
  if (std::getenv("C10D_TIMEOUT_MS") == nullptr) options.timeout = 30s;
  if (scenario == "setup_fail") {
    const char* rank_env = std::getenv("RANK");
    if (rank_env != nullptr && std::atoi(rank_env) == victim) {
      if (how == "shm") ::setenv("C10D_SHM_RING_BYTES", "1000", 1);  // not a power of two
      if (how == "host") ::setenv("C10D_HOST", "not-an-address", 1);
    }
    const auto started = Clock::now();
    try {
      c10d::init_process_group(options);
    } catch (const c10d::Error& e) {
      return report_failure("SETUP_FAILED", started, e);
    }
    fmt::print("UNEXPECTED: the set-up succeeded\n");
    return 1;
  }
  auto pg = c10d::init_process_group(options);
  const int rank = pg->rank();
  if (scenario == "large") return run_large(*pg);
  if (scenario == "sum" || scenario == "hold") {
    const float value = static_cast<float>(victim);
    auto v = c10d::Tensor::from_vector(std::vector<float>(16, value), c10d::DType::kFloat32);
    if (scenario == "hold") {
      pg->all_reduce({v})->wait(30s);
      fmt::print("READY\n");
      std::fflush(stdout);
      std::this_thread::sleep_for(60s);
      fmt::print("UNEXPECTED: not killed\n");
      return 1;
    }
    fmt::print("READY\n");
    std::fflush(stdout);
    if (const char* hold = std::getenv("C10D_TEST_HOLD_MS")) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(hold)));
    }
    for (int i = 0; i < 5; ++i) {
      float* d = v.data<float>();
      std::fill(d, d + v.numel(), value);
      pg->all_reduce({v})->wait(30s);
      if (d[0] != value * static_cast<float>(pg->size())) {
        fmt::print("MIXED {}\n", d[0]);
        return 4;
      }
    }
    fmt::print("SUM {}\n", v.data<float>()[0]);
    return 0;
  }
  if (scenario == "loop") {
    auto v = c10d::Tensor::empty({16384}, c10d::DType::kFloat32);
    const auto until = Clock::now() + 120s;
    for (int i = 0; Clock::now() < until; ++i) {
      float* d = v.data<float>();
      std::fill(d, d + v.numel(), 1.0f);
      const auto issued = Clock::now();
      try {
        pg->all_reduce({v})->wait(150s);
      } catch (const c10d::Error& e) {
        return report_failure("FAILED", issued, e);
      }
      if (d[0] != static_cast<float>(pg->size())) {
        fmt::print("UNEXPECTED: wrong value {} in iteration {}\n", d[0], i);
        return 1;
      }
      if (i == 0) {
        fmt::print("READY {} {}\n", rank, ::getpid());
        std::fflush(stdout);
      }
      std::this_thread::sleep_for(5ms);
    }
    fmt::print("UNEXPECTED: nothing failed in 120 s\n");
    return 1;
  }
  if (scenario == "trace_mismatch" || scenario == "trace_skip") return run_trace(*pg, scenario);
  auto t = c10d::Tensor::empty({1 << 20}, c10d::DType::kFloat32);
  if (scenario == "mismatch" || scenario == "split_mismatch") {
    std::shared_ptr<c10d::Work> work;
    if (scenario == "split_mismatch") {
      auto out = c10d::Tensor::empty({t.numel()}, t.dtype());
      c10d::AllToAllOptions opts;
      if (rank == 1) {
        const std::int64_t each = t.numel() / pg->size();
        opts.input_split_sizes.assign(static_cast<std::size_t>(pg->size()), each);
        opts.output_split_sizes = opts.input_split_sizes;
      }
      work = pg->all_to_all(out, t, opts);
    } else if (rank == 1) {
      work = pg->broadcast({t});
    } else {
      work = pg->all_reduce({t});
    }
    try {
      work->wait(30s);
    } catch (const c10d::InvalidArgument& e) {
      fmt::print("MISMATCH {}\n", e.what());
      std::fflush(stdout);
      return 3;
    }
    fmt::print("UNEXPECTED: the mismatched collective succeeded\n");
    return 1;
  }
  if (scenario == "start_fails") {
    // An all_reduce MPI cannot count (more than INT_MAX elements; nothing reads the one real
    // byte), left to the worker: the waiter comes only after the worker's 1 ms grace.
    static std::uint8_t byte = 0;
    const auto huge =
        c10d::Tensor::from_blob(&byte, {std::int64_t{INT_MAX} + 1}, c10d::DType::kUInt8);
    auto work = pg->all_reduce({huge});
    std::this_thread::sleep_for(50ms);
    try {
      work->wait(10s);
      fmt::print("UNEXPECTED: the all_reduce finished\n");
    } catch (const c10d::Unsupported& e) {
      fmt::print("START_FAILED: {}\n", e.what());
      return 0;
    } catch (const c10d::Error& e) {
      fmt::print("UNEXPECTED: {}\n", e.what());
    }
    return 1;
  }
  if (scenario == "truncate") {
    // Rank 0 sends 10 floats where rank 1 posted a receive of 5: MPI reports MPI_ERR_TRUNCATE,
    // and the receive's Work must fail with MPI's own words for it.
    if (rank == 0) {
      pg->send({c10d::Tensor::from_vector(std::vector<float>(10, 1.0f), c10d::DType::kFloat32)}, 1,
               {.tag = 5})
          ->wait(10s);
      return 0;
    }
    auto small = c10d::Tensor::from_vector(std::vector<float>(5, 0.0f), c10d::DType::kFloat32);
    try {
      pg->recv({small}, 0, {.tag = 5})->wait(10s);
      fmt::print("UNEXPECTED: the truncated receive succeeded\n");
    } catch (const c10d::NetworkError& e) {
      fmt::print("MPI_ERROR: {}\n", e.what());
      return 0;
    } catch (const c10d::Error& e) {
      fmt::print("UNEXPECTED: {}\n", e.what());
    }
    return 1;
  }
  if (scenario == "stall") {
    if (rank != 0) {
      std::this_thread::sleep_for(30s);  // the job is aborted long before
      fmt::print("UNEXPECTED: rank {} was not stopped\n", rank);
      return 1;
    }
    auto work = pg->all_reduce({t}, {.timeout = 2000ms});
    try {
      work->wait(100ms);
      fmt::print("UNEXPECTED: the all_reduce finished without rank 1\n");
      return 1;
    } catch (const c10d::TimeoutError&) {
      fmt::print("WAITER_TIMEOUT\n");
      std::fflush(stdout);
    }
    try {
      work->wait(30s);
      fmt::print("UNEXPECTED: the all_reduce finished without rank 1\n");
    } catch (const c10d::Error& e) {
      fmt::print("UNEXPECTED: {}\n", e.what());
    }
    return 1;
  }
  for (int i = 0; i < 200; ++i) {
    float* d = t.data<float>();
    for (std::int64_t j = 0; j < t.numel(); ++j) d[j] = 1.0f;
    const auto issued = Clock::now();
    c10d::AllreduceOptions opts;
    if (scenario == "freeze") opts.timeout = 3000ms;
    auto work = pg->all_reduce({t}, opts);
    if ((scenario == "kill" || scenario == "freeze") && rank == victim && i == 19) {
      std::this_thread::sleep_for(2ms);  // let the all_reduce get onto the wire
      ::raise(scenario == "kill" ? SIGKILL : SIGSTOP);
    }
    try {
      work->wait(30s);
    } catch (const c10d::Error& e) {
      return report_failure("FAILED", issued, e);
    }
    if (d[0] != static_cast<float>(pg->size()) || d[t.numel() - 1] != d[0]) {
      fmt::print("UNEXPECTED: wrong value {} in iteration {}\n", d[0], i);
      return 1;
    }
    if (scenario == "ok" && i == 19) {
      fmt::print("OK\n");
      return 0;
    }
  }
  fmt::print("UNEXPECTED: nothing failed\n");
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: pg_fault_child kill VICTIM | freeze VICTIM | setup_fail VICTIM shm|host | "
                 "mismatch | split_mismatch | ok | large | stall | sum VALUE | hold | loop | "
                 "trace_mismatch | trace_skip\n");
    return 2;
  }
  try {
    return run(argv[1], argc > 2 ? std::atoi(argv[2]) : -1, argc > 3 ? argv[3] : "");
  } catch (const std::exception& e) {
    fmt::print("UNEXPECTED: {}\n", e.what());
    return 1;
  }
}
