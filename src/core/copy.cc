#include "core/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace c10d::inline v1::core {

namespace {

bool overlap(const void* dst, const void* src, std::size_t n) {
  const auto d = reinterpret_cast<std::uintptr_t>(dst);
  const auto s = reinterpret_cast<std::uintptr_t>(src);
  return d < s + n && s < d + n;
}

}  // namespace

void copy_bytes(void* dst, const void* src, std::size_t n) {
#if defined(__SSE2__)
  if (n >= kStreamCopyMinBytes && !overlap(dst, src, n)) {
    auto* d = static_cast<std::byte*>(dst);
    const auto* s = static_cast<const std::byte*>(src);
    // Streaming stores need 16-byte aligned destinations: the head up to that goes by memcpy.
    const std::size_t head = (16 - reinterpret_cast<std::uintptr_t>(d) % 16) % 16;
    std::memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    const std::size_t body = n - n % 64;
    for (std::size_t i = 0; i < body; i += 64) {
      const auto* in = reinterpret_cast<const __m128i*>(s + i);
      auto* out = reinterpret_cast<__m128i*>(d + i);
      const __m128i a = _mm_loadu_si128(in);
      const __m128i b = _mm_loadu_si128(in + 1);
      const __m128i c = _mm_loadu_si128(in + 2);
      const __m128i e = _mm_loadu_si128(in + 3);
      _mm_stream_si128(out, a);
      _mm_stream_si128(out + 1, b);
      _mm_stream_si128(out + 2, c);
      _mm_stream_si128(out + 3, e);
    }
    // Streaming stores are weakly ordered: fenced before anything that publishes the copy.
    _mm_sfence();
    std::memcpy(d + body, s + body, n - body);
    return;
  }
#endif
  if (n > 0) std::memmove(dst, src, n);
}

}  // namespace c10d::inline v1::core
