// mpi_concurrent_groups: under `mpirun -np N` with the MPI backend, a collective that waits for a
// late rank must not hold up another group's collectives on another thread, at either thread
// level (C10D_MPI_THREAD_LEVEL=multiple or serialized). Under MPI_THREAD_SERIALIZED every MPI
// call of the process takes one mutex; a waiter that held it for the whole of its op, instead of
// for each call, would deadlock this program (then every op fails on its 20 s timeout).
//
// Rank 0 waits on a world all_reduce from a second thread while its main thread runs an
// all_reduce on a subgroup of every rank. The other ranks join the world all_reduce only after
// their subgroup all_reduce is done, which needs rank 0's subgroup op to progress while its world
// op is pending. Checks the answers and that MPI runs at the level asked for. Prints "OK rank R
// at LEVEL" and exits 0, or prints what differed and exits 1.
#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "c10d/c10d.h"
#include "mpirun_program.h"

namespace {

using namespace std::chrono_literals;

using c10d::testing::check;

c10d::Tensor filled(float value) {
  auto t = c10d::Tensor::empty({1000}, c10d::DType::kFloat32);
  for (std::int64_t i = 0; i < 1000; ++i) t.data<float>()[i] = value;
  return t;
}

int run() {
  c10d::InitOptions options;
  options.backend = "mpi";
  options.timeout = 20s;
  auto world = c10d::init_process_group(options);
  const int rank = world->rank();
  const int n = world->size();
  std::vector<int> everyone(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) everyone[static_cast<std::size_t>(r)] = r;
  auto sub = world->new_group(everyone);

  const char* asked = std::getenv("C10D_MPI_THREAD_LEVEL");
  const bool serialized = asked != nullptr && std::string(asked) == "serialized";
  int provided = 0;
  MPI_Query_thread(&provided);
  bool ok = check(provided == (serialized ? MPI_THREAD_SERIALIZED : MPI_THREAD_MULTIPLE),
                  fmt::format("MPI runs at thread level {}", provided));

  const float rank_sum = static_cast<float>(n * (n - 1) / 2);
  auto w = filled(static_cast<float>(rank));
  auto s = filled(static_cast<float>(10 * rank));
  if (rank == 0) {
    std::exception_ptr world_error;
    std::thread waiter([&] {
      try {
        world->all_reduce({w})->wait();
      } catch (...) {
        world_error = std::current_exception();
      }
    });
    std::this_thread::sleep_for(100ms);  // the world op is pending, its waiter polling MPI
    std::exception_ptr sub_error;
    try {
      sub->all_reduce({s})->wait();
    } catch (...) {
      sub_error = std::current_exception();
    }
    waiter.join();
    if (sub_error) std::rethrow_exception(sub_error);
    if (world_error) std::rethrow_exception(world_error);
  } else {
    sub->all_reduce({s})->wait();
    world->all_reduce({w})->wait();
  }
  ok &= check(w.data<float>()[999] == rank_sum,
              fmt::format("world all_reduce gave {}", w.data<float>()[999]));
  ok &= check(s.data<float>()[999] == 10 * rank_sum,
              fmt::format("subgroup all_reduce gave {}", s.data<float>()[999]));
  world->barrier()->wait();
  if (ok) fmt::print("OK rank {} at {}\n", rank, serialized ? "SERIALIZED" : "MULTIPLE");
  return ok ? 0 : 1;
}

}  // namespace

int main() { return c10d::testing::run_program(run); }
