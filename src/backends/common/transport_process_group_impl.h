// TransportProcessGroup's class (transport_process_group.h has its contract) and the parts of
// it, one file each, as the TCP transport is split (tcp_transport_impl.h):
//   transport_process_group.cc   construction, subgroups (new_group), abort, the factory
//   transport_pg_collectives.cc  the collectives: argument checks, queueing, algorithm choice
//   transport_pg_p2p.cc          send, recv and recv_any_source: posting, the completer thread
//   transport_pg_run.cc          running an op (OpRunner's driver), DETAIL fingerprint checks,
//                                the errors of ops that time out
// Argument checks on the caller's thread, collectives run in issue order by the worker thread or
// by the thread that waits for them (run_inline), and one completer thread for point-to-point
// ops. The queue, the worker, who runs what and the failure latch are OpRunner's (op_runner.h);
// this group is its driver.
//
// Words used here:
//  - op: one call of the ProcessGroup API, queued as a PendingOp with its Work, its record
//    (sequence number and what the fingerprint compares) and a closure that runs it against a
//    Context.
//  - failure: the first error any op meets once it has started. The runner keeps it, the
//    transport is aborted with it (so the peers' connections close and they fail too), and every
//    pending and later op of this group fails with it.
//  - point-to-point (p2p): send, recv and recv_any_source. The worker posts their requests in
//    issue order (that fixes the matching order) and hands them to the completer, which tests
//    them until done: a recv waiting for a peer never blocks the collectives queued behind it.
#pragma once

#include <array>
#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "algorithms/choice.h"
#include "algorithms/context.h"
#include "algorithms/hier_pattern.h"
#include "algorithms/ring_all_reduce.h"
#include "backends/common/fingerprint.h"
#include "backends/common/op_checks.h"
#include "backends/common/op_runner.h"
#include "backends/common/transport_process_group.h"
#include "core/check.h"

namespace c10d::inline v1::backends::tpg_detail {

using algorithms::Algorithm;
using algorithms::CollectiveOp;
using algorithms::Context;
using algorithms::Fabric;
using transport::Clock;

// ---- Tensor helpers ----

inline std::span<std::byte> bytes_of(const Tensor& t) {
  return {static_cast<std::byte*>(t.raw_data()), t.nbytes()};
}

// ---- The group ----

// A queued op: its Work, its record, and the closure that runs it (RunOp, PostOp). Without
// backend hooks the op is also its Work, so that queueing allocates once (as the MPI group's
// ops); a hook's own Work type (BackendHooks::make_work) is held in `hooked`, and the op's own
// Work base goes unused.
struct PendingOp : Work, RunnerOp {
  PendingOp(std::shared_ptr<Work> hooked_work, const OpRecord& record, Milliseconds timeout)
      : Work(std::string(record.op), record.sequence),
        RunnerOp(hooked_work ? *hooked_work : static_cast<Work&>(*this), record, timeout),
        hooked(std::move(hooked_work)) {}
  // Collectives: runs the op; returns its outputs.
  virtual std::vector<Tensor> run(const Context&) { return {}; }
  // Point-to-point: posts the op's requests.
  virtual std::vector<std::unique_ptr<transport::Request>> post(transport::Transport&,
                                                                transport::Tag) {
    return {};
  }
  // The op's Work, sharing the op's ownership (which holds a hook's Work too).
  static std::shared_ptr<Work> work_of(const std::shared_ptr<PendingOp>& op) {
    return {op, &op->work()};
  }
  // The same, taking `op`'s reference: no count goes up and down (each is an atomic add).
  static std::shared_ptr<Work> work_of(std::shared_ptr<PendingOp>&& op) {
    Work& w = op->work();
    return {std::move(op), &w};
  }

  const std::shared_ptr<Work> hooked;
  std::uint32_t user_tag = 0;
  int peer = -1;                // p2p: the rank sent to or received from; kAnySource: any
  std::vector<Tensor> outputs;  // p2p result
};

template <typename Run>
struct RunOp final : PendingOp {
  RunOp(std::shared_ptr<Work> w, const OpRecord& record, Milliseconds timeout, Run r)
      : PendingOp(std::move(w), record, timeout), body(std::move(r)) {}
  std::vector<Tensor> run(const Context& ctx) override { return body(ctx); }
  Run body;
};

template <typename Post>
struct PostOp final : PendingOp {
  PostOp(std::shared_ptr<Work> w, const OpRecord& record, Milliseconds timeout, Post p)
      : PendingOp(std::move(w), record, timeout), body(std::move(p)) {}
  std::vector<std::unique_ptr<transport::Request>> post(transport::Transport& t,
                                                        transport::Tag tag) override {
    return body(t, tag);
  }
  Post body;
};

struct PostedP2P {
  std::shared_ptr<PendingOp> op;
  std::shared_ptr<Work> work;
  std::vector<std::unique_ptr<transport::Request>> requests;
  std::vector<Tensor> outputs;
  Clock::time_point deadline;
  // For the error of one that times out, and a receive's source_rank (kAnySource: the
  // request's source()).
  int peer = -1;
  std::uint32_t user_tag = 0;
  Clock::duration timeout{};
};

class TransportProcessGroup final : public ProcessGroup,
                                    public std::enable_shared_from_this<TransportProcessGroup>,
                                    private OpRunner::Driver {
 public:
  // transport_process_group.cc
  TransportProcessGroup(std::shared_ptr<transport::Transport> transport,
                        TransportProcessGroupOptions options);
  ~TransportProcessGroup() override;

  std::string backend_name() const override { return options_.backend_name; }
  const std::shared_ptr<transport::Transport>& transport() const { return transport_; }

  // transport_pg_collectives.cc
  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors,
                                   const AllreduceOptions& opts) override;
  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors,
                                  const BroadcastOptions& opts) override;
  std::shared_ptr<Work> reduce(Tensor tensor, const ReduceOptions& opts) override;
  std::shared_ptr<Work> all_gather(std::vector<Tensor> outputs, Tensor input,
                                   const AllgatherOptions& opts) override;
  std::shared_ptr<Work> all_gather_into_tensor(Tensor output, Tensor input,
                                               const AllgatherOptions& opts) override;
  std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                       const ReduceScatterOptions& opts) override;
  std::shared_ptr<Work> reduce_scatter_tensor(Tensor output, Tensor input,
                                              const ReduceScatterOptions& opts) override;
  std::shared_ptr<Work> all_to_all(Tensor output, Tensor input,
                                   const AllToAllOptions& opts) override;
  std::shared_ptr<Work> gather(std::vector<Tensor> outputs, Tensor input,
                               const GatherOptions& opts) override;
  std::shared_ptr<Work> scatter(Tensor output, std::vector<Tensor> inputs,
                                const ScatterOptions& opts) override;
  std::shared_ptr<Work> barrier(const BarrierOptions& opts) override;

  // transport_pg_p2p.cc
  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst_rank,
                             const SendRecvOptions& opts) override;
  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src_rank,
                             const SendRecvOptions& opts) override;

  // transport_process_group.cc
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;
  void abort() override;

 private:
  // ---- Checks and fingerprints (caller's thread) ----

  static std::int64_t total(const std::vector<Tensor>& tensors) {
    std::int64_t n = 0;
    for (const auto& t : tensors) n += t.numel();
    return n;
  }

  // ---- Queueing (collectives: transport_pg_collectives.cc; p2p: transport_pg_p2p.cc) ----

  template <typename Run>
  std::shared_ptr<Work> enqueue(std::string_view op, OpRecord&& record,
                                std::optional<Milliseconds> timeout, Run&& run);

  // Queues the op `make(work, record, timeout)` makes (under the runner's mutex).
  template <typename Make>
  std::shared_ptr<Work> push(OpRecord& record, std::optional<Milliseconds> timeout, Make&& make) {
    const std::string_view op = record.op;
    const Milliseconds t = timeout.value_or(options_.timeout);
    core::check_timeout(t, op);
    // Collectives and point-to-point ops count apart (OpRunner): only collectives must agree
    // across ranks (their tag is the sequence); p2p ops are matched by their user tag.
    auto queued = runner_.submit(record, [&](const OpRecord& r) {
      if (r.collective) {
        op_names_[r.sequence % op_names_.size()] = op;  // a literal: see frame_name
        next_sequence_ = r.sequence + 1;
      }
      return make(hooks_ ? hooks_->make_work(std::string(op), r.sequence) : nullptr, r, t);
    });
    return PendingOp::work_of(std::static_pointer_cast<PendingOp>(std::move(queued)));
  }

  std::shared_ptr<Work> point_to_point(std::string_view op, std::vector<Tensor> tensors, int peer,
                                       const SendRecvOptions& opts);
  std::shared_ptr<Work> recv_any_source(std::vector<Tensor> tensors,
                                        const SendRecvOptions& opts) override;
  template <typename Post>
  std::shared_ptr<Work> push_p2p(OpRecord& record, const SendRecvOptions& opts,
                                 std::vector<Tensor> outputs, Post&& post);

  // ---- Running (OpRunner's driver: the worker thread, and waiters; transport_pg_run.cc) ----

  std::shared_ptr<const core::WaitHook> make_wait_hook() override;
  std::exception_ptr start(OpRunner::OpPtr op, Clock::time_point deadline) override;
  void on_failure(const std::exception_ptr& e) override;
  void on_stop_locked(const std::exception_ptr& reason, bool running) override;

  void fail(std::exception_ptr e) { runner_.fail(std::move(e)); }
  void run_inline(Work& w, core::WaitClock& clock);

  struct Outcome {
    std::vector<Tensor> outputs;
    std::exception_ptr error;
    bool handed_off = false;  // a send/recv posted and given to the completer (not running)
  };

  void finish_op(PendingOp& op, Outcome outcome);
  Outcome run_op(const std::shared_ptr<PendingOp>& p, Clock::time_point deadline);
  std::vector<Tensor> run_rooted(PendingOp& op, const Context& ctx);
  std::string frame_name(transport::Tag tag);
  std::string frame_name_locked(transport::Tag tag) const;
  std::exception_ptr explain_timeout(const PendingOp& op, const transport::PeerTimeout& t);
  std::exception_ptr check_fingerprints(const Fingerprint& fp, Clock::time_point deadline);

  // ---- Algorithm choice (transport_pg_collectives.cc) ----

  Algorithm choose(CollectiveOp op, std::int64_t bytes) const;
  Algorithm choose_generic(CollectiveOp op, std::int64_t bytes) const;
  void all_reduce_one(const Context& ctx, const Tensor& t, const Reduction& r);
  // The host shares of a hierarchical all_reduce of `bytes` (algorithms/host_shares.h):
  // equal, C10D_HOST_RATES's, or (`probe`) measured every kShareProbeEvery large ones.
  const std::vector<std::int64_t>& host_shares(const Context& ctx, std::int64_t bytes);
  // The ring's options for collective `op` of `bytes`: ring_, or for 2 ranks that share memory
  // and whose cores are apart (algorithms/slot_probe.h), single-copy segments.
  const algorithms::RingOptions& ring_for(const Context& ctx, std::string_view op,
                                          std::int64_t bytes) const;
  void broadcast_one(const Context& ctx, std::span<std::byte> data, int root) const;
  void gather_all(const Context& ctx, std::span<const std::byte> in,
                  std::span<std::byte> out) const;
  void scatter_reduced(const Context& ctx, DType dtype, const Reduction& r,
                       std::span<const void* const> blocks, void* out, std::int64_t count) const;

  // ---- Point-to-point completion (completer thread; transport_pg_p2p.cc) ----

  void run_completer();
  void complete_loop();
  std::exception_ptr p2p_timeout(const PostedP2P& p, const transport::Request& pending);

  const std::shared_ptr<transport::Transport> transport_;
  const TransportProcessGroupOptions options_;
  const OpChecks checks_;
  const bool detail_;
  // The transport's host map (transport.h: Hosts), for the hierarchical collectives and the ring
  // order.
  const algorithms::HostLayout layout_;
  algorithms::AlgoOverride forced_;  // C10D_ALGO or the algo option
  algorithms::RingOptions ring_;
  // The cross rings' host shares (empty: equal) and whether they are fixed (unless
  // C10D_HOST_RATES=probe); the
  // count of large hierarchical all_reduces so far. Only the op that runs touches them (the
  // runner runs one op at a time), and every rank changes them alike.
  std::vector<std::int64_t> host_shares_;
  bool host_shares_fixed_ = true;
  int hier_pieces_ = 0;  // C10D_HIER_PIECES: the hierarchical all_reduce's pipeline (0: auto)
  std::uint64_t large_hier_ops_ = 0;
  std::shared_ptr<BackendHooks> hooks_;  // immutable after construction
  // The transport's shared slots, when every rank shares this host's memory and this group owns
  // them (SharedSlots::claim): small all_reduces take algorithms/slot_all_reduce.h.
  transport::SharedSlots* slots_ = nullptr;
  // ring_ with segments that go single-copy (shm_transport.h: kDefaultSingleCopyMinBytes), for
  // ring_for.
  algorithms::RingOptions apart_ring_;

  // The queue, the worker, the failure latch; its mutex guards this group's state below too.
  OpRunner runner_;
  std::mutex& mu_ = runner_.mutex();
  std::condition_variable p2p_cv_;   // posted_ or stopping changed; waits on mu_
  std::list<PostedP2P> posted_;      // GUARDED_BY(mu_)
  std::uint64_t next_sequence_ = 0;  // GUARDED_BY(mu_); the collective after the last queued
  std::uint32_t next_child_ = 0;     // GUARDED_BY(mu_)
  // The names of the last collectives by sequence number (frame_name); GUARDED_BY(mu_).
  std::array<std::string_view, 64> op_names_{};
  std::thread completer_;  // started by the worker at the first p2p op; GUARDED_BY(mu_)
};

}  // namespace c10d::inline v1::backends::tpg_detail
