// SharedSegment: a POSIX shared-memory segment mapped into this process (RAII: unmapped, and
// unlinked if this object created it and still holds the name, on destruction). Plus the two
// things the fabric does with shared memory: futex waits and wakes on a word of a segment
// (process-shared, so they work across processes), and the single-producer single-consumer
// byte ring of fabric_layout.h.
//
// Thread-safety: a SharedSegment is immutable once made. A ring has one writer thread and one
// reader thread (they may be in different processes).
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "backends/tpu_ici/fabric_layout.h"

namespace c10d::tpu_ici {

class SharedSegment {
 public:
  // Creates `name` (it must not exist) with `bytes` zero bytes, or opens an existing one.
  // Throws NetworkError naming the segment and the errno.
  static SharedSegment create(const std::string& name, std::size_t bytes);
  static SharedSegment open(const std::string& name);

  SharedSegment() = default;
  SharedSegment(SharedSegment&& other) noexcept;
  SharedSegment& operator=(SharedSegment&& other) noexcept;
  SharedSegment(const SharedSegment&) = delete;
  SharedSegment& operator=(const SharedSegment&) = delete;
  ~SharedSegment();

  // Removes the name (the mapping stays); done once every peer has mapped the segment.
  void unlink();
  std::byte* data() const { return data_; }
  std::size_t size() const { return size_; }
  const std::string& name() const { return name_; }

 private:
  void reset();
  std::string name_;
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
  bool owns_name_ = false;
};

// Waits while *word == expected, up to `timeout`; wakes every waiter on the word.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::microseconds timeout);
void futex_wake(std::atomic<std::uint32_t>& word);

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

}  // namespace c10d::tpu_ici
