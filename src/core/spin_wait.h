// Adaptive waiting. On the virtual machines we run on, a thread asleep on a futex or in
// epoll_wait takes about 60 µs to run again once woken, against a few µs for a thread that
// polls; a small collective's whole round trip is shorter than one wake-up. So a waiter that
// expects its event soon polls first: without yielding for hot_spin(), then yielding the core
// between polls until spin_window(), and only then blocks. hot_spin() is kHotSpin (20 µs) when
// each local process has a core of its own (core/host.h): sched_yield is a costly system call
// here, and an 8-byte all_reduce of 2 ranks took 82-90 µs with 20 against 128-130 with 5. Where
// ranks outnumber cores it is 0: a poller that does not yield keeps the core from the rank it
// waits for (an 8-byte all_reduce of 4 ranks on 2 cores over loopback TCP: 70 µs spinning
// 20 µs first, 33 µs yielding at once). See docs/benchmarks.md.
#pragma once

#include <sched.h>

#include <chrono>
#include <cstdint>

#include "core/host.h"
#include "core/parse.h"

namespace c10d::inline v1::core {

inline constexpr std::chrono::microseconds kHotSpin{20};

// How long spin_until polls before it yields between polls (see above).
inline std::chrono::microseconds hot_spin() {
  return has_own_core() ? kHotSpin : std::chrono::microseconds(0);
}

// Tells the core this thread spins (x86 PAUSE): a tight poll of a word another core writes
// then does not keep taking the line back while that core waits to write it.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// The longest C10D_SPIN_US: a second of polling is far past any use (and far from overflow).
inline constexpr std::int64_t kMaxSpinUs = 1'000'000;

// The whole polling window: 50 µs, or C10D_SPIN_US in [0, kMaxSpinUs] (0 turns polling off;
// anything else is an InvalidArgument naming it, thrown by the first call).
inline std::chrono::microseconds spin_window() {
  static const std::chrono::microseconds window(
      env_int("C10D_SPIN_US", 0, kMaxSpinUs).value_or(50));
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
  const auto hot = hot_spin();
  for (;;) {
    const auto now = std::chrono::steady_clock::now();
    if (now - start >= window || now >= deadline) return ready();
    if (now - start >= hot) sched_yield();
    if (ready()) return true;
  }
}

}  // namespace c10d::inline v1::core
