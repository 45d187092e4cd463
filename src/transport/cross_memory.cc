// Cross-memory attach (cross_memory.h).
#include "transport/cross_memory.h"

#include <fmt/format.h>
#include <sys/prctl.h>
#include <sys/uio.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <mutex>

namespace c10d::inline v1::transport {

int read_process_memory(pid_t pid, std::uint64_t address, std::span<std::byte> out) {
  std::size_t done = 0;
  while (done < out.size()) {
    iovec local{out.data() + done, out.size() - done};
    iovec remote{reinterpret_cast<void*>(address + done), out.size() - done};
    const ssize_t n = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    // A short copy stops at the first page it could not read; asking again would fail there.
    if (n == 0) return EFAULT;
    done += static_cast<std::size_t>(n);
    if (done < out.size()) return EFAULT;
  }
  return 0;
}

std::optional<int> yama_ptrace_scope() {
  std::ifstream in("/proc/sys/kernel/yama/ptrace_scope");
  int scope = -1;
  if (!(in >> scope)) return std::nullopt;
  return scope;
}

std::string allow_same_user_readers() {
  static std::once_flag once;
  static std::string what;
  std::call_once(once, [] {
    const std::optional<int> scope = yama_ptrace_scope();
    if (!scope || *scope == 0) return;
    if (*scope != 1) {
      what = fmt::format("Yama ptrace_scope is {}: no process may read another's memory", *scope);
      return;
    }
    // Any process of this user may then attach to this one, as without Yama: scope 1 keeps
    // same-user processes from each other, and this process already shares with its same-host
    // peers the job's segments and the store's token, which give them as much. Only processes
    // with this user's credentials pass the kernel's other checks. A single ptracer would not
    // do: every same-host peer reads from this process, and PR_SET_PTRACER names one.
    if (::prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0) != 0) {
      what = fmt::format("Yama ptrace_scope is 1 and PR_SET_PTRACER_ANY failed: {}",
                         std::strerror(errno));
      return;
    }
    what =
        "Yama ptrace_scope is 1: this process lets its same-user peers read it "
        "(PR_SET_PTRACER_ANY)";
  });
  return what;
}

}  // namespace c10d::inline v1::transport
