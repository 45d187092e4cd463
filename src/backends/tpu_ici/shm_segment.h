// The ICI fabric's packets (fabric_layout.h) in its rings, which are transport/shm_ring.h's, over
// the shared-memory segments and futexes of transport/shared_memory.h.
//
// Thread-safety: a ring has one writer thread and one reader thread (they may be in different
// processes).
#pragma once

#include <cstddef>
#include <span>

#include "backends/tpu_ici/fabric_layout.h"
#include "transport/shared_memory.h"
#include "transport/shm_ring.h"

namespace c10d::inline v1::tpu_ici {

using transport::futex_wait;
using transport::futex_wake;
using transport::SharedSegment;
using transport::ShmRing;

// Writer: appends packet `h` and its payload (payload.size() == h.payload_bytes), padded, as one
// publication: the reader never sees a header without its payload. Requires room for
// packet_bytes(h).
inline void write_packet(ShmRing& ring, const PacketHeader& h, std::span<const std::byte> payload) {
  ShmRing::Writer w = ring.writer();
  w.write(std::as_bytes(std::span(&h, 1)));
  w.write(payload);
  w.skip(packet_bytes(h) - kPacketHeaderBytes - payload.size());
  w.publish();
}

// Reader: copies the next packet's header out, without consuming it; false when none is there.
inline bool peek_packet(const ShmRing& ring, PacketHeader& h) {
  if (ring.available() < kPacketHeaderBytes) return false;
  ring.peek(0, std::as_writable_bytes(std::span(&h, 1)));
  return true;
}

// Reader: copies out.size() bytes of the peeked packet's payload, from its byte `from`.
inline void read_payload(const ShmRing& ring, std::size_t from, std::span<std::byte> out) {
  ring.peek(kPacketHeaderBytes + from, out);
}

// Reader: drops the peeked packet.
inline void consume_packet(ShmRing& ring, const PacketHeader& h) { ring.consume(packet_bytes(h)); }

}  // namespace c10d::inline v1::tpu_ici
