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
// op's error.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "c10d/tensor.h"
#include "c10d/types.h"

namespace c10d {

class Future {
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
  // Completion is published by done_ (release), after value_ or error_ is set; from then on
  // both are immutable, so the read accessors need no lock once done_ reads true (acquire).
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool completed_ = false;           // GUARDED_BY(mu_)
  std::atomic<bool> done_{false};    // completed_, readable without mu_
  std::vector<Tensor> value_;        // written under mu_ before done_; immutable once done_
  std::exception_ptr error_;         // written under mu_ before done_; immutable once done_
  std::vector<Callback> callbacks_;  // GUARDED_BY(mu_)
};

// A Work holds its Future (one allocation per op); future() shares ownership of the Work, so a
// Work whose future() is called must be owned by a std::shared_ptr, as every backend's are.
class Work : public std::enable_shared_from_this<Work> {
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
  std::shared_ptr<Future> future() const {
    return std::shared_ptr<Future>(std::const_pointer_cast<Work>(shared_from_this()), &future_);
  }

  // For backends: complete the op.
  void finish(std::vector<Tensor> outputs = {}) { future_.mark_completed(std::move(outputs)); }
  void finish_with_error(std::exception_ptr error) { future_.set_error(std::move(error)); }

  // For backends: wait() calls the hook on the waiting thread, with the time the wait began and
  // the waiter's deadline, before it blocks. The hook may run the op on that thread (the TCP and
  // MPI backends run a collective that is next to start there:
  // backends/common/inline_schedule.h); it returns once the op completed or when it cannot help,
  // and never throws. Set it before the Work is handed out. A backend shares one hook among its
  // Works (no allocation per op).
  using WaitHook = std::function<void(Work&, std::chrono::steady_clock::time_point now,
                                      std::chrono::steady_clock::time_point deadline)>;
  void set_wait_hook(std::shared_ptr<const WaitHook> hook) { wait_hook_ = std::move(hook); }

 private:
  std::string op_name_;
  std::uint64_t sequence_;
  std::shared_ptr<const WaitHook> wait_hook_;
  mutable Future future_;  // future() hands it out sharing this Work's ownership
};

}  // namespace c10d
