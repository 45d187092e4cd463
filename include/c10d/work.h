// Work and Future: the handles an asynchronous operation returns.
//
// A Future is completed exactly once, with a list of tensors or with an exception. Callbacks
// added with add_callback() or then() run on the thread that completes it (or at once on the
// caller's thread when it is already complete), so they must be short and must not block. A
// waiter is released as soon as the future completes, so wait() may return before callbacks
// added earlier have finished running (as with torch.futures).
//
// A Work is what a collective returns: its Future plus the op's name and sequence number. Every
// wait takes a deadline; waiting past it throws TimeoutError naming the op. wait() rethrows the
// op's error. The Work of a recv or recv_any_source also tells, once it succeeded, which rank
// sent what it received (source_rank()). Only the backend that made a Work completes it; a
// Future the user makes (a comm hook's, say) the user completes.
//
// Thread-safety: every method may be called from any thread. Lifetime: a Work's Future lives as
// long as the Work (future() shares the Work's ownership); a Future destroyed before it
// completes never runs its callbacks.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "c10d/export.h"
#include "c10d/tensor.h"
#include "c10d/types.h"

namespace c10d::inline v1 {

namespace core {
class WorkControl;  // the library's internal access to a Work (not part of the API)
class WaitHook;
}  // namespace core

class C10D_API Future {
 public:
  using Callback = std::function<void(Future&)>;

  Future() = default;
  Future(const Future&) = delete;
  Future& operator=(const Future&) = delete;

  // Completes with a value or an error. Completing twice throws InvalidArgument.
  void mark_completed(std::vector<Tensor> value = {});
  void set_error(std::exception_ptr error);

  bool completed() const;
  bool has_error() const;
  std::exception_ptr exception() const;

  // Blocks until completed or the deadline; returns false on timeout. Does not rethrow.
  bool wait_for(Milliseconds timeout) const;
  bool wait_until(std::chrono::steady_clock::time_point deadline) const;
  // Blocks until completed, then rethrows the error if any. TimeoutError past the deadline.
  void wait(Milliseconds timeout = kDefaultTimeout) const;
  // The value; rethrows the error. Throws InvalidArgument when not yet completed.
  const std::vector<Tensor>& value() const;

  void add_callback(Callback callback);
  // A new future completed with fn(this) once this one completes; an error in this future, or
  // one thrown by fn, completes the new future with that error.
  std::shared_ptr<Future> then(std::function<std::vector<Tensor>(Future&)> fn);

 private:
  // Completes: value_ or error_ is already set.
  void publish();

  // Completion is published by done_, after value_ or error_ is set by the one completer
  // (claimed_); from then on both are immutable, so readers need no lock once done_ reads true.
  // A completer takes the lock (to wake sleepers and run callbacks) only when watched_: a waiter
  // sleeps or a callback is registered. done_ and watched_ are stored and then the other
  // loaded, both seq_cst, so a completer and a waiter (or add_callback) cannot both miss the
  // other: the usual op, completed by the thread that waits for it, takes no lock at all.
  // Sleepers and callbacks use a process-wide mutex and condition variable chosen by the
  // future's address (work.cc: a parking lot of a few dozen), so a Future holds neither:
  // creating and destroying one per op costs no system object.
  std::atomic<bool> claimed_{false};          // a completion began
  std::atomic<bool> done_{false};             // completed
  mutable std::atomic<bool> watched_{false};  // sticky; set under the parking lot's mutex
  std::vector<Tensor> value_;                 // immutable once done_
  std::exception_ptr error_;                  // immutable once done_
  std::vector<Callback> callbacks_;           // GUARDED_BY(the parking lot's mutex)
};

// A Work holds its Future (one allocation per op); future() shares ownership of the Work, so a
// Work whose future() is called must be owned by a std::shared_ptr, as every backend's are.
class C10D_API Work : public std::enable_shared_from_this<Work> {
 public:
  Work(std::string op_name, std::uint64_t sequence);
  virtual ~Work() = default;
  Work(const Work&) = delete;
  Work& operator=(const Work&) = delete;

  const std::string& op_name() const { return op_name_; }
  std::uint64_t sequence() const { return sequence_; }

  bool is_completed() const { return future_.completed(); }
  // True when completed without an error.
  bool is_success() const { return future_.completed() && !future_.has_error(); }
  std::exception_ptr exception() const { return future_.exception(); }
  // Waits for the op and rethrows its error. Throws TimeoutError after `timeout`, naming the op;
  // the op itself goes on (its own deadline ends it).
  void wait(Milliseconds timeout = kDefaultTimeout);
  // The op's outputs (for in-place ops, its inputs). Rethrows the op's error.
  std::vector<Tensor> result() const { return future_.value(); }
  // The rank, in the op's group, whose message a recv or recv_any_source received (for recv,
  // its src_rank). Throws InvalidArgument, naming the op, for any other op, and for a receive
  // that has not completed or failed (as torch's Work::sourceRank does for other ops).
  int source_rank() const;
  std::shared_ptr<Future> future() const {
    return std::shared_ptr<Future>(std::const_pointer_cast<Work>(shared_from_this()), &future_);
  }

 private:
  // The library's backends complete a Work, name a receive's sender and give the Work its wait
  // hook (which wait() calls on the waiting thread, so that the waiter may run the op itself)
  // through WorkControl, an internal class: users only wait for a Work and read it.
  friend class core::WorkControl;

  std::string op_name_;
  std::uint64_t sequence_;
  std::shared_ptr<const core::WaitHook> wait_hook_;  // set before the Work is handed out
  // -1: not a receive, or none yet. Written before the future completes, which publishes it.
  std::atomic<int> source_rank_{-1};
  mutable Future future_;  // future() hands it out sharing this Work's ownership
};

}  // namespace c10d::inline v1
