// Counter-based random numbers: the i-th number of a stream is a pure function of (seed, i),
// so a tensor's values do not depend on the order kernels run in, on lazy or eager mode, or on
// the machine. The mix is splitmix64 (Steele, Lea and Flood) applied to seed_key + i * gamma.
#pragma once

#include <cstdint>

namespace c10d::inline v1::lazy {

inline std::uint64_t splitmix64(std::uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// The 64 random bits at position `counter` of the stream `seed`.
inline std::uint64_t random_bits(std::uint64_t seed, std::uint64_t counter) {
  const std::uint64_t key = splitmix64(seed + 0x9E3779B97F4A7C15ULL);
  return splitmix64(key + (counter + 1) * 0x9E3779B97F4A7C15ULL);
}

// Uniform in [0, 1) with 53 random bits.
inline double random_unit(std::uint64_t seed, std::uint64_t counter) {
  return static_cast<double>(random_bits(seed, counter) >> 11) * 0x1.0p-53;
}

}  // namespace c10d::inline v1::lazy
