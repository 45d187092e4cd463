// The ICI fabric's single-producer single-consumer byte ring of fabric_layout.h, over the
// shared-memory segments and futexes of transport/shared_memory.h.
//
// Thread-safety: a ring has one writer thread and one reader thread (they may be in different
// processes).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "backends/tpu_ici/fabric_layout.h"
#include "transport/shared_memory.h"

namespace c10d::inline v1::tpu_ici {

using transport::futex_wait;
using transport::futex_wake;
using transport::SharedSegment;

// One ring of fabric_layout.h, seen by its writer or its reader.
class ByteRing {
 public:
  ByteRing() = default;
  ByteRing(RingHeader* header, std::byte* data, std::size_t capacity)
      : header_(header), data_(data), capacity_(capacity) {}
  bool valid() const { return header_ != nullptr; }
  RingHeader& header() const { return *header_; }

  // Writer: room for `bytes` more now?
  bool has_room(std::size_t bytes) const;
  // Writer: appends header + payload (padded) as one record. Requires has_room.
  void write(const PacketHeader& h, std::span<const std::byte> payload);
  // Reader: copies the next record's header out; false when the ring is empty.
  bool peek(PacketHeader& h) const;
  // Reader: copies `out.size()` payload bytes of the peeked record, from `from`.
  void read_payload(std::size_t from, std::span<std::byte> out) const;
  // Reader: drops the peeked record.
  void consume(const PacketHeader& h);
  bool empty() const;

 private:
  void copy_in(std::uint64_t at, const void* src, std::size_t n);
  void copy_out(std::uint64_t at, void* dst, std::size_t n) const;

  RingHeader* header_ = nullptr;
  std::byte* data_ = nullptr;
  std::size_t capacity_ = 0;
};

}  // namespace c10d::inline v1::tpu_ici
