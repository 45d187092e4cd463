// What a test that bounds memory measures, valid with and without AddressSanitizer.
//
// The resident set is what a user sees, but under ASan it says little about the code under
// test: freed blocks wait in the allocator's quarantine (256 MiB by default) and stay resident,
// and the shadow and the allocator's caches add their own. heap_bytes() is the bytes allocated
// and not yet freed: ASan's own count under ASan (quarantined blocks count as freed), glibc's
// otherwise (mallinfo2: bytes in use in every arena plus mmapped blocks). Both are exact, so a
// buffer kept or given back shows the same in both builds. Bounds on another process's resident
// set (the c10d-store servers of store_hostile_test) stay: those servers free next to nothing
// while they are measured, so the quarantine does not move them.
#pragma once

#include <cstddef>

#if defined(__SANITIZE_ADDRESS__)
#define C10D_TEST_UNDER_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define C10D_TEST_UNDER_ASAN 1
#endif
#endif

#ifdef C10D_TEST_UNDER_ASAN
// The sanitizer runtime's (sanitizer/allocator_interface.h, which GCC does not install).
extern "C" std::size_t __sanitizer_get_current_allocated_bytes();
#else
#include <malloc.h>
#endif

namespace c10d::inline v1::testing {

// Bytes this process has allocated on the heap and not freed, every thread together.
inline std::size_t heap_bytes() {
#ifdef C10D_TEST_UNDER_ASAN
  return __sanitizer_get_current_allocated_bytes();
#else
  const struct mallinfo2 m = ::mallinfo2();
  return m.uordblks + m.hblkhd;
#endif
}

}  // namespace c10d::inline v1::testing
