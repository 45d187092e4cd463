#include "algorithms/scratch.h"

#include <array>

namespace c10d::inline v1::algorithms {
namespace {

struct Slot {
  std::unique_ptr<std::byte[]> bytes;
  std::size_t capacity = 0;
};

thread_local std::array<Slot, static_cast<std::size_t>(ScratchSlot::kCount)> slots;

}  // namespace

Scratch::Scratch(ScratchSlot slot, std::size_t bytes) {
  if (bytes > kRetainBytes) {
    owned_ = std::make_unique_for_overwrite<std::byte[]>(bytes);
    span_ = {owned_.get(), bytes};
    return;
  }
  Slot& s = slots[static_cast<std::size_t>(slot)];
  if (s.capacity < bytes) {
    s.bytes = std::make_unique_for_overwrite<std::byte[]>(bytes);
    s.capacity = bytes;
  }
  span_ = {s.bytes.get(), bytes};
}

}  // namespace c10d::inline v1::algorithms
