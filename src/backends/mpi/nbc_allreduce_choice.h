// NbcAllreduceChoice: the algorithm libnbc, Open MPI's nonblocking collectives, uses for the MPI
// group's nonblocking all_reduce (C10D_MPI_BLOCKING=0), set through the MPI tool interface.
//
// libnbc runs every in-place MPI_Iallreduce on fewer than 4 ranks, whatever its size, as a
// binomial reduce followed by a broadcast: at 16 MiB on 2 ranks 2.2x slower than MPI_Allreduce.
// Its algorithm is the MCA variable coll_libnbc_iallreduce_algorithm, which the MPI tool
// interface (MPI_T) can set between calls, so each all_reduce sets it first to what
// algorithms::choose_algorithm says for Fabric::kMpiNonblocking: recursive doubling (log2 p
// rounds) below 64 KiB, the ring (bandwidth-optimal) from 64 KiB up, where each measured fastest
// (docs/benchmarks.md). Left alone when the user chose (the variable's environment
// variable, or a value not the default) or when there is no such variable (another MPI, or Open
// MPI without libnbc). The variable is the process's: a program that also calls MPI_Iallreduce
// itself gets the last choice made here.
//
// Thread-safety: select() and shutdown() may be called from any thread; init() once, first.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstddef>
#include <mutex>

#include "algorithms/choice.h"

namespace c10d::inline v1::mpi {

class NbcAllreduceChoice {
 public:
  // After MPI_Init; `mpi_level` is the thread level MPI runs at. MPI_T is initialized at that
  // level: Open MPI 4.1's MPI_T_init_thread makes the level it is asked for the process's own
  // (MPI_Query_thread then reports it, and Open MPI's thread-multiple flag follows), so asking
  // for MPI_THREAD_MULTIPLE turned a process running at MPI_THREAD_SERIALIZED into one that
  // claims MULTIPLE.
  void init(int mpi_level);

  // Sets libnbc's algorithm to `algorithm` (kRing, or kHalvingDoubling: recursive doubling);
  // the lock returned is held while the caller posts the MPI_Iallreduce, so that another
  // group's thread cannot change it in between.
  std::unique_lock<std::mutex> select(algorithms::Algorithm algorithm) {
    if (!active_) return {};
    return select_slow(algorithm);
  }

  // Before MPI_Finalize, when this process initialized MPI.
  void shutdown();

 private:
  std::unique_lock<std::mutex> select_slow(algorithms::Algorithm algorithm);

  static constexpr int kRing = 1, kRecursiveDoubling = 4;  // libnbc's numbering
  std::atomic<bool> active_{false};
  MPI_T_cvar_handle handle_ = nullptr;
  std::mutex mu_;
  int current_ = 0;  // GUARDED_BY(mu_)
};

}  // namespace c10d::inline v1::mpi
