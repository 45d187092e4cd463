#include "c10d/work.h"

#include "core/check.h"
#include "core/spin_wait.h"

namespace c10d {

void Future::mark_completed(std::vector<Tensor> value) {
  std::vector<Callback> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    C10D_CHECK(!completed_, "future completed twice");
    completed_ = true;
    value_ = std::move(value);
    done_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
  for (auto& cb : callbacks) cb(*this);
}

void Future::set_error(std::exception_ptr error) {
  C10D_CHECK(error != nullptr, "set_error with a null exception");
  std::vector<Callback> callbacks;
  {
    std::lock_guard<std::mutex> lock(mu_);
    C10D_CHECK(!completed_, "future completed twice");
    completed_ = true;
    error_ = std::move(error);
    done_.store(true, std::memory_order_release);
    callbacks.swap(callbacks_);
  }
  cv_.notify_all();
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
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, deadline, [&] { return completed_; });
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
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!completed_) {
      callbacks_.push_back(std::move(callback));
      return;
    }
  }
  callback(*this);
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

void Work::wait(Milliseconds timeout) {
  const auto now = std::chrono::steady_clock::now();
  const auto deadline = now + timeout;
  if (wait_hook_ && !future_.completed()) (*wait_hook_)(*this, now, deadline);
  if (!future_.wait_until(deadline)) {
    C10D_THROW(TimeoutError, "{} (sequence {}) did not complete within {} ms", op_name_, sequence_,
               timeout.count());
  }
  if (auto err = future_.exception()) std::rethrow_exception(err);
}

}  // namespace c10d
