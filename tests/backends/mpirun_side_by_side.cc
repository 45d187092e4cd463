// mpirun_side_by_side: under `mpirun -np N`, one job holds a TCP group and an MPI group at once.
// The TCP group meets through env:// with no MASTER_ADDR/MASTER_PORT (rank 0 hosts the store on
// this host; src/store/mpirun_store.h); the MPI group is MPI_COMM_WORLD. Both all_reduce and
// broadcast rank-dependent data, interleaved, and every rank checks the closed-form answers on
// both and that both groups agree on rank and size. Prints "OK rank R" and exits 0, or prints
// what differed and exits 1.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <exception>

#include "c10d/c10d.h"
#include "mpirun_program.h"

namespace {

using namespace std::chrono_literals;

using c10d::testing::check;

int run() {
  c10d::InitOptions tcp_options;
  tcp_options.backend = "tcp";
  tcp_options.init_method = "env://";
  tcp_options.timeout = 60s;
  auto tcp = c10d::init_process_group(tcp_options);
  c10d::InitOptions mpi_options;
  mpi_options.backend = "mpi";
  mpi_options.timeout = 60s;
  auto mpi = c10d::init_process_group(mpi_options);
  bool ok = check(tcp->rank() == mpi->rank() && tcp->size() == mpi->size(),
                  fmt::format("tcp group rank {} of {}, mpi group rank {} of {}", tcp->rank(),
                              tcp->size(), mpi->rank(), mpi->size()));
  const int rank = tcp->rank();
  const int n = tcp->size();
  constexpr std::int64_t kCount = 1 << 16;
  for (int round = 0; round < 3; ++round) {
    auto a = c10d::Tensor::empty({kCount}, c10d::DType::kFloat32);
    auto b = c10d::Tensor::empty({kCount}, c10d::DType::kFloat32);
    for (std::int64_t i = 0; i < kCount; ++i) {
      a.data<float>()[i] = static_cast<float>(rank + i % 7);
      b.data<float>()[i] = static_cast<float>(2 * rank + round);
    }
    auto wa = tcp->all_reduce({a});
    auto wb = mpi->all_reduce({b});
    wb->wait(60s);
    wa->wait(60s);
    const float rank_sum = static_cast<float>(n * (n - 1) / 2);
    for (std::int64_t i = 0; i < kCount; i += 4099) {
      ok &= check(
          a.data<float>()[i] == rank_sum + static_cast<float>(n * (i % 7)),
          fmt::format("tcp all_reduce round {} element {} = {}", round, i, a.data<float>()[i]));
      ok &= check(
          b.data<float>()[i] == 2 * rank_sum + static_cast<float>(n * round),
          fmt::format("mpi all_reduce round {} element {} = {}", round, i, b.data<float>()[i]));
    }
    auto c = c10d::Tensor::from_vector(std::vector<std::int64_t>{rank * 10 + round},
                                       c10d::DType::kInt64);
    c10d::BroadcastOptions root;
    root.root = n - 1;
    mpi->broadcast({c}, root)->wait(60s);
    tcp->broadcast({c})->wait(60s);
    // Rank n-1's value reaches everyone over MPI; TCP's broadcast from rank 0 then keeps it.
    ok &= check(c.data<std::int64_t>()[0] == (n - 1) * 10 + round,
                fmt::format("broadcast round {} gave {}", round, c.data<std::int64_t>()[0]));
  }
  tcp->barrier()->wait(60s);
  mpi->barrier()->wait(60s);
  if (ok) fmt::print("OK rank {}\n", rank);
  return ok ? 0 : 1;
}

}  // namespace

int main() { return c10d::testing::run_program(run); }
