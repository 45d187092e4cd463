#include "backends/common/op_runner.h"

#include <algorithm>
#include <optional>
#include <utility>

#include "backends/common/flight_recorder.h"
#include "c10d/errors.h"
#include "core/logging.h"
#include "core/spin_wait.h"

namespace c10d::inline v1::backends {

OpRunner::OpRunner(Driver& driver, Options options)
    : driver_(driver), options_(std::move(options)), schedule_(options_.inline_ops) {}

OpRunner::~OpRunner() {
  if (worker_.joinable()) {
    stop(std::make_exception_ptr(Error(fmt::format("rank {}: {} was destroyed with this op pending",
                                                   options_.rank, options_.name))));
  }
}

void RunnerOp::traced(const std::exception_ptr* error) {
  if (error == nullptr) {
    trace_->update(trace_id_, record_);
    return;
  }
  const std::string what = what_of(*error);
  trace_->update(trace_id_, record_, what);
  trace::op_failed(*trace_, what);
}

void OpRunner::start_worker() {
  worker_ = std::thread([this] { run_worker(); });
}

void OpRunner::fail_all(Queue& ops, const std::exception_ptr& e) {
  for (auto& op : ops) op->fail_unstarted(e);  // outside mu_: callbacks may call into the group
}

void OpRunner::fail(std::exception_ptr e) {
  Queue dropped;
  {
    std::lock_guard lock(mu_);
    if (failure_) return;
    failure_ = e;
    dropped.swap(queue_);
    queued_.store(0, std::memory_order_relaxed);
  }
  driver_.on_failure(e);
  // Before the ops fail with it: a caller that exits on the error finds the dump.
  if (options_.trace) trace::group_failed(*options_.trace, what_of(e));
  fail_all(dropped, e);
  cv_.notify_all();
}

std::exception_ptr OpRunner::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void OpRunner::stop(std::exception_ptr reason) {
  Queue dropped;
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_reason_ = reason;
    dropped.swap(queue_);
    queued_.store(0, std::memory_order_relaxed);
    driver_.on_stop_locked(reason, running_.load(std::memory_order_acquire));
  }
  fail_all(dropped, reason);
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

void OpRunner::finished(bool release_op) {
  // Cleared before the op's Work completes: a caller that destroys the group as soon as its
  // last op is done must find nothing running.
  if (release_op) release();
  // Nothing queued behind it, the usual case of a caller that waits for each op: no lock. An op
  // queued meanwhile is its waiter's to take, or the worker's, which its submit woke and which
  // looks again within InlineSchedule::kGrace when it found this one still running.
  if (queued_.load(std::memory_order_acquire) == 0) return;
  bool wake = false;
  {
    std::lock_guard lock(mu_);
    // An op queued behind this one that the worker should start now (it may be asleep).
    wake = !queue_.empty() && (!queue_.front()->collective() || !schedule_.predict());
  }
  if (wake) cv_.notify_all();
}

std::exception_ptr OpRunner::escape(std::string_view thread, const std::exception_ptr& e) {
  const std::string what = what_of(e);
  C10D_LOG_ERROR("rank {}: the {} thread of {} failed: {}", options_.rank, thread, options_.name,
                 what);
  const auto error = std::make_exception_ptr(Error(fmt::format(
      "rank {}: the {} thread of {} failed: {}", options_.rank, thread, options_.name, what)));
  fail(error);
  return error;
}

OpRunner::OpPtr OpRunner::take_front_locked() {
  OpPtr op = std::move(queue_.front());
  queue_.pop_front();
  queued_.store(queue_.size(), std::memory_order_relaxed);
  schedule_.front_taken();
  if (options_.serial || op->collective()) running_.store(true, std::memory_order_relaxed);
  op->move_to(OpRecord::State::kStarted);
  return op;
}

InlineSchedule::Front OpRunner::front_locked() const {
  using Front = InlineSchedule::Front;
  if (queue_.empty()) return Front::kEmpty;
  const bool collective = queue_.front()->collective();
  if (!collective && !options_.serial) return Front::kOther;
  // Issue order: nothing overtakes the op in flight.
  if (running_.load(std::memory_order_acquire)) return Front::kBlocked;
  return collective ? Front::kStartable : Front::kOther;
}

// Sleeps until there is something to start (InlineSchedule::idle_wait, with its grace for
// waiters), a hand-over for the driver, a failure not yet applied, or stop().
void OpRunner::idle_wait_locked(std::unique_lock<std::mutex>& lock, bool failure_handled) {
  schedule_.idle_wait(
      lock, cv_,
      [&] { return stopping_ || (failure_ && !failure_handled) || driver_.wants_worker_locked(); },
      [&] { return front_locked(); });
}

// Moves the queued ops that may start now into `start`, in issue order. A collective waits for
// the op in flight and, while callers wait for their collectives at once, for the schedule's
// grace after it could start (InlineSchedule::worker_may_start).
void OpRunner::take_startable_locked(std::vector<OpPtr>& start) {
  std::optional<Clock::time_point> now;
  while (!queue_.empty()) {
    const bool collective = queue_.front()->collective();
    if (collective || options_.serial) {
      if (running_.load(std::memory_order_acquire)) return;
      if (collective) {
        if (!now) now = Clock::now();
        if (!schedule_.worker_may_start(*now)) return;
      }
    }
    start.push_back(take_front_locked());
  }
}

// The worker thread's body. What escapes the loop (a Work callback that throws, say) fails the
// group, and the loop starts again to end what it holds and to serve stop(), instead of
// std::terminate ending the process.
void OpRunner::run_worker() {
  for (;;) {
    try {
      work_loop();
      return;
    } catch (...) {
      try {
        const auto error = escape("worker", std::current_exception());
        std::vector<OpPtr> taken;
        taken.swap(taken_);
        for (auto& op : taken) {
          if (op) op->fail_unstarted(error);  // null: the op being started
        }
      } catch (...) {  // a callback threw again: the group has failed all the same
        C10D_LOG_ERROR("rank {}: while failing {}: {}", options_.rank, options_.name,
                       what_of(std::current_exception()));
      }
    }
  }
}

void OpRunner::work_loop() {
  auto nap = std::chrono::microseconds(0);
  auto last_progress = Clock::now();
  bool failure_handled = false;  // the failure_ seen has been applied to what the driver holds
  const auto wake = [&] {
    return stopping_ || !queue_.empty() || driver_.wants_worker_locked() ||
           (failure_ && !failure_handled);
  };
  for (;;) {
    // Training loops issue the next op right after the last one completes: unless its caller
    // will run it, poll for it briefly before sleeping (core/spin_wait.h).
    if (options_.poll_queue && !schedule_.predict() && !driver_.in_flight()) {
      core::spin_until([&] { return queued_.load(std::memory_order_acquire) > 0; });
    }
    std::exception_ptr failed;
    bool stop = false;
    {
      std::unique_lock lock(mu_);
      if (!driver_.in_flight()) idle_wait_locked(lock, failure_handled);
      driver_.collect_locked();
      stop = stopping_;
      failed = stopping_ ? stop_reason_ : failure_;
      if (!failed) take_startable_locked(taken_);
    }
    if (failed) {
      // Stopped or failed: what the driver holds fails with the reason.
      driver_.drop_in_flight(failed);
      if (stop) return;
      failure_handled = true;
      continue;  // sleeps until stop()
    }
    bool progressed = !taken_.empty();
    std::exception_ptr error;
    for (std::size_t i = 0; i < taken_.size() && !error; ++i) {
      OpPtr op = std::move(taken_[i]);
      if ((error = driver_.start(op, Clock::now() + op->timeout()))) {
        // The op that could not start, and those taken behind it, fail with the group.
        fail(error);
        op->fail(error);
        for (std::size_t j = i + 1; j < taken_.size(); ++j) taken_[j]->fail_unstarted(error);
      }
    }
    taken_.clear();
    if (error) continue;
    if (!driver_.in_flight()) continue;
    if ((error = driver_.progress(progressed))) {
      fail(error);
      continue;
    }
    // Progress happens only inside the driver's tests: poll hard right after progress, then back
    // off (yielding first, sleeping up to 200 us) so idle ranks leave the cores to busy ones.
    const auto now = Clock::now();
    if (progressed) {
      last_progress = now;
      nap = std::chrono::microseconds(0);
    } else if (now - last_progress < std::chrono::milliseconds(2)) {
      std::this_thread::yield();
    } else {
      nap = std::min(std::max(nap * 2, std::chrono::microseconds(10)),
                     std::chrono::microseconds(200));
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, nap, wake);
    }
  }
}

}  // namespace c10d::inline v1::backends
