// The shared-memory layout of the TCP backend's same-host channel (shm_transport.h draws it):
// a segment per rank, holding its header and one incoming ring per other same-host rank, and the
// messages in a ring. Host byte order (little-endian, checked at compile time): segments never
// leave the host. Set-up meets through the store under "<group>/shm/<N>/" (N: the set-up's
// number, backends/common/setup_watch.h): host/<rank> (the host key), segment/<rank> (the
// segment's name), mapped/<rank> (every peer's segment is mapped).
//
// A message header is checked before it is used (check_message_header): the ring is writable by
// another process, so a header whose magic, version, sequence or length is wrong fails the
// channel, and nothing is allocated for the length a header claims (shm_rings.cc).
#pragma once

#include <fmt/format.h>

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "transport/shm_ring.h"

namespace c10d::inline v1::gloo_like::shm {

static_assert(std::endian::native == std::endian::little, "shared memory layout: little-endian");

inline constexpr std::uint32_t kSegmentMagic = 0x4d533143;  // "C1SM"
inline constexpr std::uint32_t kMessageMagic = 0x48533143;  // "C1SH"
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::size_t kSegmentHeaderBytes = 4096;
inline constexpr std::size_t kRingHeaderBytes = 128;
inline constexpr std::size_t kMessageHeaderBytes = 64;
// A message header claiming more is refused (the same bound as a TCP frame's).
inline constexpr std::uint64_t kMaxMessageBytes = std::uint64_t{1} << 40;

struct SegmentHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t rank;
  std::uint32_t rings;
  std::uint64_t ring_bytes;
  std::int32_t pid;
  alignas(64) std::atomic<std::uint32_t> doorbell;
  alignas(64) std::atomic<std::uint32_t> sleepers;
};
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes);
static_assert(offsetof(SegmentHeader, doorbell) == 64 && offsetof(SegmentHeader, sleepers) == 128);

// A ring is transport/shm_ring.h's: head at +0, tail at +64; its writer-waiting word (+72) stays
// 0 here, as a reader rings the writer's doorbell after every read it makes anyway.
using RingHeader = transport::ShmRingHeader;
static_assert(kRingHeaderBytes == transport::kShmRingHeaderBytes);

struct MessageHeader {
  std::uint32_t magic = kMessageMagic;
  std::uint32_t version = kVersion;
  std::uint64_t tag = 0;
  std::uint64_t bytes = 0;     // payload bytes; the payload is padded to 64 in the ring
  std::uint64_t sequence = 0;  // per ordered pair of ranks, from 0
  std::byte pad[32] = {};
};
static_assert(sizeof(MessageHeader) == kMessageHeaderBytes);

constexpr std::uint64_t padded(std::uint64_t n) { return (n + 63) & ~std::uint64_t{63}; }

// Where ring `i` of a segment with `ring_bytes` rings starts.
constexpr std::size_t ring_offset(std::size_t i, std::size_t ring_bytes) {
  return kSegmentHeaderBytes + i * (kRingHeaderBytes + ring_bytes);
}

// What is wrong with a message header read from a ring, given the sequence number the next
// message must carry: empty when nothing is. Pure, never throws.
inline std::string check_message_header(const MessageHeader& h, std::uint64_t sequence) {
  if (h.magic != kMessageMagic || h.version != kVersion) {
    return fmt::format("magic {:#x} version {} (expected {:#x} version {})", h.magic, h.version,
                       kMessageMagic, kVersion);
  }
  if (h.sequence != sequence) {
    return fmt::format("sequence number {} where {} comes next", h.sequence, sequence);
  }
  if (h.bytes > kMaxMessageBytes) {
    return fmt::format("a message of {} bytes, over the limit of {}", h.bytes, kMaxMessageBytes);
  }
  return "";
}

}  // namespace c10d::inline v1::gloo_like::shm
