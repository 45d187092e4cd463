// TransportProcessGroup: the ProcessGroup of process_group.h written once over the Transport
// seam and the shared algorithms. The TCP backend (gloo_like) and the simulated ICI backend
// (tpu_ici) are this class over their own transport; tests run it over the in-process one.
//
// Ops: each call checks its arguments on the caller's thread (InvalidArgument at once, nothing
// queued), takes the group's next sequence number, and queues the op; one worker thread per
// group runs the queue in issue order. An op's bytes carry transport::make_tag(group id,
// sequence); send/recv carry transport::user_tag(group id, user tag), so subgroups and
// point-to-point never mix with collectives.
//
// Algorithm choice (per op, the same on every rank since it depends only on the arguments):
//   all_reduce   halving-doubling below 256 KiB (latency: 2 log2 n rounds), ring above
//   broadcast    binomial tree below 512 KiB, pipelined chain above
//   reduce       binomial tree; all_gather, reduce_scatter: ring; all_to_all: pairwise;
//   gather/scatter: direct; barrier: dissemination
// Options.algo (or C10D_ALGO when empty) forces a choice: "ring" / "hd" alone apply to
// all_reduce; "all_reduce=ring,broadcast=chain" per collective. Unknown names are rejected
// when the group is made.
//
// Failure: the first error an op meets that means the group can no longer agree (a NetworkError
// from the transport: a peer died) aborts the transport, so every pending and later op of every
// rank fails with that NetworkError rather than waiting for a message that will never come.
// A TimeoutError fails its op and aborts too (the peers' view of the sequence is lost).
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

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "c10d/process_group.h"
#include "c10d/types.h"
#include "transport/transport.h"

namespace c10d::backends {

struct TransportProcessGroupOptions {
  std::string backend_name = "transport";
  Milliseconds timeout = kDefaultTimeout;  // per op, unless the op's options say otherwise
  std::string algo;                        // forced algorithms; empty: C10D_ALGO
  int detail = -1;                         // 1: fingerprint checks; 0: off; -1: C10D_DEBUG
  std::uint32_t group_id = 0;
  std::vector<int> ring_order;  // empty: 0..n-1 (the ICI backend passes a torus ring)
};

std::shared_ptr<ProcessGroup> make_transport_process_group(
    std::shared_ptr<transport::Transport> transport, TransportProcessGroupOptions options = {});

}  // namespace c10d::backends
