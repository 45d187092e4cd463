// The ICI fabric's shared-memory layout: one POSIX shared-memory segment per chip, holding the
// chip's header and one ring buffer per incoming direction. Every process (or thread) that runs
// a chip creates its own segment and maps those of its torus neighbours, so chips exchange bytes
// only with neighbours; far messages are forwarded hop by hop by each chip's router thread.
//
// Segment "/c10d-ici-<pid namespace>-<pid>-<start time>-<token>-<rank>", mode 0600 (named after
// its owner process as transport/shared_memory.h says; the token comes from rank 0 through the
// store; the name is unlinked once every chip has mapped its neighbours, and a set-up first
// reclaims the segments of chips whose process is gone):
//
//   offset 0      ChipHeader (4096 bytes)
//                 +0   u32 magic "C1IS"       +4  u32 version (2)
//                 +8   i32 rank               +12 i32 world size
//                 +16  u32 rings (2 x axes)   +20 u32 ring bytes (a power of two)
//                 +24  i32 pid                +28 atomic u32 state (0 running, 1 leaving,
//                                                 2 aborted: the notice below is valid)
//                 +64  atomic u32 doorbell (own cache line): bumped by every writer, futex word
//                 +128 atomic u32 sleeping: 1 while the router waits on the doorbell
//                 +192 i32 abort origin rank, u32 reason length, then the reason (<= 1024 bytes)
//   4096 + k * (128 + ring bytes)   ring k: the packets that reach this chip by hop k
//                                   (topology.h: axis * 2 + (0 for +, 1 for -)), written only by
//                                   the neighbour one hop back, read only by this chip's router
//                 +0   atomic u64 head: bytes consumed (the reader's cache line)
//                 +64  atomic u64 tail: bytes produced (the writer's cache line)
//                 +72  atomic u32 writer waiting: set by a writer that found the ring full
//                 +128 data: packets back to back, wrapping at the ring size
//
// A packet is a PacketHeader (128 bytes, below) and then its payload, padded to 8 bytes:
//
//   +0  u32 magic "C1IP"   +4  u16 version (2)    +6  u16 hops in the route
//   +8  i32 source rank    +12 i32 destination rank
//   +16 u64 tag            +24 u64 message sequence (per source -> destination pair)
//   +32 u64 message bytes  +40 u64 offset of this payload in the message
//   +48 u32 payload bytes  +52 u32 index of the hop this packet is crossing
//   +56 f64 head           +64 f64 tail  (virtual times at the end of the hop: link_model.h)
//   +72 u64 call           the call of the collective the message belongs to (transport.h:
//                          Calls), 0 unchecked: the receive compares it with its own
//   +80 u8 route[48]       the hops from the source, one byte each
//
// Integers are in the host's byte order, which is little-endian (checked at compile time): the
// segments never leave the host. Limits are checked before use: a packet whose magic, version,
// sizes or route do not fit fails the fabric (check_packet reports it without throwing), and so
// does one that is not the next of its message (a first packet twice, or an offset other than
// the bytes delivered so far); nothing is allocated for the message bytes a packet claims.
#pragma once

#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "transport/shm_ring.h"

namespace c10d::inline v1::tpu_ici {

static_assert(std::endian::native == std::endian::little, "the ICI fabric assumes little-endian");

inline constexpr std::uint32_t kSegmentMagic = 0x53493143;  // "C1IS"
inline constexpr std::uint32_t kPacketMagic = 0x50493143;   // "C1IP"
// Version 2 added the packet's call (its route gave up 8 of its 56 hops); 3 the root in the call
// (backends/common/fingerprint.h: pack_call).
inline constexpr std::uint32_t kLayoutVersion = 3;
inline constexpr std::size_t kChipHeaderBytes = 4096;
inline constexpr std::size_t kRingHeaderBytes = 128;
inline constexpr std::size_t kPacketHeaderBytes = 128;
inline constexpr std::size_t kMaxRouteHops = 48;
inline constexpr std::size_t kMaxReasonBytes = 1024;
inline constexpr std::size_t kDefaultRingBytes = std::size_t{1} << 20;
// The header keeps the ring size in a u32; rings are far smaller than that anyway.
inline constexpr std::size_t kMaxRingBytes = std::size_t{1} << 30;
inline constexpr std::size_t kMaxPayloadBytes = std::size_t{64} << 10;
// A packet whose message claims more is refused (the bound of the TCP transport's frames).
inline constexpr std::uint64_t kMaxMessageBytes = std::uint64_t{1} << 40;

enum ChipState : std::uint32_t { kRunning = 0, kLeaving = 1, kAborted = 2 };

struct ChipHeader {
  std::uint32_t magic;
  std::uint32_t version;
  std::int32_t rank;
  std::int32_t world;
  std::uint32_t rings;
  std::uint32_t ring_bytes;
  std::int32_t pid;
  std::atomic<std::uint32_t> state;
  char pad0[32];
  alignas(64) std::atomic<std::uint32_t> doorbell;
  alignas(64) std::atomic<std::uint32_t> sleeping;
  alignas(64) std::int32_t abort_origin;
  std::uint32_t reason_bytes;
  char reason[kMaxReasonBytes];
};
static_assert(sizeof(ChipHeader) <= kChipHeaderBytes);
static_assert(offsetof(ChipHeader, doorbell) == 64 && offsetof(ChipHeader, sleeping) == 128 &&
              offsetof(ChipHeader, abort_origin) == 192);
static_assert(std::atomic<std::uint64_t>::is_always_lock_free &&
              std::atomic<std::uint32_t>::is_always_lock_free);

// A ring is transport/shm_ring.h's (drawn above: head, tail, writer waiting, data).
using RingHeader = transport::ShmRingHeader;
static_assert(kRingHeaderBytes == transport::kShmRingHeaderBytes);

struct PacketHeader {
  std::uint32_t magic = kPacketMagic;
  std::uint16_t version = kLayoutVersion;
  std::uint16_t hops = 0;
  std::int32_t src = 0;
  std::int32_t dst = 0;
  std::uint64_t tag = 0;
  std::uint64_t seq = 0;
  std::uint64_t message_bytes = 0;
  std::uint64_t offset = 0;
  std::uint32_t payload_bytes = 0;
  std::uint32_t hop_index = 0;
  double head = 0;
  double tail = 0;
  std::uint64_t call = 0;
  std::uint8_t route[kMaxRouteHops] = {};
};
static_assert(sizeof(PacketHeader) == kPacketHeaderBytes && offsetof(PacketHeader, head) == 56 &&
              offsetof(PacketHeader, call) == 72 && offsetof(PacketHeader, route) == 80);

// Callers bound ring_bytes by kMaxRingBytes and rings by 2 x 8 axes, so this cannot overflow.
inline std::size_t segment_bytes(std::size_t rings, std::size_t ring_bytes) {
  return kChipHeaderBytes + rings * (kRingHeaderBytes + ring_bytes);
}
inline std::size_t padded(std::size_t bytes) { return (bytes + 7) & ~std::size_t{7}; }
inline std::size_t packet_bytes(const PacketHeader& h) {
  return kPacketHeaderBytes + padded(h.payload_bytes);
}

// Checks a packet header read from a ring against the fabric's limits: empty when it is sound,
// else what is wrong. Never throws.
inline std::string check_packet(const PacketHeader& h, int world, std::size_t ring_bytes) {
  if (h.magic != kPacketMagic) return "bad packet magic";
  if (h.version != kLayoutVersion) return "unknown packet version " + std::to_string(h.version);
  if (h.src < 0 || h.src >= world || h.dst < 0 || h.dst >= world) return "rank out of range";
  if (h.hops > kMaxRouteHops || h.hop_index >= h.hops) return "route out of range";
  if (h.payload_bytes > kMaxPayloadBytes || packet_bytes(h) > ring_bytes) return "payload too big";
  if (h.message_bytes > kMaxMessageBytes) return "message too big";
  if (h.offset > h.message_bytes || h.payload_bytes > h.message_bytes - h.offset) {
    return "payload outside its message";
  }
  return "";
}

}  // namespace c10d::inline v1::tpu_ici
