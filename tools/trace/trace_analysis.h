// c10d-trace's verdict on the flight recorder dumps of a job's ranks (docs/tracing.md).
//
// Words: a group's collective #s is the one whose collective_seq_id is s, on every member. A rank
// completed it when its entry says "completed"; it entered it when it has an entry for s; it
// never called it when its dump holds later collectives of the group, or holds none past s-1.
// An entry older than a rank's ring reaches back (the dump starts after it) is taken as
// completed: a ring keeps the last ops.
//
// analyze() finds, per group, the first collective that not every member completed, and says:
//  - which members never called it, and what each did instead (its last op of the group and its
//    state): "rank 2 never called all_reduce #57 of group world; its last op was broadcast #57
//    (started)" (a rank that entered #57 as another op never called the majority's op);
//  - which members entered it with other sizes or dtypes than the rest: "ranks 0,1 called
//    all_reduce #12 of group world with 1048576 float32; rank 3 with 524288";
//  - what the others' entries say (started, not completed; failed, with the error);
//  - members that left no dump (with why, when the caller knows).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "backends/common/trace_json.h"

namespace c10d::inline v1::tools {

struct Verdict {
  bool problem = false;
  std::vector<std::string> lines;
};

// `no_dump_because`: what is known of ranks that may have left no dump (a launcher's "killed by
// signal 9 (SIGKILL)"), said with them.
Verdict analyze(const std::vector<backends::trace::RankDump>& dumps,
                const std::map<int, std::string>& no_dump_because = {});

// The dumps in `dir` (its *.json files); InvalidArgument naming the file that is not one.
std::vector<backends::trace::RankDump> read_dumps(const std::string& dir);

}  // namespace c10d::inline v1::tools
