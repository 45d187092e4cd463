// core/copy.h: the own-block copy, streamed from kStreamCopyMinBytes, copies exactly what memmove
// would at every alignment, size and overlap.
#include "core/copy.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace c10d::inline v1::core {
namespace {

std::vector<std::byte> pattern(std::size_t n, std::uint32_t seed) {
  std::vector<std::byte> v(n);
  std::uint32_t x = seed;
  for (auto& b : v) {
    x = x * 1664525u + 1013904223u;
    b = static_cast<std::byte>(x >> 24);
  }
  return v;
}

// Copies `n` bytes from offset `from` to offset `to` of separate buffers and checks every byte of
// the destination: the copy's, and the untouched bytes around it.
void check_copy(std::size_t n, std::size_t from, std::size_t to) {
  const auto src = pattern(n + from + 64, 1);
  auto dst = pattern(n + to + 64, 2);
  const auto before = dst;
  copy_bytes(dst.data() + to, src.data() + from, n);
  ASSERT_EQ(std::memcmp(dst.data(), before.data(), to), 0) << "n " << n << " to " << to;
  ASSERT_EQ(std::memcmp(dst.data() + to, src.data() + from, n), 0)
      << "n " << n << " from " << from << " to " << to;
  ASSERT_EQ(std::memcmp(dst.data() + to + n, before.data() + to + n, 64), 0)
      << "n " << n << " to " << to;
}

TEST(CopyTest, SmallAndLargeCopiesAtEveryAlignment) {
  const std::size_t big = kStreamCopyMinBytes;
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{63}, std::size_t{4096}, big,
                        big + 1, big + 63, big + 64 + 15}) {
    for (std::size_t from : {0, 1, 15}) {
      for (std::size_t to : {0, 3, 16}) check_copy(n, from, to);
    }
  }
}

// Overlapping ranges cannot stream (a store could overwrite bytes not yet read): they are copied
// as memmove does, in either direction.
TEST(CopyTest, OverlappingLargeRangesCopyAsMemmove) {
  const std::size_t n = kStreamCopyMinBytes + 100;
  for (std::ptrdiff_t shift : {-4097, -1, 1, 64, 4097}) {
    auto buf = pattern(n + 16384, 3);
    auto want = buf;
    const std::size_t from = 8192;
    const auto to = static_cast<std::size_t>(static_cast<std::ptrdiff_t>(from) + shift);
    std::memmove(want.data() + to, want.data() + from, n);
    copy_bytes(buf.data() + to, buf.data() + from, n);
    ASSERT_EQ(buf, want) << "shift " << shift;
  }
}

}  // namespace
}  // namespace c10d::inline v1::core
