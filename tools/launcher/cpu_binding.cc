#include "launcher/cpu_binding.h"

#include <sched.h>

#include <cstddef>

namespace c10d::inline v1::launcher {

std::vector<std::vector<int>> rank_cpus(CpuBinding binding, int processes,
                                        const std::vector<int>& allowed) {
  const auto n = static_cast<std::size_t>(processes > 0 ? processes : 0);
  std::vector<std::vector<int>> cpus(n);
  const std::size_t c = allowed.size();
  if (c == 0 || binding == CpuBinding::kNone) return cpus;
  if (binding == CpuBinding::kCore || n > c) {
    for (std::size_t i = 0; i < n; ++i) cpus[i] = {allowed[i % c]};
    return cpus;
  }
  for (std::size_t i = 0; i < n; ++i) {
    cpus[i].assign(allowed.begin() + static_cast<std::ptrdiff_t>(i * c / n),
                   allowed.begin() + static_cast<std::ptrdiff_t>((i + 1) * c / n));
  }
  return cpus;
}

std::vector<int> allowed_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (::sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

}  // namespace c10d::inline v1::launcher
