// Scratch memory for the algorithms: per thread and per slot, kept from one call to the next and
// never zero-filled. Allocating (and zero-filling) fresh megabytes on every collective costs page
// faults each time, since glibc hands large blocks back to the kernel when they are freed: that
// measured about 10% of a 16 MiB all_reduce on loopback (docs/benchmarks.md). Slots let a caller
// hold one buffer while a function it calls uses another. Requests above kRetainBytes get a
// buffer of their own, freed with the Scratch, so a one-off huge call does not pin its memory.
//
// Thread-safety: a Scratch is used by the thread that made it, and a thread holds at most one
// Scratch per slot at a time (each algorithm uses its own slot).
#pragma once

#include <cstddef>
#include <memory>
#include <span>

namespace c10d::inline v1::algorithms {

enum class ScratchSlot { kSegments, kInputCopy, kPartials, kStaging, kHierarchy, kCount };

inline constexpr std::size_t kRetainBytes = std::size_t{256} << 20;

class Scratch {
 public:
  Scratch(ScratchSlot slot, std::size_t bytes);
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;

  std::span<std::byte> span() const { return span_; }
  std::byte* data() const { return span_.data(); }

 private:
  std::unique_ptr<std::byte[]> owned_;
  std::span<std::byte> span_;
};

}  // namespace c10d::inline v1::algorithms
