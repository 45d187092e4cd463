#include "backends/mpi/deadline_watchdog.h"

#include <time.h>

#include <algorithm>
#include <exception>
#include <utility>

#include "core/logging.h"

namespace c10d::inline v1::mpi {

DeadlineWatchdog::Clock::time_point DeadlineWatchdog::deadline_in(Clock::duration timeout) {
  // libstdc++'s steady_clock is CLOCK_MONOTONIC, whose coarse twin counts from the same origin.
  static const Clock::duration resolution = [] {
    timespec res{};
    clock_getres(CLOCK_MONOTONIC_COARSE, &res);
    return Clock::duration(std::chrono::seconds(res.tv_sec) +
                           std::chrono::nanoseconds(res.tv_nsec));
  }();
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC_COARSE, &now);
  return Clock::time_point(std::chrono::seconds(now.tv_sec) +
                           std::chrono::nanoseconds(now.tv_nsec)) +
         resolution + timeout;
}

DeadlineWatchdog::DeadlineWatchdog(std::mutex& mu, std::function<std::string()> describe,
                                   std::function<void(const std::string&)> expire)
    : mu_(mu), describe_(std::move(describe)), expire_(std::move(expire)), thread_([this] {
        // Nothing below should throw; if something does, it is logged and the thread ends (a
        // blocking call is then no longer bounded) instead of std::terminate ending the process.
        try {
          loop();
        } catch (const std::exception& e) {
          C10D_LOG_ERROR("the MPI deadline watchdog failed: {}", e.what());
        } catch (...) {
          C10D_LOG_ERROR("the MPI deadline watchdog failed");
        }
      }) {}

DeadlineWatchdog::~DeadlineWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool DeadlineWatchdog::watch_locked(Clock::time_point deadline) {
  watching_.store(true, std::memory_order_relaxed);
  deadline_ = deadline;
  return deadline < sleeping_until_;
}

void DeadlineWatchdog::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const auto now = Clock::now();
    const bool watching = watching_.load(std::memory_order_acquire);
    if (watching && now >= deadline_) {
      std::string what = "a blocking MPI call";
      try {
        what = describe_();
      } catch (...) {  // expire all the same, unnamed
      }
      unwatch();
      lock.unlock();
      try {
        expire_(what);
      } catch (const std::exception& e) {
        C10D_LOG_ERROR("the MPI deadline watchdog could not end {}: {}", what, e.what());
      }
      lock.lock();
      continue;
    }
    sleeping_until_ = watching ? std::min(deadline_, now + kTick) : now + kTick;
    cv_.wait_until(lock, sleeping_until_);
  }
}

}  // namespace c10d::inline v1::mpi
