// TransportProcessGroup: the ProcessGroup of process_group.h written once over the Transport
// seam and the shared algorithms. The TCP backend (gloo_like) and the simulated ICI backend
// (tpu_ici) are this class over their own transport; tests run it over the in-process one.
//
// Ops: each call checks its arguments on the caller's thread (InvalidArgument at once, nothing
// queued), takes the group's next sequence number, and queues the op; ops run one at a time in
// issue order, on the group's worker thread or, for a collective that is next to start when its
// caller waits for it, on the waiting thread (inline_schedule.h; not with BackendHooks); the
// queue, worker and failure latch are OpRunner's (op_runner.h), shared with the MPI group. An op's
// bytes carry transport::make_tag(group id, sequence); send/recv carry transport::user_tag(group
// id, user tag), so subgroups and point-to-point never mix with collectives.
//
// Algorithm choice (per op, the same on every rank since it depends only on the arguments and
// the transport's host map; algorithms/choice.h holds the thresholds):
//   all_reduce   halving-doubling below 256 KiB (latency: 2 log2 n rounds) and at any size over
//                2 ranks below 8 MiB (the same two exchanges as the ring, in fewer messages),
//                ring above
//   broadcast    binomial tree below 512 KiB, pipelined chain above
//   reduce       binomial tree; all_gather, reduce_scatter: ring; all_to_all: pairwise;
//   gather/scatter: direct; barrier: dissemination
// Over several hosts with the same number (2 or more) of ranks on each (Transport::host_of_rank),
// all_reduce (through each host's leader up to 32 KiB), all_gather and reduce_scatter take the
// hierarchical algorithm always, broadcast where it would take the chain
// (algorithms/hierarchical.h); and
// the flat ring visits the ranks host by host (unless options.ring_order says otherwise).
// Options.algo (or C10D_ALGO when empty) forces a choice: "ring" / "hd" alone apply to
// all_reduce, "hier" to all four, "flat" keeps the hosts out of the automatic choice;
// "all_reduce=ring,broadcast=chain" per collective. Unknown names are rejected when the group is
// made.
// A backend's hooks (options.hooks, BackendHooks below) may take all_reduce and broadcast (unless
// forced), all_gather, reduce_scatter and all_to_all with algorithms of their own: the ICI
// backend runs its torus algorithms there.
//
// Failure: the first error an op meets that means the group can no longer agree (a NetworkError
// from the transport: a peer died) aborts the transport, so every pending and later op of every
// rank fails with that NetworkError rather than waiting for a message that will never come.
// A TimeoutError fails its op and aborts too (the peers' view of the sequence is lost). A
// collective whose request timed out (transport::PeerTimeout) first asks the transport which
// rank the ranks' waits lead to (Transport::find_stalled, up to half the op's timeout,
// 0.2-2 s), and fails with a PeerTimeout naming the peer it waited for, what it last heard from
// it, the chain, and the rank that made no progress, which the abort passes on as the cause.
// InvalidArgument raised before any message (on the caller's thread) fails only that call.
//
// DETAIL checks (options.detail, or C10D_DEBUG=DETAIL): before each collective the ranks
// all-gather a fingerprint (op, dtype, count, root, sequence, reduce op) on a control tag and
// compare; on a mismatch every rank fails the op with InvalidArgument naming the ranks and
// both calls.
//
// Subgroups: new_group(ranks) makes a group over a rank-mapping view of the same transport,
// with the next group id (ids are handed out in call order, identical on every rank).
//
// Thread-safety: every method may be called from any thread. Lifetime: the destructor aborts
// pending ops (Error "process group destroyed") and joins the worker; subgroups hold the
// transport by shared_ptr and may outlive their parent.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "algorithms/context.h"
#include "c10d/process_group.h"
#include "c10d/types.h"
#include "c10d/work.h"
#include "transport/transport.h"

namespace c10d::inline v1::backends {

// What a backend may add to the group (the ICI backend does): its own Work type and per-op
// bookkeeping, and its own algorithms. Every method runs on the group's threads: make_work on the
// caller's, op_started/op_finished on the worker (the completer for send/recv), just before the
// op's first message and just before its Work completes. An algorithm method returns false to
// leave the op to the default algorithm; it is asked only when options.algo / C10D_ALGO did not
// force that collective's algorithm, and must decide the same way on every rank.
class BackendHooks {
 public:
  virtual ~BackendHooks() = default;
  virtual std::shared_ptr<Work> make_work(std::string op, std::uint64_t sequence) {
    return std::make_shared<Work>(std::move(op), sequence);
  }
  virtual void op_started(Work&) {}
  virtual void op_finished(Work&) {}
  // The hooks of a subgroup of `ranks` (new_group); null for none.
  virtual std::shared_ptr<BackendHooks> for_subgroup(const std::vector<int>&) { return nullptr; }

  virtual bool all_reduce(const algorithms::Context&, DType, const Reduction&, void*,
                          std::int64_t) {
    return false;
  }
  virtual bool broadcast(const algorithms::Context&, std::span<std::byte>, int) { return false; }
  // n blocks of input.size() bytes into output, in rank order (algorithms::all_gather).
  virtual bool all_gather(const algorithms::Context&, std::span<const std::byte>,
                          std::span<std::byte>) {
    return false;
  }
  // As algorithms::reduce_scatter_blocks: inputs[r] holds this rank's block for rank r.
  virtual bool reduce_scatter(const algorithms::Context&, DType, const Reduction&,
                              std::span<const void* const>, void*, std::int64_t) {
    return false;
  }
  // As algorithms::all_to_allv.
  virtual bool all_to_allv(const algorithms::Context&, std::span<const std::byte>,
                           std::span<const std::int64_t>, std::span<const std::int64_t>,
                           std::span<std::byte>, std::span<const std::int64_t>,
                           std::span<const std::int64_t>) {
    return false;
  }
};

struct TransportProcessGroupOptions {
  std::string backend_name = "transport";
  Milliseconds timeout = kDefaultTimeout;  // per op, unless the op's options say otherwise
  std::string algo;                        // forced algorithms; empty: C10D_ALGO
  int detail = -1;                         // 1: fingerprint checks; 0: off; -1: C10D_DEBUG
  std::uint32_t group_id = 0;
  // Empty: the ranks host by host (Transport::host_of_rank), ascending within a host. The ICI
  // backend passes a torus ring.
  std::vector<int> ring_order;
  std::shared_ptr<BackendHooks> hooks;  // null: plain Work, the default algorithms
  // The flight recorder's names for the group (flight_recorder.h): what dumps and messages call
  // it (a subgroup: its parent's desc and its index, "world.0"), and its members' global ranks
  // in group rank order (empty: 0..size-1).
  std::string desc = "world";
  std::vector<int> global_ranks;
};

std::shared_ptr<ProcessGroup> make_transport_process_group(
    std::shared_ptr<transport::Transport> transport, TransportProcessGroupOptions options = {});

// The transport under `group` when make_transport_process_group made it, else null (a
// backend's accessors, such as ici_link_report, find their transport this way).
std::shared_ptr<transport::Transport> transport_of(const ProcessGroup& group);

}  // namespace c10d::inline v1::backends
