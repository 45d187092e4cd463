// Shared memory between the processes of one host: SharedSegment, a POSIX shared-memory
// segment mapped into this process (RAII: unmapped, and unlinked if this object created it and
// still holds the name, on destruction), and futex waits and wakes on a word of a segment
// (process-shared, so they work across processes). Used by the TCP backend's same-host channels
// (backends/gloo_like/shm_transport.h) and by the ICI fabric (backends/tpu_ici/shm_segment.h).
//
// Thread-safety: a SharedSegment is immutable once made.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

namespace c10d::transport {

class SharedSegment {
 public:
  // Creates `name` (it must not exist) with `bytes` zero bytes, all backed by memory now (so a
  // full /dev/shm fails here, naming the segment, instead of killing the process with SIGBUS at
  // first touch), or opens an existing one. Throws NetworkError naming the segment and the errno.
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

}  // namespace c10d::transport
