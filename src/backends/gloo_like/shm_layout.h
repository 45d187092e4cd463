// The shared-memory layout of the TCP backend's same-host channel (shm_transport.h draws it):
// a segment per rank, holding its header and one incoming ring per other same-host rank, and the
// messages in a ring. Host byte order (little-endian, checked at compile time): segments never
// leave the host. Set-up meets through the store under "<group>/shm/<N>/" (N: the set-up's
// number, backends/common/setup_watch.h): host/<rank> (the host key), segment/<rank> (the
// segment's name), cma/<rank> (one character per rank, '1' for each peer whose single-copy
// messages this rank can read, shm_cma.cc), mapped/<rank> (every peer's segment is mapped).
//
// A message header is checked before it is used (check_message_header): the ring is writable by
// another process, so a header whose magic, version, sequence, kind or length is wrong fails the
// channel, and nothing is allocated for the length a header claims (shm_rings.cc).
//
// Kinds of message (MessageHeader::kind): kData, the payload follows in the ring; kSingleCopy, a
// descriptor of a payload the receiver copies straight out of the sender's memory
// (process_vm_readv: pid, address and bytes; nothing follows in the ring), allowed only from a
// peer this rank said it can read (set-up's probe, shm_cma.cc); kAck, the receiver's answer to a
// kSingleCopy message (`acked`: its sequence number; `status`: 0 once copied or dropped, else the
// errno of the copy that failed), after which the sender's request completes.
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
// Version 3 added `closed`; 4 the slots after the rings; 5 a message's call and the segment's
// posted call; 6 the root in the call (backends/common/fingerprint.h: pack_call), and the posted
// tag without lane.
inline constexpr std::uint32_t kVersion = 6;
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
  // Where a peer reads cma_probe_value in this process with process_vm_readv at set-up, to learn
  // whether it may copy single-copy messages out of this process (shm_cma.cc); 0: this rank
  // sends none (C10D_SHM_CMA=0).
  std::uint64_t cma_probe_address;
  std::uint64_t cma_probe_value;
  alignas(64) std::atomic<std::uint32_t> doorbell;
  alignas(64) std::atomic<std::uint32_t> sleepers;
  // Set (release) by the owner as it closes its transport in order: a process that exits after
  // that has finished, not failed (ShmTransport::Impl::lost_peer).
  alignas(64) std::atomic<std::uint32_t> closed;
  // The op tag (transport::lane_op_tag) and call (transport.h: Calls) of the last collective this
  // rank posted a message or a receive of (call 0: none yet), set by the owner as it posts, as a
  // seqlock: the tag kWritingTag, the call, then the tag. A peer whose shared-slot round for the
  // same tag waits for this rank reads them (tag, call, tag again, so a torn pair is not taken):
  // this rank runs that op as messages while the peer runs it in the slots, so with another call
  // they called different collectives (shm_slots.cc).
  alignas(64) std::atomic<std::uint64_t> posted_tag;
  std::atomic<std::uint64_t> posted_call;
};
// SegmentHeader::posted_tag while its call changes: no op's tag (it has the user bit and a group
// id above transport::kMaxGroups).
inline constexpr std::uint64_t kWritingTag = ~std::uint64_t{0};
static_assert(sizeof(SegmentHeader) <= kSegmentHeaderBytes);
static_assert(offsetof(SegmentHeader, doorbell) == 64 && offsetof(SegmentHeader, sleepers) == 128 &&
              offsetof(SegmentHeader, closed) == 192 && offsetof(SegmentHeader, posted_tag) == 256);

// A ring is transport/shm_ring.h's: head at +0, tail at +64; its writer-waiting word (+72) stays
// 0 here, as a reader rings the writer's doorbell after every read it makes anyway.
using RingHeader = transport::ShmRingHeader;
static_assert(kRingHeaderBytes == transport::kShmRingHeaderBytes);

enum MessageKind : std::uint16_t { kData = 0, kSingleCopy = 1, kAck = 2 };

struct MessageHeader {
  std::uint32_t magic = kMessageMagic;
  std::uint32_t version = kVersion;
  std::uint64_t tag = 0;
  std::uint64_t bytes = 0;     // payload bytes (kData: padded to 64 in the ring; kAck: 0)
  std::uint64_t sequence = 0;  // per ordered pair of ranks, from 0, every kind counted
  std::uint64_t call = 0;      // kData, kSingleCopy: transport::Call of the message; 0 unchecked
  std::uint64_t address = 0;   // kSingleCopy: where its `bytes` bytes start there
  std::uint64_t acked = 0;     // kAck: the sequence number of the kSingleCopy message answered
  std::int32_t pid = 0;        // kSingleCopy: the sender's process
  std::uint16_t kind = kData;
  std::uint16_t status = 0;  // kAck: 0, or the errno of the copy that failed (errnos fit)
};
static_assert(sizeof(MessageHeader) == kMessageHeaderBytes && offsetof(MessageHeader, call) == 32);

// Where ring `i` of a segment with `ring_bytes` rings starts.
constexpr std::size_t ring_offset(std::size_t i, std::size_t ring_bytes) {
  return kSegmentHeaderBytes + i * (kRingHeaderBytes + ring_bytes);
}

constexpr std::uint64_t padded(std::uint64_t n) { return (n + 63) & ~std::uint64_t{63}; }

// A segment's slots, after its rings (ShmTransport::shared_slots, shm_slots.cc): two, which its
// owner's rounds use in turn, each a SlotHeader and kSlotBytes of payload. The owner writes the
// payload and the header, then `round` (release); peers only read them. A slot is rewritten two
// rounds later, by which time every peer has read it: the owner's round k + 2 starts after its
// round k + 1, which waited for every peer to publish k + 1, which each did after reading k.
inline constexpr std::size_t kSlotBytes = 4096;
// Half a cache line: a payload of up to 32 bytes shares the header's line, so a reader's one
// miss brings both.
inline constexpr std::size_t kSlotHeaderBytes = 32;
// A slot's room, header and payload, in whole cache lines.
inline constexpr std::size_t kSlotStride = padded(kSlotHeaderBytes + kSlotBytes);
inline constexpr std::size_t kSlots = 2;

struct SlotHeader {
  std::atomic<std::uint64_t> round;  // 1 + the round the slot holds; 0 before the first
  std::uint64_t tag;                 // the op's tag (transport::make_tag)
  std::uint64_t check;               // what the op is (transport::SharedSlots::gather)
  std::uint64_t bytes;               // of payload, at most kSlotBytes
};
static_assert(sizeof(SlotHeader) <= kSlotHeaderBytes);

// Where slot `i` of a segment of `rings` rings of `ring_bytes` starts.
constexpr std::size_t slot_offset(std::size_t i, std::size_t rings, std::size_t ring_bytes) {
  return ring_offset(rings, ring_bytes) + i * kSlotStride;
}

// What a peer's message headers may say besides the layout's limits.
struct HeaderRules {
  bool single_copy = false;  // kSingleCopy messages are allowed (this rank can read the peer)
  std::int32_t pid = 0;      // the peer's process, as its segment says
};

// What is wrong with a message header read from a ring, given the sequence number the next
// message must carry: empty when nothing is. Pure, never throws.
inline std::string check_message_header(const MessageHeader& h, std::uint64_t sequence,
                                        const HeaderRules& rules = {}) {
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
  switch (h.kind) {
    case kData:
      return "";
    case kSingleCopy:
      if (!rules.single_copy) {
        return "a single-copy message, which this rank does not take from it (set-up's probe)";
      }
      if (h.pid != rules.pid) {
        return fmt::format("a single-copy message from pid {}, not the peer's pid {}", h.pid,
                           rules.pid);
      }
      if (h.bytes == 0 || h.address == 0 || h.address > ~std::uint64_t{0} - h.bytes) {
        return fmt::format("a single-copy message of {} bytes at {:#x}", h.bytes, h.address);
      }
      return "";
    case kAck:
      if (h.bytes != 0) return fmt::format("an acknowledgement of {} bytes", h.bytes);
      return "";
    default:
      return fmt::format("a message of kind {}", h.kind);
  }
}

}  // namespace c10d::inline v1::gloo_like::shm
