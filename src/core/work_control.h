// WorkControl: the backends' side of a Work, which include/c10d/work.h keeps from users:
// completing it, naming a receive's sender, and the wait hook through which Work::wait lets the
// waiting thread run the op itself. Work befriends this class only; its functions are inline,
// as the public methods they replace were, so completing an op costs what it did.
//
// Thread-safety: a Work is completed once (finish or fail; a second completion throws
// InvalidArgument), from any thread; set_source_rank comes before that completion, which
// publishes it; set_wait_hook before the Work is handed out. Lifetime: a Work keeps its hook
// alive; a backend shares one hook among its Works (no allocation per op).
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "c10d/tensor.h"
#include "c10d/types.h"
#include "c10d/work.h"

namespace c10d::inline v1::core {

// A wait's timeout, and its start and deadline read from the clock only when first asked: a
// hook that runs the op to completion at once need not read it (on these guests a read costs
// about as much as the rest of a small op's bookkeeping).
class WaitClock {
 public:
  using Clock = std::chrono::steady_clock;
  explicit WaitClock(Milliseconds timeout) : timeout_(timeout) {}
  Milliseconds timeout() const { return timeout_; }
  Clock::time_point start() {
    if (!read_) {
      start_ = Clock::now();
      read_ = true;
    }
    return start_;
  }
  Clock::time_point deadline() { return start() + timeout_; }

 private:
  Milliseconds timeout_;
  Clock::time_point start_{};
  bool read_ = false;
};

// Work::wait calls the hook on the waiting thread, with the wait's timeout and clock, before it
// blocks. The hook may run the op on that thread (the TCP and MPI backends run a collective that
// is next to start there: backends/common/inline_schedule.h); it returns once the op completed
// or when it cannot help, and never throws. A class, not an alias, so that work.h can name it
// without saying what it is.
class WaitHook final : public std::function<void(Work&, WaitClock&)> {
 public:
  using std::function<void(Work&, WaitClock&)>::function;
};

class WorkControl {
 public:
  WorkControl() = delete;

  // Completes the op with its outputs (for in-place ops, its inputs).
  static void finish(Work& w, std::vector<Tensor> outputs = {}) {
    w.future_.mark_completed(std::move(outputs));
  }
  static void fail(Work& w, std::exception_ptr error) { w.future_.set_error(std::move(error)); }
  // The sender of a receive's message (Work::source_rank()), set before finish().
  static void set_source_rank(Work& w, int rank) {
    w.source_rank_.store(rank, std::memory_order_relaxed);
  }
  static void set_wait_hook(Work& w, std::shared_ptr<const WaitHook> hook) {
    w.wait_hook_ = std::move(hook);
  }
};

}  // namespace c10d::inline v1::core
