// InlineSchedule: who starts a group's next collective, the thread that waits for it or the
// group's worker thread. OpRunner (op_runner.h), which runs the ops of the TCP/ICI and MPI
// groups, keeps it under its mutex.
//
// On these machines a thread woken from a futex takes tens of microseconds to run, more than a
// small collective takes. So when a caller waits for its collective as soon as it issued it
// (the usual loop: all_reduce, wait, all_reduce, wait), the caller's thread runs the op itself
// through Work's wait hook: no other thread wakes. The worker must then keep its hands off the
// op. The schedule predicts which case holds:
//  - predict on ("callers wait at once"): enqueuing a collective does not wake the worker; the
//    worker leaves a startable collective to its waiter for kGrace from when it first sees it,
//    looking at the queue every kGrace (less often while every look finds nothing: kLookMax)
//    until kPark passes without an enqueue (then it sleeps until an enqueue wakes it). The
//    worker reads the clock for this; callers and waiters never do (a clock read costs about as
//    much here as the rest of a small op's bookkeeping).
//    A collective the worker starts after the grace (nobody waited for it) turns predict off.
//  - predict off ("worker first"): enqueues wake the worker, which starts every op at once. A
//    waiter that still finds its op next and nothing running takes it and turns predict on.
// A waiter that cannot take its op (ops ahead of it, or its own deadline too short) turns
// predict off and wakes the worker.
//
// C10D_INLINE=0 turns waiter-run collectives off in every backend.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>

#include "c10d/work.h"
#include "core/parse.h"
#include "core/work_control.h"

namespace c10d::inline v1::backends {

// The Work wait hook a group gives every collective's Work (one per group): calls the group's
// `run` (its run_inline) while the group lives.
template <typename Group>
std::shared_ptr<const core::WaitHook> shared_wait_hook(std::weak_ptr<Group> group,
                                                       void (Group::*run)(Work&,
                                                                          core::WaitClock&)) {
  return std::make_shared<const core::WaitHook>(
      [group = std::move(group), run](Work& w, core::WaitClock& clock) {
        if (auto self = group.lock()) ((*self).*run)(w, clock);
      });
}

// C10D_INLINE, read strictly (core::env_flag): on unless it says off; InvalidArgument naming it
// when it is not a flag.
inline bool inline_from_env() { return core::env_flag("C10D_INLINE").value_or(true); }

class InlineSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  // How long the worker leaves a startable collective to its waiter, and how often it looks at
  // the queue meanwhile.
  static constexpr auto kGrace = std::chrono::milliseconds(1);
  // How long after the last enqueue the worker keeps looking before it sleeps until woken.
  static constexpr auto kPark = std::chrono::milliseconds(100);
  // While its looks at an empty queue find nothing left for it (every collective was taken by
  // its waiter), the worker looks half as often each time, down to every kLookMax: each look
  // wakes a thread on a core the callers are using (measured: a 10 µs MPI all_reduce took
  // 0.3-0.5 µs longer with a look every 1 ms than with one every 20 ms). The first collective
  // nobody waits for after such a run may then start up to kLookMax + kGrace late; the worker's
  // next start after a grace resets the pace.
  static constexpr auto kLookMax = std::chrono::milliseconds(8);

  // What the idle worker finds at the front of its queue.
  enum class Front {
    kEmpty,
    kOther,      // an op the worker starts at once (point-to-point)
    kBlocked,    // a collective behind one in flight (the worker's or a waiter's)
    kStartable,  // a collective that may start now
  };

  // Whether a waiter that waits `wait_timeout` waits long enough to run an op with `timeout`
  // itself: at least as long as the op's own timeout, less kSlack. (The TCP group then gives
  // the op the earlier of the two deadlines; the MPI group's blocking calls cannot stop early,
  // so it runs them only for such waiters.)
  static constexpr auto kSlack = std::chrono::seconds(1);
  template <typename WaitDuration, typename OpDuration>
  static bool waits_long_enough(WaitDuration wait_timeout, OpDuration timeout) {
    return wait_timeout + kSlack >= timeout;
  }

  explicit InlineSchedule(bool enabled) : enabled_(enabled), predict_(enabled) {}

  bool enabled() const { return enabled_; }
  // Whether callers are waiting for their collectives at once (readable without the mutex).
  bool predict() const { return predict_.load(std::memory_order_relaxed); }

  // All below under the group's mutex.

  // An op was queued; `front` when nothing is queued ahead of it (its grace starts when the
  // worker first finds it startable). True when the worker must be woken.
  bool enqueued(bool collective, bool front) {
    if (front) startable_since_ = kUnseen;
    enqueued_since_look_ = true;
    return !(collective && predict() && !worker_parked_);
  }
  // The queue's front op was taken (by its waiter or the worker): the grace of the op behind it
  // starts when the worker first finds that one startable (not while an op runs ahead of it,
  // which the group reports as Front::kBlocked).
  void front_taken() { startable_since_ = kUnseen; }
  // What the waiter of a collective does (Work's wait hook), decided by waiter_choice.
  enum class Choice {
    kGone,     // the op is no longer queued: it runs or ran already
    kTake,     // the waiter takes the queue's front op and runs it
    kDecline,  // the worker runs it; `wake_worker` says whether it must be woken
  };
  // Under the group's mutex: finds the op of `w` in `queue` (pointers to ops whose work() is a
  // Work: OpRunner's queue).
  // The waiter takes it when it is at the front and `may_take(op)` (the group's own conditions:
  // nothing in flight, no failure, a long enough wait). Taking turns the prediction on;
  // declining turns it off, without grace from now on, and then the worker must be woken if it
  // was sleeping through the grace.
  template <typename Queue, typename Work, typename MayTake>
  Choice waiter_choice(const Queue& queue, const Work& w, MayTake&& may_take, bool& wake_worker) {
    wake_worker = false;
    const auto it =
        std::find_if(queue.begin(), queue.end(), [&](const auto& p) { return &p->work() == &w; });
    if (it == queue.end()) return Choice::kGone;
    if (it != queue.begin() || !may_take(*it)) {
      wake_worker = predict_.exchange(false, std::memory_order_relaxed);
      return Choice::kDecline;
    }
    predict_.store(true, std::memory_order_relaxed);
    return Choice::kTake;
  }
  // Whether the worker may start the startable collective at the front now: not during its
  // waiter's grace. Starting one after the grace turns the prediction off.
  bool worker_may_start(Clock::time_point now) {
    if (predict() && now < grace_end(now)) return false;
    if (predict()) look_ = kGrace;  // nobody took it: look often again
    predict_.store(false, std::memory_order_relaxed);
    return true;
  }

  // The idle worker's sleep on `cv` under `lock` (the group's mutex): returns when `interrupted()`
  // (the group's own reasons: destruction, a failure, an op handed back) or when the worker
  // should start what is at the queue's front (`front()`), as described above.
  template <typename Interrupted, typename FrontOf>
  void idle_wait(std::unique_lock<std::mutex>& lock, std::condition_variable& cv,
                 Interrupted&& interrupted, FrontOf&& front) {
    for (;;) {
      if (interrupted()) return;
      const auto now = Clock::now();
      std::optional<Clock::time_point> until;
      switch (front()) {
        case Front::kOther:
          return;
        case Front::kBlocked:
          until = now + kGrace;
          break;
        case Front::kStartable:
          if (!predict() || now >= grace_end(now)) return;
          until = grace_end(now);
          break;
        case Front::kEmpty:
          if (enqueued_since_look_) {
            last_enqueue_seen_ = now;
            enqueued_since_look_ = false;
          }
          if (predict() && now - last_enqueue_seen_ < kPark) {
            until = now + look_;
            look_ = std::min<Clock::duration>(look_ * 2, kLookMax);
          }
          break;
      }
      worker_parked_ = !until;
      if (until) {
        cv.wait_until(lock, *until);
      } else {
        cv.wait(lock);
      }
      worker_parked_ = false;
    }
  }

 private:
  static constexpr Clock::time_point kUnseen = Clock::time_point::max();

  // When the grace of the startable collective at the front ends; the worker seeing it first
  // (at `now`) starts the grace.
  Clock::time_point grace_end(Clock::time_point now) {
    if (startable_since_ == kUnseen) startable_since_ = now;
    return startable_since_ + kGrace;
  }

  const bool enabled_;
  std::atomic<bool> predict_;
  bool worker_parked_ = false;  // the worker sleeps until an enqueue wakes it
  // When the worker first saw the front collective startable (kUnseen: not yet).
  Clock::time_point startable_since_ = kUnseen;
  bool enqueued_since_look_ = false;       // an op was queued since the idle worker last looked
  Clock::time_point last_enqueue_seen_{};  // the idle worker's look that found the last enqueue
  Clock::duration look_ = kGrace;  // the idle worker's next sleep at an empty queue (kLookMax)
};

}  // namespace c10d::inline v1::backends
