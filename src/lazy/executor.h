// The executor: runs a Program over a graph's payloads and returns the root buffers.
//
// Buffers: with `reuse`, the storages of a run are kept in the program's pool and the next run
// writes into any of them that nobody else holds (use_count 1) instead of allocating, so a
// repeating step stops allocating and page-faulting after its first run. Eager runs pass
// reuse = false. Runs on the calling thread. A collective node is waited for where it is issued
// or, with overlap_collectives(), by the first step that reads its outputs (and at the end of
// the run at the latest); its time adds to the thread's collective_time() (c10d/lazy.h).
#pragma once

#include <vector>

#include "lazy/graph.h"
#include "lazy/kernels.h"
#include "lazy/program.h"

namespace c10d::inline v1::lazy {

std::vector<Buf> execute(Program& program, const Graph& graph, bool reuse);

}  // namespace c10d::inline v1::lazy
