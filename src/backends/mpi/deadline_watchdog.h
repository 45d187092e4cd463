// DeadlineWatchdog: ends the process when a call that cannot be interrupted outlives its
// deadline. The MPI group runs its collectives as blocking MPI calls by default
// (process_group_mpi.h); MPI cannot cancel a collective, so a blocking call whose peer never
// comes would hang its thread forever. The group watches each blocking call: when the deadline
// passes before the call returns, the watchdog calls `expire` with the call's description (the
// group logs it and calls MPI_Abort, which ends every rank of the job loudly instead of leaving
// them hanging).
//
// One call is watched at a time (a group runs one collective at a time). The group arms the
// watch under its own mutex, in a critical section it enters anyway, and disarms it with one
// atomic store: no lock, clock read, allocation or wake-up of the watchdog's own per call (the
// owner keeps the watched call's description and `describe` reads it under the mutex). The watchdog
// thread sleeps at most kTick at a time and is woken only for a deadline earlier than the end of
// its current sleep.
//
// Threads: one thread of its own, started by the constructor and joined by the destructor
// (which does not wait for a watched call: it stops watching). `expire` runs on that thread,
// without the mutex; what it or `describe` throws is logged, and never leaves the thread.
// Lifetime: the mutex must outlive the watchdog.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace c10d::inline v1::mpi {

class DeadlineWatchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // The longest the thread sleeps without looking (the watched call may have changed since).
  static constexpr auto kTick = std::chrono::seconds(1);

  // The deadline of a call that starts now and may last `timeout`, read from the coarse
  // monotonic clock (a memory read, where steady_clock reads the time-stamp counter: on these
  // guests about 20 ns a call), plus its resolution, so that the deadline never comes early.
  static Clock::time_point deadline_in(Clock::duration timeout);

  // `describe` names the watched call; it runs on the watchdog's thread under `mu`.
  DeadlineWatchdog(std::mutex& mu, std::function<std::string()> describe,
                   std::function<void(const std::string&)> expire);
  ~DeadlineWatchdog();
  DeadlineWatchdog(const DeadlineWatchdog&) = delete;
  DeadlineWatchdog& operator=(const DeadlineWatchdog&) = delete;

  // Under the owner's mutex. Watches one call until unwatch(). Returns whether the
  // watchdog must be woken (wake() after releasing the mutex): the deadline comes before the
  // end of its sleep.
  [[nodiscard]] bool watch_locked(Clock::time_point deadline);
  // Any thread, with or without the owner's mutex: the watched call returned.
  void unwatch() { watching_.store(false, std::memory_order_release); }
  void wake() { cv_.notify_all(); }

 private:
  void loop();

  std::mutex& mu_;
  const std::function<std::string()> describe_;
  const std::function<void(const std::string&)> expire_;
  std::condition_variable cv_;          // waits on mu_
  std::atomic<bool> watching_{false};   // set under mu_, cleared with or without it
  Clock::time_point deadline_{};        // GUARDED_BY(mu_)
  Clock::time_point sleeping_until_{};  // GUARDED_BY(mu_)
  bool stop_ = false;                   // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace c10d::inline v1::mpi
