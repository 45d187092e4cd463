// Starting one child process for the launcher: fork, then in the child wire stdout and stderr
// to fresh pipes, undo what the launcher changed in itself, and exec the program.
//
// The child inherits none of the launcher's other descriptors (the store server's sockets
// among them): every descriptor above stderr is closed before exec, as Python's subprocess
// does. It gets back the launcher's original signal mask, the default SIGPIPE action and the
// original open-file limit. It dies with the launcher (PR_SET_PDEATHSIG SIGKILL), whose store
// it could not use anyway. When exec fails, the child prints
//   c10drun: cannot run 'PROGRAM': REASON
// on its stderr and exits 127, as a shell does.
//
// Between fork and exec the child runs only async-signal-safe calls: the launcher has other
// threads (the store server's), which may hold locks at the moment of the fork.
#pragma once

#include <signal.h>
#include <sys/resource.h>
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "core/fd.h"

namespace c10d::inline v1::launcher {

using UniqueFd = core::Fd;

// What a child gets back from before the launcher changed it.
struct InheritedState {
  sigset_t signal_mask;  // the launcher blocks the signals it reads through a signalfd
  rlimit open_files;     // the launcher raises its own limit to host the store
};

// A started child: its pid and the read ends (non-blocking) of its stdout and stderr pipes.
struct SpawnedChild {
  pid_t pid = -1;
  UniqueFd out;
  UniqueFd err;
};

// This process's environment with `overrides` set (replacing any variable of the same name),
// as "NAME=value" entries.
std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides);

// Starts `argv` (argv[0] looked up in PATH) with exactly the environment `env`, bound to `cpus`
// (cpu_binding.h; empty: the launcher's CPUs). Throws c10d::Error when a pipe or the fork fails;
// a failing exec shows in the child's exit status. A binding the kernel refuses is reported on
// the child's stderr, and the child runs unbound.
SpawnedChild spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const InheritedState& inherited, const std::vector<int>& cpus);

}  // namespace c10d::inline v1::launcher
