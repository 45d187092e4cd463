// mpi_allreduce_algorithm: under `mpirun -np N`, checks that the MPI backend picks libnbc's
// iallreduce algorithm per call (src/backends/mpi/nbc_allreduce_choice.h, NbcAllreduceChoice):
// after an all_reduce below 64 KiB the MCA variable coll_libnbc_iallreduce_algorithm reads 4
// (recursive doubling), after one of 64 KiB or more 1 (ring), and both answers are right. Run
// with `--expect-user V` (and OMPI_MCA_coll_libnbc_iallreduce_algorithm=V set), the user's
// choice must stay V throughout. Prints "OK rank R" and exits 0, or what differed and exits 1.
#include <fmt/format.h>
#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "c10d/c10d.h"

namespace {

using namespace std::chrono_literals;

// The variable's value, read through the MPI tool interface.
int libnbc_algorithm() {
  int provided = 0, index = 0, count = 0, value = -1;
  MPI_T_cvar_handle handle;
  if (MPI_T_init_thread(MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS ||
      MPI_T_cvar_get_index("coll_libnbc_iallreduce_algorithm", &index) != MPI_SUCCESS ||
      MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) {
    throw std::runtime_error("coll_libnbc_iallreduce_algorithm is not readable through MPI_T");
  }
  MPI_T_cvar_read(handle, &value);
  MPI_T_cvar_handle_free(&handle);
  MPI_T_finalize();
  return value;
}

int run(int argc, char** argv) {
  const int expect_user =
      argc == 3 && std::string(argv[1]) == "--expect-user" ? std::atoi(argv[2]) : -1;
  c10d::InitOptions options;
  options.backend = "mpi";
  options.timeout = 60s;
  auto pg = c10d::init_process_group(options);
  const int n = pg->size();
  bool ok = true;
  for (std::int64_t count : {2, 1 << 14, 5, 1 << 20}) {  // 8 B, 64 KiB, 20 B, 4 MiB
    auto t = c10d::Tensor::empty({count}, c10d::DType::kFloat32);
    for (std::int64_t i = 0; i < count; ++i) t.data<float>()[i] = static_cast<float>(pg->rank());
    pg->all_reduce({t})->wait(60s);
    const float want = static_cast<float>(n * (n - 1) / 2);
    for (std::int64_t i = 0; i < count; i += 997) {
      if (t.data<float>()[i] != want) {
        fmt::print(stderr, "FAIL count {} element {} = {}, not {}\n", count, i, t.data<float>()[i],
                   want);
        ok = false;
        break;
      }
    }
    const int expected = expect_user >= 0 ? expect_user : count * 4 >= (64 << 10) ? 1 : 4;
    const int got = libnbc_algorithm();
    if (got != expected) {
      fmt::print(stderr, "FAIL after an all_reduce of {} B the algorithm is {}, not {}\n",
                 count * 4, got, expected);
      ok = false;
    }
  }
  pg->barrier()->wait(60s);
  if (ok) fmt::print("OK rank {}\n", pg->rank());
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "FAIL {}\n", e.what());
    return 1;
  }
}
