#include "c10d/work.h"

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "core/check.h"
#include "core/spin_wait.h"
#include "core/work_control.h"

namespace c10d::inline v1 {
namespace {

// The parking lot: futures share these mutexes and condition variables by address. Two futures
// on one slot only cost a sleeper a spurious wake-up (it waits for its own done_).
struct alignas(64) ParkingSlot {
  std::mutex mu;
  std::condition_variable cv;
};
constexpr std::size_t kParkingSlots = 64;

ParkingSlot& slot_of(const Future* f) {
  static auto* slots = new ParkingSlot[kParkingSlots];  // leaked: used until the process ends
  const auto address = reinterpret_cast<std::uintptr_t>(f);
  return slots[(address / alignof(std::max_align_t)) % kParkingSlots];
}

}  // namespace

void Future::mark_completed(std::vector<Tensor> value) {
  C10D_CHECK(!claimed_.exchange(true, std::memory_order_acq_rel), "future completed twice");
  value_ = std::move(value);
  publish();
}

void Future::set_error(std::exception_ptr error) {
  C10D_CHECK(error != nullptr, "set_error with a null exception");
  C10D_CHECK(!claimed_.exchange(true, std::memory_order_acq_rel), "future completed twice");
  error_ = std::move(error);
  publish();
}

void Future::publish() {
  done_.store(true, std::memory_order_seq_cst);
  if (!watched_.load(std::memory_order_seq_cst)) return;
  std::vector<Callback> callbacks;
  ParkingSlot& slot = slot_of(this);
  {
    // Also orders this wake after a sleeper's check of done_ (it holds the mutex until it
    // sleeps).
    std::lock_guard<std::mutex> lock(slot.mu);
    callbacks.swap(callbacks_);
  }
  slot.cv.notify_all();
  for (auto& cb : callbacks) cb(*this);
}

bool Future::completed() const { return done_.load(std::memory_order_acquire); }

bool Future::has_error() const { return completed() && error_ != nullptr; }

std::exception_ptr Future::exception() const { return completed() ? error_ : nullptr; }

bool Future::wait_for(Milliseconds timeout) const {
  return wait_until(std::chrono::steady_clock::now() + timeout);
}

bool Future::wait_until(std::chrono::steady_clock::time_point deadline) const {
  if (core::spin_until([&] { return done_.load(std::memory_order_acquire); }, deadline)) {
    return true;
  }
  ParkingSlot& slot = slot_of(this);
  std::unique_lock<std::mutex> lock(slot.mu);
  watched_.store(true, std::memory_order_seq_cst);
  return slot.cv.wait_until(lock, deadline, [&] { return done_.load(std::memory_order_seq_cst); });
}

void Future::wait(Milliseconds timeout) const {
  if (!wait_for(timeout)) {
    C10D_THROW(TimeoutError, "future not completed within {} ms", timeout.count());
  }
  if (auto err = exception()) std::rethrow_exception(err);
}

const std::vector<Tensor>& Future::value() const {
  C10D_CHECK(completed(), "value() of a future that has not completed");
  if (error_) std::rethrow_exception(error_);
  return value_;
}

void Future::add_callback(Callback callback) {
  std::vector<Callback> run;  // callbacks this thread runs: the future completed meanwhile
  {
    std::lock_guard<std::mutex> lock(slot_of(this).mu);
    if (done_.load(std::memory_order_acquire)) {
      run.push_back(std::move(callback));
    } else {
      callbacks_.push_back(std::move(callback));
      watched_.store(true, std::memory_order_seq_cst);
      // A completer that stored done_ before it could see watched_ left the callbacks here.
      if (done_.load(std::memory_order_seq_cst)) run.swap(callbacks_);
    }
  }
  for (auto& cb : run) cb(*this);
}

std::shared_ptr<Future> Future::then(std::function<std::vector<Tensor>(Future&)> fn) {
  auto next = std::make_shared<Future>();
  add_callback([next, fn = std::move(fn)](Future& self) {
    if (auto err = self.exception()) {
      next->set_error(err);
      return;
    }
    std::vector<Tensor> out;
    try {
      out = fn(self);
    } catch (...) {
      next->set_error(std::current_exception());
      return;
    }
    next->mark_completed(std::move(out));
  });
  return next;
}

Work::Work(std::string op_name, std::uint64_t sequence)
    : op_name_(std::move(op_name)), sequence_(sequence) {}

int Work::source_rank() const {
  // After the completion (acquire) that publishes it.
  const bool succeeded = is_success();
  const int rank = source_rank_.load(std::memory_order_relaxed);
  if (succeeded && rank >= 0) return rank;
  const bool receive = op_name_ == "recv" || op_name_ == "recv_any_source";
  C10D_THROW(InvalidArgument,
             "{} (sequence {}): source_rank() names the sender of a recv or recv_any_source that "
             "succeeded; this op {}",
             op_name_, sequence_,
             !receive         ? "is not one"
             : is_completed() ? "failed"
                              : "has not completed yet");
}

void Work::wait(Milliseconds timeout) {
  core::WaitClock clock(timeout);
  if (wait_hook_ && !future_.completed()) (*wait_hook_)(*this, clock);
  if (!future_.completed() && !future_.wait_until(clock.deadline())) {
    C10D_THROW(TimeoutError, "{} (sequence {}) did not complete within {} ms", op_name_, sequence_,
               timeout.count());
  }
  if (auto err = future_.exception()) std::rethrow_exception(err);
}

}  // namespace c10d::inline v1
