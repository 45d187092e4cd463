// Cross-memory attach (CMA): copying bytes straight out of another process of this host with
// process_vm_readv(2), one copy where a ring in shared memory costs two. The TCP backend's
// same-host channel moves large messages this way (backends/gloo_like/shm_cma.cc).
//
// Permission is the kernel's ptrace access check (PTRACE_MODE_ATTACH_REALCREDS): the same user,
// a dumpable target, and, under the Yama security module at ptrace_scope 1, a target that named
// the reader its ptracer (prctl PR_SET_PTRACER). Scope 2 and 3, a seccomp filter (containers'
// default refuses process_vm_readv without CAP_SYS_PTRACE) or a kernel without the call refuse
// it: callers probe once and fall back to copying through shared memory.
//
// Thread-safety: the functions are thread-safe.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace c10d::inline v1::transport {

// Copies out.size() bytes at `address` in process `pid` into `out`: 0 when every byte came,
// else an errno (EFAULT for a short copy: part of the span is not mapped there).
int read_process_memory(pid_t pid, std::uint64_t address, std::span<std::byte> out);

// Yama's /proc/sys/kernel/yama/ptrace_scope; nullopt without Yama (or unreadable).
std::optional<int> yama_ptrace_scope();

// Lets the other processes of this user read this one with read_process_memory where Yama's
// scope 1 would allow only its ancestors (PR_SET_PTRACER_ANY), once per process. What it did, for
// a log line: "" when nothing was needed (no Yama, scope 0), else a sentence.
std::string allow_same_user_readers();

}  // namespace c10d::inline v1::transport
