// Which CPUs each process the launcher starts may run on (--bind-to), from the CPUs the launcher
// itself may run on.
//
// Two ranks that poll each other's shared memory must not share a core: each poll then waits for
// a context switch. Unbound, the scheduler started both ranks of a 2-rank job on one CPU of this
// 2-CPU machine often enough, and left them there for the first milliseconds: a 3000-call 8-byte
// all_reduce averaged 2.5-28 µs in such starts against 0.5-0.7 µs bound (docs/perf-log.md,
// 2026-11-28). mpirun binds by default for the same reason. An equal share of the CPUs each (not
// one CPU each) keeps a rank's own threads (PyTorch's intra-op pool, data loaders) running
// where the machine has more CPUs than ranks. Where ranks outnumber CPUs, one CPU each in turn
// (mpirun leaves such jobs unbound): 4 ranks on 2 CPUs, 10 alternating rounds, ran a 16 MiB
// all_reduce in 19.1 ms against 20.6 unbound and an 8-byte one in 5.15 µs against 6.09
// (docs/perf-log.md has the other rows).
#pragma once

#include <vector>

namespace c10d::inline v1::launcher {

enum class CpuBinding {
  kAuto,  // an equal share each when the processes are no more than the CPUs, else as kCore
  kCore,  // one CPU each, in turn (round robin when the processes outnumber the CPUs)
  kNone,  // every process may run on all of the launcher's CPUs
};

// The CPUs each of `processes` local processes is bound to, in local rank order, from `allowed`
// (the launcher's CPUs, ascending); an empty list: not bound. kAuto gives local rank i the i-th
// of `processes` contiguous slices of `allowed`, whose sizes differ by at most one, when
// there are enough CPUs, else one CPU each in turn.
std::vector<std::vector<int>> rank_cpus(CpuBinding binding, int processes,
                                        const std::vector<int>& allowed);

// The CPUs this process may run on (sched_getaffinity), ascending; empty when unreadable.
std::vector<int> allowed_cpus();

}  // namespace c10d::inline v1::launcher
