// Adaptive waiting. On the virtual machines we run on, a thread asleep on a futex or in
// epoll_wait takes about 60 µs to run again once woken, against a few µs for a thread that
// polls; a small collective's whole round trip is shorter than one wake-up. So a waiter that
// expects its event soon polls first: without yielding for kHotSpin, then yielding the core
// between polls until spin_window() (ranks may outnumber cores, and a yielding poller lets the
// thread it waits for run), and only then blocks. kHotSpin is 20 µs because sched_yield is a
// costly system call here: an 8-byte all_reduce of 2 ranks took 82-90 µs with 20 against
// 128-130 with 5 (at 4 ranks on 2 cores, 480 against 440). See docs/benchmarks.md.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdlib>

namespace c10d::core {

inline constexpr std::chrono::microseconds kHotSpin{20};

// The whole polling window: 50 µs, or C10D_SPIN_US (0 turns polling off).
inline std::chrono::microseconds spin_window() {
  static const std::chrono::microseconds window = [] {
    const char* env = std::getenv("C10D_SPIN_US");
    return std::chrono::microseconds(env != nullptr && *env != '\0' ? std::atol(env) : 50);
  }();
  return window;
}

// Polls `ready()` as above until it returns true (then true) or `window` or `deadline` passes
// (then false: the caller blocks). Cheap when ready() is true at once.
template <typename Ready>
bool spin_until(
    Ready&& ready,
    std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max(),
    std::chrono::microseconds window = spin_window()) {
  if (ready()) return true;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start >= window || now >= deadline) return ready();
    if (now - start >= kHotSpin) sched_yield();
    if (ready()) return true;
  }
}

}  // namespace c10d::core
