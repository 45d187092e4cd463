// OpRunner: the life of a group's ops from the call to the Work's completion, written once for
// the TCP/ICI group (transport_process_group.cc) and the MPI group (backends/mpi/). A group owns
// one and gives it the op bodies; the runner owns the rest:
//  - the queue: each call (after its argument checks, on the caller's thread) takes the group's
//    next sequence number (collectives and point-to-point count apart) and queues its op; ops
//    start in issue order;
//  - who starts an op: the thread that waits for a collective that is next to start runs it
//    itself (take_for_waiter, through the Work's wait hook: no thread hand-off), else the worker
//    thread the runner owns (InlineSchedule, inline_schedule.h, says which is expected);
//  - what may start: nothing overtakes a collective in flight; with Options::serial (the TCP
//    group) an op in flight holds back every later op, else (MPI) point-to-point ops start
//    beside it;
//  - the worker's deadline for an op: from when it starts, plus the op's timeout;
//  - failure: the first error the group meets is latched (fail()); every queued and later op
//    fails with it, and the driver is told once (the TCP group aborts its transport);
//  - the end: stop() fails what is queued with the reason, lets the driver end what runs, and
//    joins the worker;
//  - each op's OpRecord (op_record.h): queued, started, then completed or failed; with
//    Options::trace, the same in the group's flight recorder ring (trace_ring.h); the group's
//    failure (and an op's that fails alone) dumps the process's rings (flight_recorder.h) before
//    any Work fails with it; and each completed op counts in core/progress_file.h's counter
//    (c10drun --hang-timeout).
//
// The group is the runner's Driver: it runs or starts what the worker takes (start), and, when
// its ops stay in flight after starting (the MPI group's nonblocking calls and sends), tests them
// (progress) while the worker polls. A waiter's op the group runs itself after take_for_waiter.
//
// Cost: the hot path of a small collective (queue, then its waiter takes and runs it) is one
// critical section to queue, one to take, no allocation but the group's op and the queue's slot,
// and no clock read (the waiter's deadline is the group's; the worker reads the clock).
//
// Thread-safety: every method may be called from any thread unless it says "_locked" (the
// runner's mutex held: mutex(), which the group may use for state of its own that changes with
// the queue). Lifetime: the group calls start_worker() once it can serve the worker and stop()
// before it destroys what the driver uses.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "backends/common/inline_schedule.h"
#include "backends/common/op_record.h"
#include "backends/common/trace_ring.h"
#include "c10d/types.h"
#include "c10d/work.h"
#include "core/check.h"
#include "core/progress_file.h"
#include "core/work_control.h"

namespace c10d::inline v1::backends {

using core::what_of;

// One queued op: its Work, its record and its timeout. A group derives its op type from this (the
// MPI group's op is also its Work, so that queueing allocates once).
class RunnerOp {
 public:
  RunnerOp(Work& work, const OpRecord& record, Milliseconds timeout)
      : work_(&work), record_(record), timeout_(timeout) {}
  virtual ~RunnerOp() = default;
  RunnerOp(const RunnerOp&) = delete;
  RunnerOp& operator=(const RunnerOp&) = delete;

  Work& work() const { return *work_; }
  const OpRecord& record() const { return record_; }
  Milliseconds timeout() const { return timeout_; }
  bool collective() const { return record_.collective; }

  // Completes the op's Work (its record first, and the rank's progress counter for a launcher
  // that watches for hangs); on the thread that completes the op.
  void succeed(std::vector<Tensor> outputs = {}) {
    move_to(OpRecord::State::kCompleted);
    core::progress::op_completed();
    core::WorkControl::finish(*work_, std::move(outputs));
  }
  // The record's failure is traced (and dumped, unless its group's failure was: op_failed)
  // before the Work fails: a caller that exits on the error finds the dump written.
  void fail(std::exception_ptr error) {
    move_to(OpRecord::State::kFailed, &error);
    core::WorkControl::fail(*work_, std::move(error));
  }
  // Fails an op that never started (dropped from the queue); an op that holds the closure that
  // would start it releases it first.
  virtual void fail_unstarted(std::exception_ptr error) { fail(std::move(error)); }

 private:
  friend class OpRunner;
  void move_to(OpRecord::State s, const std::exception_ptr* error = nullptr) {
    record_.move_to(s);
    if (trace_ != nullptr) traced(error);
  }
  void traced(const std::exception_ptr* error);  // op_runner.cc

  Work* const work_;
  OpRecord record_;
  const Milliseconds timeout_;
  // The group's ring (the runner's, which outlives its ops' transitions: stop() ends them all)
  // and this op's id there; null when the recorder is off.
  TraceRing* trace_ = nullptr;
  std::uint64_t trace_id_ = 0;
};

class OpRunner {
 public:
  using Clock = std::chrono::steady_clock;
  using OpPtr = std::shared_ptr<RunnerOp>;

  // The group's part. Every method runs on the worker thread unless it says otherwise.
  class Driver {
   public:
    virtual ~Driver() = default;
    // Any thread, the runner's mutex held, once: the wait hook every collective's Work gets (the
    // group's own run_inline through shared_wait_hook, which calls take_for_waiter).
    virtual std::shared_ptr<const core::WaitHook> make_wait_hook() = 0;
    // Runs or starts `op`, just taken off the queue and recorded started, by `deadline`. An op
    // that ends here is completed here (RunnerOp::succeed/fail, after release() or finished()
    // for what it held); one left in flight is tested by progress(). The error returned (an op
    // that could not start) fails the group and then `op`. Anything thrown escapes the worker
    // (escape(), below).
    virtual std::exception_ptr start(OpPtr op, Clock::time_point deadline) = 0;
    // Whether ops the worker started are still in flight (then it polls progress() instead of
    // sleeping).
    virtual bool in_flight() const { return false; }
    // Tests the ops in flight, completing those done (`progressed`). An error returned (one op's:
    // a timeout, an MPI error) fails the group; drop_in_flight() then ends the rest.
    virtual std::exception_ptr progress(bool& /*progressed*/) { return nullptr; }
    // The group failed or is being destroyed: fail what is in flight with `error`.
    virtual void drop_in_flight(const std::exception_ptr& /*error*/) {}
    // The runner's mutex held, before the worker looks at the queue: take what waiters handed
    // over (an op started inline whose waiter stopped waiting), for in_flight() to see.
    virtual void collect_locked() {}
    // The runner's mutex held: whether the idle worker must wake for collect_locked().
    virtual bool wants_worker_locked() const { return false; }
    // Any thread, without the runner's mutex, once: the group's first failure, before the ops
    // queued then fail with it (the TCP group aborts its transport, so the peers fail too).
    virtual void on_failure(const std::exception_ptr& /*error*/) {}
    // Any thread, the runner's mutex held: stop() began; `running` when an op is in flight (the
    // TCP group aborts its transport, the one way to release a worker waiting on it).
    virtual void on_stop_locked(const std::exception_ptr& /*reason*/, bool /*running*/) {}
  };

  struct Options {
    std::string name;  // the group in messages: "group 3", "MPI group world"
    int rank = 0;
    // Waiters may run collectives (InlineSchedule; C10D_INLINE).
    bool inline_ops = true;
    // An op in flight holds back every later op (else only later collectives).
    bool serial = false;
    // A waiter runs a collective only when it waits about as long as the op's timeout
    // (InlineSchedule::waits_long_enough): the group cannot hand a running op to the worker.
    bool waiter_waits_long = false;
    // The idle worker polls the queue briefly before sleeping, while ops are expected there
    // (core/spin_wait.h).
    bool poll_queue = false;
    // Ops' records carry timestamps (a coarse clock read per transition); on with `trace`.
    bool stamp_times = false;
    // The group's flight recorder ring (flight_recorder.h: make_ring); null: off.
    std::shared_ptr<TraceRing> trace;
  };

  OpRunner(Driver& driver, Options options);
  // Stops (with a generic reason) if the group did not.
  ~OpRunner();
  OpRunner(const OpRunner&) = delete;
  OpRunner& operator=(const OpRunner&) = delete;

  // Starts the worker thread; once, when the driver can serve it.
  void start_worker();

  // Queues an op: `make(record)` (called under the runner's mutex, with the record's sequence
  // number and queued time filled in: `record` is the caller's, not a copy) creates it. Returns
  // it; when the group has failed, failed with that error (outside the mutex: its callbacks may
  // call into the group). Error when stopping.
  template <typename Make>
  OpPtr submit(OpRecord& record, Make&& make);

  // Work's wait hook (the group's run_inline): takes the op of `w` off the queue when it is next
  // to start, nothing runs and no failure or stop came (and, with Options::waiter_waits_long,
  // `wait_timeout` is long enough); `on_take(op)` runs then under the mutex, and the op counts
  // as in flight until release(). Null when the worker should run it (woken if need be), or it
  // started already.
  template <typename OnTake>
  OpPtr take_for_waiter(Work& w, Milliseconds wait_timeout, OnTake&& on_take);
  OpPtr take_for_waiter(Work& w, Milliseconds wait_timeout) {
    return take_for_waiter(w, wait_timeout, [](RunnerOp&) {});
  }

  // The op in flight (its waiter's or the worker's) ended: the next may start. release() takes
  // no lock (whoever starts the next op reads the flag under the mutex, and the idle worker
  // looks at a blocked queue every InlineSchedule::kGrace); finished() also wakes the worker
  // when an op behind it is the worker's to start. release_locked() under the mutex.
  void release() { running_.store(false, std::memory_order_release); }
  void release_locked() { running_.store(false, std::memory_order_relaxed); }
  void finished(bool release_op = true);

  // Latches the group's first failure `e`: fails every queued op with it, tells the driver, and
  // wakes the worker. Later calls do nothing.
  void fail(std::exception_ptr e);
  // The first failure, or null.
  std::exception_ptr failure() const;
  std::exception_ptr failure_locked() const { return failure_; }
  bool stopping_locked() const { return stopping_; }
  bool running() const { return running_.load(std::memory_order_acquire); }

  // Fails what is queued with `reason`, tells the driver, and joins the worker (which drops
  // what it holds in flight). Later submits fail. Once; the group's destructor calls it.
  void stop(std::exception_ptr reason);

  // For an exception that escaped a thread of the group (a Work callback that throws, run by
  // the thread that completes the op): logs it, fails the group with an Error naming the thread
  // and the exception, and returns that error (for what that thread held).
  std::exception_ptr escape(std::string_view thread, const std::exception_ptr& e);

  // Wakes the worker (after the group handed it something under the mutex: collect_locked).
  void wake_worker() { cv_.notify_all(); }
  std::mutex& mutex() { return mu_; }
  const Options& options() const { return options_; }
  // Read without the mutex (a hint).
  bool predict_waiters() const { return schedule_.predict(); }

 private:
  using Queue = std::deque<OpPtr>;

  // Under mu_: the front op, now in flight and recorded started.
  OpPtr take_front_locked();
  // Under mu_: what the idle worker finds at the front of the queue.
  InlineSchedule::Front front_locked() const;
  void idle_wait_locked(std::unique_lock<std::mutex>& lock, bool failure_handled);
  void take_startable_locked(std::vector<OpPtr>& start);
  void run_worker();
  void work_loop();
  void fail_all(Queue& ops, const std::exception_ptr& e);

  Driver& driver_;
  const Options options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;          // the queue, failure_, stopping_ or a hand-over changed
  Queue queue_;                         // GUARDED_BY(mu_)
  std::atomic<std::size_t> queued_{0};  // queue_.size(), for the worker to poll without mu_
  std::uint64_t next_collective_ = 0;   // GUARDED_BY(mu_)
  std::uint64_t next_p2p_ = 0;          // GUARDED_BY(mu_)
  std::exception_ptr failure_;          // GUARDED_BY(mu_)
  std::exception_ptr stop_reason_;      // GUARDED_BY(mu_)
  bool stopping_ = false;               // GUARDED_BY(mu_)
  // An op is in flight that holds back the next (Options::serial: any; else a collective); set
  // under mu_, cleared with or without it (release).
  std::atomic<bool> running_{false};
  InlineSchedule schedule_;  // GUARDED_BY(mu_), except predict()
  // Work's wait hook for collectives, shared by every Work; GUARDED_BY(mu_).
  std::shared_ptr<const core::WaitHook> wait_hook_;
  // Taken by the worker, not yet started (failed with the group if the worker's loop escapes).
  std::vector<OpPtr> taken_;
  std::thread worker_;
};

// ---- Templates ----

template <typename Make>
OpRunner::OpPtr OpRunner::submit(OpRecord& record, Make&& make) {
  OpPtr op;
  std::exception_ptr failed;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    C10D_CHECK(!stopping_, "{}: the group is being destroyed", record.op);
    record.sequence = record.collective ? next_collective_++ : next_p2p_++;
    record.timed = options_.stamp_times || options_.trace != nullptr;
    if (record.timed) record.queued = core::coarse_now();
    op = make(record);
    if (TraceRing* ring = options_.trace.get()) {
      op->trace_ = ring;
      op->trace_id_ =
          ring->add(op->record_, record.collective ? next_p2p_ : next_collective_, op->timeout());
    }
    if (record.collective && schedule_.enabled()) {
      if (!wait_hook_) wait_hook_ = driver_.make_wait_hook();
      core::WorkControl::set_wait_hook(op->work(), wait_hook_);
    }
    failed = failure_;
    if (!failed) {
      wake = schedule_.enqueued(record.collective, queue_.empty());
      queue_.push_back(op);
      queued_.store(queue_.size(), std::memory_order_release);
    }
  }
  if (failed) {
    op->fail_unstarted(failed);
  } else if (wake) {
    cv_.notify_all();
  }
  return op;
}

template <typename OnTake>
OpRunner::OpPtr OpRunner::take_for_waiter(Work& w, Milliseconds wait_timeout, OnTake&& on_take) {
  OpPtr op;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    const auto may_take = [&](const OpPtr& p) {
      return !running_.load(std::memory_order_acquire) && !failure_ && !stopping_ &&
             (!options_.waiter_waits_long ||
              InlineSchedule::waits_long_enough(wait_timeout, p->timeout()));
    };
    switch (schedule_.waiter_choice(queue_, w, may_take, wake)) {
      case InlineSchedule::Choice::kGone:
        return nullptr;
      case InlineSchedule::Choice::kTake:
        op = take_front_locked();
        on_take(*op);
        break;
      case InlineSchedule::Choice::kDecline:
        break;
    }
  }
  if (wake) cv_.notify_all();
  return op;
}

}  // namespace c10d::inline v1::backends
