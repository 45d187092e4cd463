// This host's share of the job: how many of its processes run here, and whether each can have
// a core of its own. Waiters busy-poll only when they can (a spinning waiter on a shared core
// takes it from the rank it waits for).
#pragma once

#include <algorithm>
#include <atomic>
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

// The job's processes on this machine as the group set-ups learn them: ranks whose host keys
// name this kernel's boot id (gloo_like/host_map.h). Emulated hosts (network namespaces) and
// containers of one machine each count only their own ranks in LOCAL_WORLD_SIZE, yet share its
// cores. The largest count noted wins; 0 until a set-up notes one.
inline std::atomic<int>& machine_processes_noted() {
  static std::atomic<int> n{0};
  return n;
}
inline void note_machine_processes(int n) {
  auto& noted = machine_processes_noted();
  int seen = noted.load(std::memory_order_relaxed);
  while (n > seen && !noted.compare_exchange_weak(seen, n, std::memory_order_relaxed)) {
  }
}

// Cores of this host per process of the job on it (rounded down; 0 when processes outnumber
// cores): LOCAL_WORLD_SIZE's count, or the machine's as noted above when that is larger.
inline unsigned cores_per_local_process() {
  static const unsigned cores = std::thread::hardware_concurrency();
  static const int local = local_processes();
  const int n = std::max(local, machine_processes_noted().load(std::memory_order_relaxed));
  return cores / static_cast<unsigned>(n);
}

// Whether each local process has a core of its own: only then may a waiter keep its core while
// it polls (a poller that keeps a shared core holds off the process it waits for). Cheap: the
// waiters ask at every wait.
inline bool has_own_core() { return cores_per_local_process() >= 1; }

}  // namespace c10d::inline v1::core
