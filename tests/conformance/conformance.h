// The ProcessGroup conformance suite: one set of cases that every backend runs, written
// against include/c10d/process_group.h only.
//
//   c10d::conformance::Summary s = c10d::conformance::run_conformance(*pg, {});
//   for (const auto& f : s.failures) std::cerr << f << "\n";
//
// Every rank of the group calls run_conformance with the same Config; the cases then issue the
// same ops in the same order on every rank. Runs (tests/CMakeLists.txt): every rank a thread
// over the in-process transport, world sizes 1 to 8 (threads_conformance_test.cc); one rank per
// process (conformance_main.cc) over the TCP backend under c10drun, the whole sweep with count
// 1 << 20 at world sizes 1 to 8, over loopback TCP alone and over shared memory; under mpirun
// over the MPI backend (2 and 4 ranks, blocking, nonblocking and MPI_THREAD_SERIALIZED) and the
// TCP backend; over the ICI backend's simulated torus.
//
// What is covered (the case names in brackets; `only` selects by these names):
//  - [all_reduce reduce reduce_scatter reduce_scatter_tensor] every dtype x every reduce op x
//    every count of Config::counts, roots 0 and last, in place and out of place where the API
//    can say it (below), against closed forms (elements.h). A combination the kernels reject
//    (bitwise on floating dtypes, AVG and PREMUL_SUM on integers and bool) must throw
//    InvalidArgument from the call itself, on the caller's thread, on every rank, naming the op
//    and the dtype; the group stays usable afterwards.
//  - [nan] MIN, MAX, SUM, PRODUCT propagate a NaN from any one rank (floating dtypes).
//  - [tensor_lists] all_reduce and broadcast of a list of tensors treat each on its own.
//  - [broadcast all_gather all_gather_into_tensor all_to_all all_to_all_split_sizes gather
//    scatter] every dtype x every count, roots 0 and last, in place and out of place.
//  - [send_recv] a ring exchange with two tags per pair, each receiver posting tag 2 before
//    tag 1, and two tensors in one send; every dtype x every count.
//  - [recv_any_source] every other rank sends rank 0 a tensor per dtype (float32, int8) x
//    count; rank 0's recv_any_source calls take each sender once, each Work's source_rank()
//    naming the rank whose data it holds; rank 1's two tensors on one tag reach rank 0's
//    recv_any_source and recv(1), posted in that order, in order; two tensors are rejected, and
//    so is any recv_any_source in a group of one.
//  - [large_counts] the counts of Config::large_count for a representative subset only, so a
//    run stays within its time budget (the list is in large_counts.cc).
//  - [barrier work_semantics in_order subgroups bad_arguments] a barrier waits for the last
//    rank; Work::result() hands back the outputs (the inputs for in-place ops) of every op;
//    Work::wait(timeout) throws TimeoutError while the op goes on; ops issued back to back
//    without waiting complete in issue order with increasing sequence numbers; subgroups from
//    new_group (odd ranks reversed, even ranks, all ranks reversed) run collectives while the
//    parent runs its own, non-members get nullptr; bad arguments throw InvalidArgument at once.
//  - [errors] an op that fails (a recv nobody answers, with a short timeout) completes with an
//    error that wait() and result() rethrow. This may abort the group's transport, so it runs
//    last and nothing runs after it.
//
// In place / out of place, as the API can express them:
//  - all_reduce, broadcast, reduce only work in place; their second variant ("view") runs on a
//    view into a larger tensor and checks that nothing outside the view is written.
//  - all_gather: in place makes outputs[rank] the input itself.
//  - all_gather_into_tensor: in place makes the input the view of the output's own block
//    (output.narrow_rows(rank * count, ...)), as NCCL defines in-place all-gather.
//  - reduce_scatter: in place makes the output inputs[rank] itself.
//  - reduce_scatter_tensor: in place makes the output the view of the input's own block, as
//    NCCL defines in-place reduce-scatter; the other blocks must stay unchanged.
//  - gather / scatter: in place makes, on the root, outputs[root] / inputs[root] the input /
//    output itself.
//  - all_to_all: out of place only (input and output must not overlap).
// Out-of-place ops also check that their inputs are left unchanged.
//
// Failures are collected, not thrown: a wrong value on one rank must not make that rank skip
// ops the others still issue. Each names the op, dtype, reduce op, count, root and variant, the
// world size and rank, the first wrong element with expected and got values. An op whose Work
// fails (or a call that throws where it should not, which is reported too) may leave the group
// unusable, so a failed wait() ends the run.
//
// Thread-safety: run_conformance uses only `pg` and may run on many threads at once, one group
// each.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "c10d/process_group.h"
#include "c10d/types.h"

namespace c10d::inline v1::conformance {

struct Config {
  // Elements per tensor (per block, for the ops that move or reduce one block per rank).
  std::vector<std::int64_t> counts = {0, 1, 7, 1000};
  // The large count, run for a subset of dtypes and ops only (large_counts); 0 skips it. For
  // the ops whose buffers hold one block per rank, blocks are large_count / world elements.
  std::int64_t large_count = std::int64_t{1} << 20;
  // The longest wait for one op; past it the op counts as hung and the run ends.
  Milliseconds wait_timeout{120'000};
  // Case names to run (all when empty); "errors" should stay last when selected.
  std::vector<std::string> only;
  // Failures recorded in full; later ones are only counted.
  std::size_t max_failures = 50;
};

class Reporter;

struct Case {
  std::string name;
  std::function<void(ProcessGroup&, const Config&, Reporter&)> run;
};

// Every case, in the order they run (errors last).
const std::vector<Case>& cases();

struct Summary {
  std::vector<std::string> failures;  // empty: every check passed
  int cases = 0;                      // cases run
  std::int64_t ops = 0;               // ops issued
  std::int64_t checks = 0;            // values or behaviours checked
  struct Timing {
    std::string name;
    double seconds = 0;
  };
  std::vector<Timing> times;  // per case run, in order
};

Summary run_conformance(ProcessGroup& pg, const Config& config = {});

}  // namespace c10d::inline v1::conformance
