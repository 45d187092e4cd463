#include "backends/mpi/nbc_allreduce_choice.h"

#include <cstdlib>

namespace c10d::inline v1::mpi {

void NbcAllreduceChoice::init(int mpi_level) {
  constexpr const char* kName = "coll_libnbc_iallreduce_algorithm";
  if (std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm") != nullptr) return;
  int provided = 0, index = 0, count = 0, value = -1;
  if (MPI_T_init_thread(mpi_level, &provided) != MPI_SUCCESS) return;
  if (MPI_T_cvar_get_index(kName, &index) != MPI_SUCCESS ||
      MPI_T_cvar_handle_alloc(index, nullptr, &handle_, &count) != MPI_SUCCESS) {
    MPI_T_finalize();
    return;
  }
  if (count == 1 && MPI_T_cvar_read(handle_, &value) == MPI_SUCCESS && value == 0) {
    current_ = 0;
    active_ = true;
  } else {
    MPI_T_cvar_handle_free(&handle_);
    MPI_T_finalize();
  }
}

std::unique_lock<std::mutex> NbcAllreduceChoice::select_slow(algorithms::Algorithm algorithm) {
  std::unique_lock lock(mu_);
  if (!active_) return {};
  const int want = algorithm == algorithms::Algorithm::kRing ? kRing : kRecursiveDoubling;
  if (want != current_ && MPI_T_cvar_write(handle_, &want) == MPI_SUCCESS) current_ = want;
  return lock;
}

void NbcAllreduceChoice::shutdown() {
  if (!active_) return;
  std::lock_guard lock(mu_);
  active_ = false;
  MPI_T_cvar_handle_free(&handle_);
  MPI_T_finalize();
}

}  // namespace c10d::inline v1::mpi
