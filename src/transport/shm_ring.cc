// ShmRing (shm_ring.h): what is not on the hot path.
#include "transport/shm_ring.h"

#include <bit>
#include <new>

#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::inline v1::transport {

ShmRing::ShmRing(ShmRingHeader* header, std::byte* data, std::size_t capacity)
    : header_(header), data_(data), capacity_(capacity) {
  C10D_CHECK(header != nullptr && data != nullptr,
             "a shared-memory ring needs its header and its data");
  C10D_CHECK(std::has_single_bit(capacity),
             "a shared-memory ring of {} bytes: its size must be a power of two", capacity);
}

ShmRing ShmRing::at(std::byte* base, std::size_t capacity) {
  return ShmRing(reinterpret_cast<ShmRingHeader*>(base), base + kShmRingHeaderBytes, capacity);
}

ShmRing ShmRing::create(std::byte* base, std::size_t capacity) {
  new (base) ShmRingHeader{};
  return ShmRing::at(base, capacity);
}

}  // namespace c10d::inline v1::transport
