// What the transport tests share: a deadline far enough off for any of them, and a byte pattern
// that differs per seed and per 512-byte block (so a shifted or swapped chunk shows).
#pragma once

#include <chrono>
#include <cstddef>
#include <vector>

#include "transport/transport.h"

namespace c10d::testing {

inline transport::Clock::time_point soon() {
  return transport::Clock::now() + std::chrono::seconds(20);
}

inline std::vector<std::byte> pattern(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return v;
}

}  // namespace c10d::testing
