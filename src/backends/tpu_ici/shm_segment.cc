#include "backends/tpu_ici/shm_segment.h"

#include <algorithm>
#include <cstring>

namespace c10d::inline v1::tpu_ici {

bool ByteRing::has_room(std::size_t bytes) const {
  const std::uint64_t head = header_->head.load(std::memory_order_acquire);
  const std::uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  return capacity_ - (tail - head) >= bytes;
}

void ByteRing::copy_in(std::uint64_t at, const void* src, std::size_t n) {
  const std::size_t pos = static_cast<std::size_t>(at % capacity_);
  const std::size_t first = std::min(n, capacity_ - pos);
  std::memcpy(data_ + pos, src, first);
  if (first < n) std::memcpy(data_, static_cast<const std::byte*>(src) + first, n - first);
}

void ByteRing::copy_out(std::uint64_t at, void* dst, std::size_t n) const {
  const std::size_t pos = static_cast<std::size_t>(at % capacity_);
  const std::size_t first = std::min(n, capacity_ - pos);
  std::memcpy(dst, data_ + pos, first);
  if (first < n) std::memcpy(static_cast<std::byte*>(dst) + first, data_, n - first);
}

void ByteRing::write(const PacketHeader& h, std::span<const std::byte> payload) {
  const std::uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  copy_in(tail, &h, sizeof(h));
  if (!payload.empty()) copy_in(tail + sizeof(h), payload.data(), payload.size());
  header_->tail.store(tail + packet_bytes(h), std::memory_order_release);
}

bool ByteRing::peek(PacketHeader& h) const {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  const std::uint64_t tail = header_->tail.load(std::memory_order_acquire);
  if (tail - head < sizeof(PacketHeader)) return false;
  copy_out(head, &h, sizeof(h));
  return true;
}

void ByteRing::read_payload(std::size_t from, std::span<std::byte> out) const {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  if (!out.empty()) copy_out(head + sizeof(PacketHeader) + from, out.data(), out.size());
}

void ByteRing::consume(const PacketHeader& h) {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  header_->head.store(head + packet_bytes(h), std::memory_order_release);
}

bool ByteRing::empty() const {
  return header_->tail.load(std::memory_order_acquire) ==
         header_->head.load(std::memory_order_relaxed);
}

}  // namespace c10d::inline v1::tpu_ici
