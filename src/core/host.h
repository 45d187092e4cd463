// This host's share of the job: how many of its processes run here, and whether each can have
// a core of its own. Waiters busy-poll only when they can (a spinning waiter on a shared core
// takes it from the rank it waits for).
#pragma once

#include <thread>

#include "core/parse.h"

namespace c10d::inline v1::core {

// The job's processes on this host: LOCAL_WORLD_SIZE (c10drun, torchrun) or mpirun's
// OMPI_COMM_WORLD_LOCAL_SIZE, each in [1, 2^20] (else an InvalidArgument naming it); 1 when
// neither is set.
inline int local_processes() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    if (const auto n = env_int(name, 1, std::int64_t{1} << 20)) return static_cast<int>(*n);
  }
  return 1;
}

// Cores of this host per local process (rounded down; 0 when processes outnumber cores).
inline unsigned cores_per_local_process() {
  return std::thread::hardware_concurrency() / static_cast<unsigned>(local_processes());
}

// Whether each local process has a core of its own: only then may a waiter keep its core while
// it polls (a poller that keeps a shared core holds off the process it waits for).
inline bool has_own_core() {
  static const bool own = cores_per_local_process() >= 1;
  return own;
}

}  // namespace c10d::inline v1::core
