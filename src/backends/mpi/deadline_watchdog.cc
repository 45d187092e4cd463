#include "backends/mpi/deadline_watchdog.h"

#include <algorithm>
#include <utility>

namespace c10d::mpi {

DeadlineWatchdog::DeadlineWatchdog(std::mutex& mu, std::function<void(const std::string&)> expire)
    : mu_(mu), expire_(std::move(expire)), thread_([this] { loop(); }) {}

DeadlineWatchdog::~DeadlineWatchdog() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

bool DeadlineWatchdog::watch_locked(Clock::time_point deadline,
                                    std::function<std::string()> describe) {
  watching_ = true;
  deadline_ = deadline;
  describe_ = std::move(describe);
  return deadline < sleeping_until_;
}

void DeadlineWatchdog::unwatch_locked() {
  watching_ = false;
  describe_ = nullptr;
}

void DeadlineWatchdog::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    const auto now = Clock::now();
    if (watching_ && now >= deadline_) {
      const std::string what = describe_();
      unwatch_locked();
      lock.unlock();
      expire_(what);
      lock.lock();
      continue;
    }
    sleeping_until_ = watching_ ? std::min(deadline_, now + kTick) : now + kTick;
    cv_.wait_until(lock, sleeping_until_);
  }
}

}  // namespace c10d::mpi
