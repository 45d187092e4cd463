// ShmRing: a single-producer single-consumer byte ring in shared memory (shared_memory.h), the
// one under both the TCP backend's same-host channel (backends/gloo_like/shm_layout.h) and the
// ICI fabric (backends/tpu_ici/fabric_layout.h). Each of those segments holds its own header and
// framing (messages, packets); the ring moves bytes.
//
// Layout (host byte order; a ring never leaves the host):
//
//   +0    atomic u64 head: bytes consumed, written only by the reader (its own cache line)
//   +64   atomic u64 tail: bytes produced, written only by the writer (its own cache line)
//   +72   atomic u32 writer waiting: set by a writer that found the ring full (room_for), taken
//         by the reader once it made room (take_writer_waiting), which then wakes the writer
//   +80   atomic u64 writer word: the framing's own, written only by the writer (the TCP
//         backend's same-host channel keeps there which single-copy messages the writer took
//         back, backends/gloo_like/shm_layout.h; the ICI fabric leaves it 0)
//   +128  data: `capacity` bytes (a power of two), byte i of the stream at i mod capacity
//
// head and tail only grow (mod 2^64); tail - head is what the ring holds, at most capacity. The
// writer publishes tail with release order after copying in, and reads head with acquire order
// before reusing room; the reader does the converse, so every byte copied out was written before
// its tail was published, and no byte is overwritten before its head was published.
//
// Batches: a Writer (Reader) reads the other side's position once, copies any number of pieces
// at its own, and shows them to the other side only at publish(): a message's header and its
// payload reach the reader together, and one look at the other side's cache line serves a
// batch. The one-step members of ShmRing (write, read, peek, consume) are batches of one.
//
// Thread-safety: one writer thread and one reader thread per ring, possibly in different
// processes; an ShmRing is a view (copyable, owns nothing) of memory that outlives it.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include "transport/shared_memory.h"

namespace c10d::inline v1::transport {

inline constexpr std::size_t kShmRingHeaderBytes = 128;

struct ShmRingHeader {
  alignas(64) std::atomic<std::uint64_t> head;
  alignas(64) std::atomic<std::uint64_t> tail;
  std::atomic<std::uint32_t> writer_waiting;
  std::atomic<std::uint64_t> writer_word;
};
static_assert(sizeof(ShmRingHeader) == kShmRingHeaderBytes && offsetof(ShmRingHeader, head) == 0 &&
              offsetof(ShmRingHeader, tail) == 64 &&
              offsetof(ShmRingHeader, writer_waiting) == 72 &&
              offsetof(ShmRingHeader, writer_word) == 80);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
              std::atomic<std::uint32_t>::is_always_lock_free);

class ShmRing {
 public:
  class Writer;
  class Reader;

  ShmRing() = default;
  // A view of the ring with this header and `capacity` bytes of data (a power of two; else
  // InvalidArgument). Checks nothing in the header: the caller checked the segment it maps.
  ShmRing(ShmRingHeader* header, std::byte* data, std::size_t capacity);
  // The ring laid out at `base`: its header, then its data at base + kShmRingHeaderBytes.
  static ShmRing at(std::byte* base, std::size_t capacity);
  // Makes an empty ring at `base` (in a new segment that nobody else maps yet); its view.
  static ShmRing create(std::byte* base, std::size_t capacity);

  bool valid() const { return header_ != nullptr; }
  std::size_t capacity() const { return static_cast<std::size_t>(capacity_); }
  ShmRingHeader& header() const { return *header_; }

  // ---- The writer's side ----
  // The bytes that fit now.
  std::uint64_t room() const;
  // Whether `n` bytes fit now. If not, marks the ring so that the reader, once it made room,
  // wakes the writer (take_writer_waiting), and looks again: room made in between is not missed.
  bool room_for(std::uint64_t n);
  // Copies `bytes` (at most room()) in and publishes them.
  void write(std::span<const std::byte> bytes);
  Writer writer() const;

  // ---- The reader's side ----
  // The bytes that can be read now.
  std::uint64_t available() const;
  bool empty() const { return available() == 0; }
  // Copies out.size() bytes from `offset` bytes past the reader's position (offset + out.size()
  // at most available()) without consuming them.
  void peek(std::uint64_t offset, std::span<std::byte> out) const;
  // Copies out.size() bytes (at most available()) out and consumes them.
  void read(std::span<std::byte> out);
  // Consumes `n` bytes (at most available()) unread.
  void consume(std::uint64_t n);
  // After consuming: whether the writer marked the ring full since (room_for), clearing the mark.
  // The reader then wakes it.
  bool take_writer_waiting() { return header_->writer_waiting.exchange(0) != 0; }
  Reader reader() const;

 private:
  friend class Writer;
  friend class Reader;

  // Empty copies return early: their pointer may be null, which memcpy must not get.
  void copy_in(std::uint64_t at, const std::byte* src, std::uint64_t n) const {
    if (n == 0) return;
    const std::uint64_t pos = at & (capacity_ - 1);
    const std::uint64_t first = std::min(n, capacity_ - pos);
    std::memcpy(data_ + pos, src, first);
    if (first < n) std::memcpy(data_, src + first, n - first);
  }
  void copy_out(std::uint64_t at, std::byte* dst, std::uint64_t n) const {
    if (n == 0) return;
    const std::uint64_t pos = at & (capacity_ - 1);
    const std::uint64_t first = std::min(n, capacity_ - pos);
    std::memcpy(dst, data_ + pos, first);
    if (first < n) std::memcpy(dst + first, data_, n - first);
  }

  ShmRingHeader* header_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t capacity_ = 0;
};

// The writer's batch (see the top): the reader's position as it was when the batch began.
class ShmRing::Writer {
 public:
  explicit Writer(const ShmRing& ring)
      : ring_(ring),
        head_(ring.header_->head.load(std::memory_order_acquire)),
        tail_(ring.header_->tail.load(std::memory_order_relaxed)) {}

  // The bytes that fit, as of the batch's start less what it wrote.
  std::uint64_t room() const { return ring_.capacity_ - (tail_ - head_); }
  // Copies `bytes` (at most room()) in, unpublished.
  void write(std::span<const std::byte> bytes) {
    ring_.copy_in(tail_, bytes.data(), bytes.size());
    tail_ += bytes.size();
  }
  // Moves past `n` bytes (at most room()) without writing them: padding, or what a sender no
  // longer has. The reader gets whatever the ring held there.
  void skip(std::uint64_t n) { tail_ += n; }
  // Shows the reader everything written so far.
  void publish() const { ring_.header_->tail.store(tail_, std::memory_order_release); }

 private:
  const ShmRing& ring_;
  const std::uint64_t head_;
  std::uint64_t tail_;
};

// The reader's batch (see the top): the writer's position as it was when the batch began.
class ShmRing::Reader {
 public:
  explicit Reader(const ShmRing& ring)
      : ring_(ring),
        tail_(ring.header_->tail.load(std::memory_order_acquire)),
        head_(ring.header_->head.load(std::memory_order_relaxed)) {}

  // The bytes to read, as of the batch's start less what it consumed.
  std::uint64_t available() const { return tail_ - head_; }
  // Copies out.size() bytes from `offset` past the batch's position (offset + out.size() at most
  // available()), without consuming them.
  void peek(std::uint64_t offset, std::span<std::byte> out) const {
    ring_.copy_out(head_ + offset, out.data(), out.size());
  }
  // Copies out.size() bytes (at most available()) out and consumes them, unpublished.
  void read(std::span<std::byte> out) {
    peek(0, out);
    head_ += out.size();
  }
  // Consumes `n` bytes (at most available()) unread, unpublished.
  void skip(std::uint64_t n) { head_ += n; }
  // Gives the writer the room of everything consumed so far.
  void publish() const { ring_.header_->head.store(head_, std::memory_order_release); }

 private:
  const ShmRing& ring_;
  const std::uint64_t tail_;
  std::uint64_t head_;
};

inline ShmRing::Writer ShmRing::writer() const { return Writer(*this); }
inline ShmRing::Reader ShmRing::reader() const { return Reader(*this); }

inline std::uint64_t ShmRing::room() const {
  const std::uint64_t head = header_->head.load(std::memory_order_acquire);
  const std::uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  return capacity_ - (tail - head);
}

inline bool ShmRing::room_for(std::uint64_t n) {
  if (room() >= n) return true;
  header_->writer_waiting.store(1, std::memory_order_seq_cst);
  return room() >= n;
}

inline void ShmRing::write(std::span<const std::byte> bytes) {
  const std::uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  copy_in(tail, bytes.data(), bytes.size());
  header_->tail.store(tail + bytes.size(), std::memory_order_release);
}

inline std::uint64_t ShmRing::available() const {
  const std::uint64_t tail = header_->tail.load(std::memory_order_acquire);
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  return tail - head;
}

inline void ShmRing::peek(std::uint64_t offset, std::span<std::byte> out) const {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  copy_out(head + offset, out.data(), out.size());
}

inline void ShmRing::read(std::span<std::byte> out) {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  copy_out(head, out.data(), out.size());
  header_->head.store(head + out.size(), std::memory_order_release);
}

inline void ShmRing::consume(std::uint64_t n) {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  header_->head.store(head + n, std::memory_order_release);
}

// Bumps a segment's doorbell (a futex word that the segment's owner sleeps on) and wakes its
// sleepers, with a system call only when `sleepers` says some thread sleeps on it.
inline void ring_doorbell(std::atomic<std::uint32_t>& doorbell,
                          const std::atomic<std::uint32_t>& sleepers) {
  doorbell.fetch_add(1, std::memory_order_seq_cst);
  if (sleepers.load(std::memory_order_seq_cst) != 0) futex_wake(doorbell);
}

}  // namespace c10d::inline v1::transport
