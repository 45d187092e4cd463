// This host's share of the job: how many of its processes run here, and whether each can have
// a core of its own. Waiters busy-poll only when they can (a spinning waiter on a shared core
// takes it from the rank it waits for).
#pragma once

#include <optional>
#include <thread>

#include "core/parse.h"

namespace c10d::inline v1::core {

// The most processes of a job on one host that a launcher's count may name.
inline constexpr int kMaxLocalProcesses = 1 << 20;

// A launcher's count of the job's processes on this host from the variable `name`, in
// [1, kMaxLocalProcesses]; nullopt when unset or empty, else an InvalidArgument naming it.
inline std::optional<int> env_local_processes(const char* name) {
  const auto n = env_int(name, 1, kMaxLocalProcesses);
  return n ? std::optional<int>(static_cast<int>(*n)) : std::nullopt;
}

// The job's processes on this host: LOCAL_WORLD_SIZE (c10drun, torchrun) or mpirun's
// OMPI_COMM_WORLD_LOCAL_SIZE (env_local_processes); 1 when neither is set.
inline int local_processes() {
  for (const char* name : {"LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE"}) {
    if (const auto n = env_local_processes(name)) return *n;
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
