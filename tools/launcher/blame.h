// Which rank to blame when one fails: the first rank to fail is often only the first that gave
// up waiting for another that made no progress. When a rank fails, the supervisor looks (once,
// within a bounded time) at its other processes and at the stall records the ranks left in the
// store (transport/stall_record.h), and find_cause names the rank behind the failure:
//  - a process that is stopped (SIGSTOP, or held by a debugger: /proc/<pid>/stat state T or t)
//    made no progress: it is the cause (among several, the one the records name most, then the
//    lowest rank);
//  - else the rank the records name most as the one their waits lead to;
//  - else none: the failed rank is its own cause.
// Pure functions and a /proc read; no state.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "transport/stall_record.h"

namespace c10d::inline v1::launcher {

// A local process as the supervisor sees it.
struct ProcessView {
  int rank = -1;
  pid_t pid = -1;
  bool running = false;
  char state = '?';  // from /proc/<pid>/stat when running: 'R', 'S', 'T' (stopped)...
};

struct Cause {
  int rank = -1;         // -1: the failed rank is its own cause
  pid_t pid = -1;        // when it is a local process
  std::string evidence;  // e.g. "it was stopped (state T) and made no progress; ranks 0, 1
                         // timed out waiting for it"
};

// The state letter of process `pid` (/proc/<pid>/stat), '?' when it cannot be read.
char process_state(pid_t pid);

// `records` as decode_stall_records keeps them for this job: every rank they name is one of it.
Cause find_cause(const std::vector<ProcessView>& processes, int failed_rank,
                 const std::vector<transport::StallRecord>& records);

}  // namespace c10d::inline v1::launcher
