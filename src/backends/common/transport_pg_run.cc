// TransportProcessGroup as OpRunner's driver (transport_process_group_impl.h): the worker, or a
// waiter that runs its collective inline, runs each op to its end (a send/recv: until posted);
// the group's first failure aborts the transport. With DETAIL checks each collective first
// compares the ranks' fingerprints, else a rooted one runs within its entry check
// (algorithms/entry_check.h); a collective that times out is failed with an error that names
// the peer it waited for and the rank the ranks' waits lead to.
#include <algorithm>
#include <chrono>

#include "algorithms/all_gather.h"
#include "algorithms/entry_check.h"
#include "backends/common/inline_schedule.h"
#include "backends/common/transport_process_group_impl.h"
#include "core/coarse_clock.h"

namespace c10d::inline v1::backends::tpg_detail {

namespace {

// From this wait's timeout a waiter that runs its op reads the coarse clock (run_inline).
constexpr std::chrono::seconds kCoarseWait{1};

}  // namespace

// ---- Running (OpRunner's driver: the worker thread, and waiters) ----

std::shared_ptr<const core::WaitHook> TransportProcessGroup::make_wait_hook() {
  return backends::shared_wait_hook(weak_from_this(), &TransportProcessGroup::run_inline);
}

// The worker runs every op it takes to its end (a send/recv: until posted).
std::exception_ptr TransportProcessGroup::start(OpRunner::OpPtr op, Clock::time_point deadline) {
  auto p = std::static_pointer_cast<PendingOp>(std::move(op));
  finish_op(*p, run_op(p, deadline));
  return nullptr;
}

// The group's first failure: the transport is aborted so the peers fail too.
void TransportProcessGroup::on_failure(const std::exception_ptr& e) {
  transport_->abort(e);
  p2p_cv_.notify_all();
}

// An op still running holds its thread in a transport wait: only an abort releases it.
void TransportProcessGroup::on_stop_locked(const std::exception_ptr& reason, bool running) {
  if (running) transport_->abort(reason);
}

// Work::wait's hook for collectives: when `w` is next to start, nothing runs ahead of it and
// its waiter waits about as long as the op's own timeout, the waiter runs the op on its own
// thread (no thread hand-off; see inline_schedule.h) with the earlier of the two deadlines.
// Otherwise the worker runs it, now. A waiter with a much shorter wait leaves the op to the
// worker, so that its wait can time out while the op goes on.
void TransportProcessGroup::run_inline(Work& w, core::WaitClock& clock) {
  auto op = std::static_pointer_cast<PendingOp>(runner_.take_for_waiter(w, clock.timeout()));
  if (!op) return;
  // The coarse clock for a wait of seconds (a tick, 1-4 ms, early at worst): a precise read
  // costs about 30 ns here, a tenth of a small op's own work. With the flight recorder on, the
  // op's start was just stamped from that clock: no second read.
  const OpRecord& record = op->record();
  const auto start = clock.timeout() < kCoarseWait ? clock.start()
                     : record.timed                ? record.started
                                                   : core::coarse_now();
  const auto deadline = start + std::min<Clock::duration>(op->timeout(), clock.timeout());
  finish_op(*op, run_op(op, deadline));
}

// Completes `op` after run_op, on the thread that ran it.
void TransportProcessGroup::finish_op(PendingOp& op, Outcome outcome) {
  // Released before the Work completes: a caller that destroys the group as soon as its last
  // op is done must find nothing running (else the destructor aborts the transport). A
  // handed-off op was released already (and another may run since).
  runner_.finished(!outcome.handed_off);
  if (hooks_ && (op.collective() || outcome.error)) hooks_->op_finished(op.work());
  if (outcome.error) {
    op.fail(outcome.error);
  } else if (op.collective()) {
    op.succeed(std::move(outcome.outputs));
  }
}

TransportProcessGroup::Outcome TransportProcessGroup::run_op(const std::shared_ptr<PendingOp>& p,
                                                             Clock::time_point deadline) {
  PendingOp& op = *p;
  const std::uint64_t seq = op.record().sequence;
  if (hooks_) hooks_->op_started(op.work());
  try {
    if (op.collective()) {
      const Context ctx{*transport_, transport::make_tag(options_.group_id, seq), deadline,
                        pack_call(Fingerprint::of(op.record()))};
      if (detail_) {
        // Every rank sees the same fingerprints and fails this op alike, so the sequence
        // numbers stay in step and the group stays usable.
        if (auto mismatch = check_fingerprints(Fingerprint::of(op.record()), deadline)) {
          return {{}, mismatch};
        }
      }
      // A rooted op's ranks also hear that every rank entered it (the DETAIL fingerprints have
      // told them already).
      if (detail_ || op.record().rank < 0 || size() == 1) return {op.run(ctx), nullptr};
      return {run_rooted(op, ctx), nullptr};
    }
    PostedP2P posted{p,
                     PendingOp::work_of(p),
                     op.post(*transport_, transport::user_tag(options_.group_id, op.user_tag)),
                     std::move(op.outputs),
                     deadline,
                     op.peer,
                     op.user_tag,
                     op.timeout()};
    {
      std::lock_guard lock(runner_.mutex());
      posted_.push_back(std::move(posted));
      // From here the completer may complete the op's Work, and its caller destroy the group
      // at once: nothing may count as running then (the destructor would abort the transport,
      // which a subgroup shares with its parent).
      runner_.release_locked();
      if (!completer_.joinable()) completer_ = std::thread([this] { run_completer(); });
    }
    p2p_cv_.notify_all();
    return {.handed_off = true};
  } catch (const transport::PeerTimeout& t) {
    fail(explain_timeout(op, t));
  } catch (const transport::CallMismatch& m) {
    // A rank that called another collective under this sequence number (or this one with other
    // sizes): the group fails as with any error, naming both calls.
    fail(std::make_exception_ptr(
        InvalidArgument(core::with_location(__FILE__, __LINE__, describe_call_mismatch(m)))));
  } catch (...) {
    fail(std::current_exception());
  }
  // The group's first failure is the cause: report it, whichever op met it first.
  return {{}, runner_.failure()};
}

// A rooted collective within its entry check (algorithms/entry_check.h): no rank leaves before
// every rank entered it with this call, root included.
std::vector<Tensor> TransportProcessGroup::run_rooted(PendingOp& op, const Context& ctx) {
  algorithms::EntryCheck entry(ctx);
  std::vector<Tensor> out = op.run(ctx);
  entry.finish();
  return out;
}

// ---- DETAIL checks and the errors of ops that time out ----

// "all_reduce #11" (or "all_reduce #11 stage 1 lane 2") for a tag of one of this group's recent
// collectives; else tag_string.
std::string TransportProcessGroup::frame_name(transport::Tag tag) {
  std::lock_guard lock(mu_);
  return frame_name_locked(tag);
}

std::string TransportProcessGroup::frame_name_locked(transport::Tag tag) const {
  const auto seq = tag & transport::kSequenceMask;
  const int lane = transport::tag_lane(tag);
  if (transport::lane_op_tag(tag) == transport::make_tag(options_.group_id, seq)) {
    const std::string_view name = op_names_[seq % op_names_.size()];
    if (seq < next_sequence_ && seq + op_names_.size() >= next_sequence_ && !name.empty()) {
      if (transport::is_entry_tag(tag)) return fmt::format("{} #{} entry check", name, seq);
      return lane < 0 ? fmt::format("{} #{}", name, seq)
                      : fmt::format("{} #{} stage {} lane {}", name, seq, (tag >> 32) & 0xf, lane);
    }
  }
  return transport::tag_string(tag);
}

// The error of collective `op`, whose request timed out waiting for `t.peer()`: names that
// peer, what this rank last heard from it, and the rank the ranks' waits lead to in the end
// (Transport::find_stalled), which the abort then names to the other ranks as the cause.
std::exception_ptr TransportProcessGroup::explain_timeout(const PendingOp& op,
                                                          const transport::PeerTimeout& t) {
  const std::string doing = fmt::format("{} #{}", op.work().op_name(), op.record().sequence);
  // The group failed meanwhile: that is the cause.
  if (auto failure = runner_.failure()) return failure;
  // Ranks in step time out within moments of each other, but a loaded machine stretches the
  // moment: in a CI run (ctest -j2, 3 s timeouts) the rank this one waited for timed out 756 ms
  // after it, past a window of a quarter of the timeout. Half of it (0.2-2 s) is still short
  // beside the timeout itself.
  const auto window =
      std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(op.timeout() / 2),
                 std::chrono::milliseconds(200), std::chrono::milliseconds(2000));
  const transport::StallReport stall = transport_->find_stalled(t.peer(), doing, window);
  const auto& heard = t.heard();
  std::string text = fmt::format(
      "rank {}: {} (group {}) timed out after {} ms waiting for rank {} ({})", rank(), doing,
      options_.group_id,
      std::chrono::duration_cast<std::chrono::milliseconds>(op.timeout()).count(), t.peer(),
      transport::heard_string(heard, heard.known ? frame_name(heard.tag) : std::string()));
  for (const auto& hop : stall.chain) {
    text += fmt::format("; rank {} waits for rank {} ({})", hop.rank, hop.awaits, hop.doing);
  }
  if (stall.store_silent) {
    text += fmt::format(
        "; the store does not answer either (this rank may be cut off from it, or it is gone), "
        "so whom rank {} waits for is unknown",
        stall.suspect >= 0 ? stall.suspect : t.peer());
  } else if (stall.suspect < 0) {
    text +=
        "; the ranks wait for each other (do they all call the same collectives in the "
        "same order? C10D_DEBUG=DETAIL checks)";
  } else if (layout_.host_of(stall.suspect) != layout_.host_of(rank())) {
    // From another host, a stopped rank and a cut link look alike.
    text += fmt::format(
        "; rank {} made no progress or is unreachable from this host (it is on another host; "
        "no op of it timed out waiting for another rank)",
        stall.suspect);
  } else {
    text += fmt::format(
        "; rank {} made no progress (no op of it timed out waiting for another "
        "rank)",
        stall.suspect);
  }
  return std::make_exception_ptr(
      transport::PeerTimeout(core::with_location(__FILE__, __LINE__, text), stall.suspect, heard));
}

// All-gathers the fingerprints on the control tag and compares them with rank 0's; the
// InvalidArgument that names the ranks that differ, or null.
std::exception_ptr TransportProcessGroup::check_fingerprints(const Fingerprint& fp,
                                                             Clock::time_point deadline) {
  const Context ctx{*transport_, transport::control_tag(options_.group_id, fp.sequence), deadline};
  const auto mine = fp.encode();
  std::vector<std::byte> all(Fingerprint::kBytes * static_cast<std::size_t>(size()));
  algorithms::all_gather(ctx, mine, all);
  return fingerprint_mismatch(all, size(), std::to_string(options_.group_id));
}

}  // namespace c10d::inline v1::backends::tpg_detail
