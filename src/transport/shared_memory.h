// Shared memory between the processes of one host: SharedSegment, a POSIX shared-memory
// segment mapped into this process (RAII: unmapped, and unlinked if this object created it and
// still holds the name, on destruction), and futex waits and wakes on a word of a segment
// (process-shared, so they work across processes). Used by the TCP backend's same-host channels
// (backends/gloo_like/shm_transport.h) and by the ICI fabric (backends/tpu_ici/shm_segment.h),
// both through the byte ring of shm_ring.h.
//
// Names and orphans. A process that dies before it unlinks its segment (SIGKILL during a
// set-up, before every peer has mapped it) leaves the name behind, holding memory until someone
// removes it. So every segment is named after its owner process,
//
//   /<kind>-<pid namespace>-<pid>-<start time>-<suffix>    e.g. /c10d-shm-4026531836-4242-81234-...
//
// (the pid namespace's inode, the pid, and the process's start time in clock ticks since boot,
// field 22 of /proc/<pid>/stat, so a reused pid does not pass for the owner), and a set-up first
// reclaims the segments of its kind left by processes that are gone: named in that pattern, in
// this pid namespace, owned by this user, and whose pid is absent, a zombie, or a process that
// started at another time. Segments are created with mode 0600 whatever the umask.
//
// Thread-safety: a SharedSegment is immutable once made; the free functions are thread-safe.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace c10d::inline v1::transport {

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

// The owner encoded in a segment name of the pattern above.
struct SegmentOwner {
  std::uint64_t pid_namespace = 0;
  std::int64_t pid = 0;
  std::uint64_t start_time = 0;
};

// "/<kind>-<this process's owner fields>-<suffix>": the name of a new segment of this process.
std::string owned_segment_name(std::string_view kind, std::string_view suffix);
// "<kind>-<pid namespace>-<pid>-": how the /dev/shm entries of this process's segments of `kind`
// begin (tests look for their own segments by it).
std::string own_segment_prefix(std::string_view kind);
// The owner of /dev/shm entry `entry` ("c10d-shm-1-2-3-abc"), or nullopt when the entry is not
// of `kind`'s pattern.
std::optional<SegmentOwner> segment_owner(std::string_view entry, std::string_view kind);
// Whether `owner` is a live process (absent, zombie or started at another time: gone). A process
// this one cannot look at counts as live.
bool owner_alive(const SegmentOwner& owner);
// Unlinks the segments of `kind` that processes now gone left behind (see the top); returns how
// many. Never throws: a segment it cannot judge or remove is left alone.
std::size_t reclaim_orphan_segments(std::string_view kind);

// Waits while *word == expected, up to `timeout`; wakes every waiter on the word.
void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::microseconds timeout);
void futex_wake(std::atomic<std::uint32_t>& word);

}  // namespace c10d::inline v1::transport
