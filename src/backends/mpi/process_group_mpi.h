// ProcessGroupMPI: the ProcessGroup of process_group.h mapped straight onto Open MPI calls.
// The factory make_process_group_mpi() is declared in include/c10d/init.h.
//
// Contract, as the TCP group (backends/common/transport_process_group.h), and the same op
// lifecycle (backends/common/op_runner.h): each call checks its arguments on the caller's thread
// (InvalidArgument at once, nothing queued), takes the group's next sequence number and queues
// the op (an OpWork, mpi_op.h: the Work the caller gets, holding the closure that starts the op;
// one allocation); ops start in issue order, at most one collective in flight per group. Who
// runs a collective: the thread that waits for it, when it is next to start (run_inline: no
// thread hand-off, which costs more than a small collective here), or else the runner's worker
// thread; while callers wait at once the worker holds a collective back 1 ms to leave it to
// them (backends/common/inline_schedule.h).
//
// Collectives (mpi_op.h): blocking MPI calls by default; a waiter runs one only if it waits as
// long as the op's timeout (a blocking call cannot be handed over midway); other waiters leave
// it to the worker and may time out themselves (TimeoutError) while it runs. MPI cannot cancel
// a collective, so a call still running at the op's deadline ends the job: a DeadlineWatchdog
// logs the op and calls MPI_Abort, and mpirun stops every rank. abort() fails the group's queued
// ops but cannot stop a call in MPI; the destructor then waits for it (at most until its
// deadline). With C10D_MPI_BLOCKING=0 the nonblocking twins are tested until they complete or
// their deadline passes, so a timeout or abort() fails the op (TimeoutError) and the group
// instead of the job; a waiter whose own deadline comes first hands the started op to the worker
// (adopted_). Under MPI_THREAD_SERIALIZED collectives are nonblocking.
// send/recv post MPI_Isend/MPI_Irecv in issue order on the group's own point-to-point
// communicator (the user tag is the MPI tag) and are tested alongside: a recv waiting for a peer
// never blocks the collectives behind it. recv_any_source is MPI_Irecv from MPI_ANY_SOURCE; its
// Work's source_rank() is the completed status's MPI_SOURCE (MPI's matching is the one
// process_group.h describes).
//
// Reductions (mpi_runtime.h): c10d's own kernels as user-defined MPI ops. AVG is a SUM followed
// by algorithms::finish_average; PREMUL_SUM scales this rank's contribution with
// algorithms::premul_in_place (on a scratch copy when the input must stay unchanged) and sums.
//
// Communicators: each group owns three duplicates of its communicator: collectives, point-to-
// point, and control (MPI_Comm_create_group for new_group, collective over the subgroup's members
// only, so a non-member returns at once; called on the caller's thread, so it never interleaves
// with the worker's collectives). Every communicator has MPI_ERRORS_RETURN; an
// error code becomes a NetworkError naming the rank, the op, its sequence number and
// MPI_Error_string's text.
//
// Failure: an MPI error or a timeout fails the op and marks the group failed (OpRunner's latch):
// every pending and later op fails with that error. abort() never calls MPI_Abort: it only fails
// this group's ops (the watchdog above is the one caller).
//
// Threads: the caller's threads check, queue, (new_group only) create communicators, and run
// the collectives they wait for (above); one worker per group runs every other MPI call; with
// blocking collectives, one watchdog thread per group (deadline_watchdog.h).
// Thread-safety: every method may be called from any thread. Lifetime: the destructor fails
// pending ops with an Error and joins the worker.
#pragma once

#include <mpi.h>

#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "backends/common/op_checks.h"
#include "backends/common/op_runner.h"
#include "backends/mpi/deadline_watchdog.h"
#include "backends/mpi/mpi_op.h"
#include "c10d/process_group.h"
#include "core/work_control.h"

namespace c10d::inline v1::mpi {

class ProcessGroupMPI final : public ProcessGroup,
                              public std::enable_shared_from_this<ProcessGroupMPI>,
                              private backends::OpRunner::Driver {
 public:
  // Takes ownership of `comm` (a communicator of its own, freed by the destructor).
  ProcessGroupMPI(MPI_Comm comm, int rank, int size, Milliseconds timeout, std::string name);
  ~ProcessGroupMPI() override;

  std::string backend_name() const override { return "mpi"; }

  // The collectives (mpi_collectives.cc).
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
  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst_rank,
                             const SendRecvOptions& opts) override;
  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src_rank,
                             const SendRecvOptions& opts) override;
  std::shared_ptr<Work> recv_any_source(std::vector<Tensor> tensors,
                                        const SendRecvOptions& opts) override;

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override;
  void abort() override;

 private:
  // ---- Queueing (caller's thread) ----

  static std::int64_t total(const std::vector<Tensor>& tensors) {
    std::int64_t n = 0;
    for (const auto& t : tensors) n += t.numel();
    return n;
  }

  // Queues the op `record` describes, which `start` starts; `split_sizes`: an all_to_all with
  // split sizes (its fingerprint says so).
  template <typename Start>
  std::shared_ptr<Work> push(backends::OpRecord record, std::optional<Milliseconds> timeout,
                             Start&& start, bool split_sizes = false) {
    const Milliseconds t = timeout.value_or(timeout_);
    C10D_CHECK(t.count() > 0, "{}: the timeout must be positive, not {} ms", record.op, t.count());
    auto op = runner_.submit(record, [&](const backends::OpRecord& r) {
      auto work = std::make_shared<OpWorkOf<std::decay_t<Start>>>(r, t, std::forward<Start>(start));
      if (detail_) {  // not worth its cost on the path of a small collective otherwise
        work->fingerprint = backends::Fingerprint::of(r);
        work->fingerprint.split_sizes = split_sizes;
      }
      return work;
    });
    return std::static_pointer_cast<OpWork>(std::move(op));
  }

  std::shared_ptr<Work> point_to_point(std::string_view op, std::vector<Tensor> tensors, int peer,
                                       const SendRecvOptions& opts);
  // `all` is this rank's private copy of the size blocks (scaled here for PREMUL_SUM).
  Started start_reduce_scatter(const Comms& c, const Call& call, const Tensor& all,
                               const Tensor& output, const Reduction& r);

  // ---- Running: waiters, and the runner's worker (OpRunner::Driver) ----

  void run_inline(Work& w, core::WaitClock& clock);
  std::shared_ptr<const core::WaitHook> make_wait_hook() override;
  std::exception_ptr start(backends::OpRunner::OpPtr op, Clock::time_point deadline) override;
  bool in_flight() const override { return worker_coll_.has_value() || !worker_p2p_.empty(); }
  std::exception_ptr progress(bool& progressed) override;
  void drop_in_flight(const std::exception_ptr& error) override;
  void collect_locked() override;
  bool wants_worker_locked() const override { return adopted_.has_value(); }

  std::exception_ptr check_fingerprints(const std::shared_ptr<OpWork>& op,
                                        Clock::time_point deadline, const Call& call);
  void fail(std::exception_ptr e) { runner_.fail(std::move(e)); }

  // How errors name an op: "rank 0: all_reduce #3 (MPI group world)".
  Call describe(const OpWork& w) const { return Call{rank(), w.record().op, w.sequence(), &name_}; }

  // Under the runner's mutex: watches the blocking collective about to start (the watchdog ends
  // the job past `deadline`) until unwatched. True when the watchdog must be woken. A waiter
  // arms it while it takes the op and collective_done() disarms it, both in critical sections
  // the op needs anyway; the worker uses a WatchGuard.
  bool watch_locked(Clock::time_point deadline, const Call& call) {
    watched_ = call;
    return watchdog_->watch_locked(deadline);
  }
  class WatchGuard;
  // The blocking collective this thread watched returned (or failed).
  void unwatch() {
    if (watchdog_) watchdog_->unwatch();
  }
  // The collective in flight ended (the worker's or a waiter's): the next may start, without
  // the mutex (OpRunner::release).
  void collective_done() {
    unwatch();
    runner_.release();
  }

  // The waiter tests its op's clock every kClockEvery tests: on these guests a read costs about
  // as much as an MPI_Testall (perf: clock_gettime took 15% of an 8-byte all_reduce loop).
  static constexpr unsigned kClockEvery = 16;

  const backends::OpChecks checks_;
  const Milliseconds timeout_;
  const std::string name_;
  const bool detail_ = backends::detail_from_env();
  Comms comms_;  // after construction, read by the worker and by waiters (run_inline)
  MPI_Comm control_ = MPI_COMM_NULL;  // new_group's MPI_Comm_create_group, on the caller's thread
  std::mutex split_mu_;               // serializes new_group
  std::uint32_t next_child_ = 0;      // GUARDED_BY(split_mu_)

  // The queue, the worker, the failure latch; its mutex guards the members below that say so.
  backends::OpRunner runner_;
  std::optional<Active> adopted_;  // GUARDED_BY(runner_.mutex()); a waiter's, handed over
  // The worker thread's alone: what it started and tests (members, not locals: they outlive an
  // exception that escapes its loop, and MPI may still use their buffers).
  std::optional<Active> worker_coll_;
  std::list<Active> worker_p2p_;
  // Watches blocking collectives (comms_.blocking); destroyed after the worker is joined.
  std::optional<DeadlineWatchdog> watchdog_;
  Call watched_{};  // GUARDED_BY(runner_.mutex()); the call watchdog_ watches, named if it expires
};

}  // namespace c10d::inline v1::mpi
