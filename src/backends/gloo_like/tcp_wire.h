// Wire formats of the TCP transport: the handshake each connection opens with, and the message
// frame. Pure functions over bytes, no sockets.
//
// Handshake frame (little-endian):
//   +-------------+-------------+----------------+----------+---------------+-------------+
//   | magic u32   | version u16 | world_size u32 | rank u32 | name_len u32  | name bytes  |
//   | "C10T"      | 2           |                |          | <= 1024       | group name  |
//   +-------------+-------------+----------------+----------+---------------+-------------+
// Version 2: two connections per pair of ranks, one per direction (the rank that connected
// writes, the one that accepted reads); version 1 had one connection carrying both.
// Message frame, after the handshake, from the connecting rank to the accepting one:
//   +----------+-------------+-----------------+
//   | tag u64  | length u64  | length bytes    |
//   +----------+-------------+-----------------+
// Goodbye: a message frame with tag kGoodbyeTag and length 0, the last frame of an orderly close.
// Abort notice: the last frame of a transport that aborted, tag kAbortTag, whose payload is
//   +---------------+------------------------------------------+
//   | lost_rank i32 | message bytes (<= kMaxAbortMessageBytes)  |
//   +---------------+------------------------------------------+
// lost_rank is the rank whose loss caused the abort (-1: none, e.g. a timeout or abort()), so a
// rank that hears of a failure second-hand still names the rank that failed first.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace c10d::gloo_like {

// No op uses this tag: it has the user bit and a group id above transport::kMaxGroups.
inline constexpr std::uint64_t kGoodbyeTag = ~std::uint64_t{0};
inline constexpr std::uint64_t kAbortTag = ~std::uint64_t{0} - 1;
inline constexpr std::size_t kMaxAbortMessageBytes = 4096;

struct AbortNotice {
  std::int32_t lost_rank = -1;
  std::string message;
};
// The whole frame (header and payload); the message is cut to kMaxAbortMessageBytes.
std::vector<std::byte> encode_abort_notice(const AbortNotice& notice);
// The payload (after the header); at least 4 bytes.
AbortNotice decode_abort_notice(std::span<const std::byte> payload);

// The handshake frame above.
struct Handshake {
  static constexpr std::uint32_t kMagic = 0x54303143;  // "C10T" as little-endian bytes
  static constexpr std::uint16_t kVersion = 2;
  static constexpr std::size_t kFixedBytes = 18;  // up to and including name_len
  static constexpr std::uint32_t kMaxNameBytes = 1024;

  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint32_t world_size = 0;
  std::uint32_t rank = 0;
  std::string group;
};

std::vector<std::byte> encode_handshake(const Handshake& h);
// Decodes the fixed part (kFixedBytes); fills everything but `group` and returns name_len.
std::uint32_t decode_handshake_fixed(std::span<const std::byte, Handshake::kFixedBytes> bytes,
                                     Handshake& out);
// Why `theirs` cannot talk to `mine` (magic, version, world size or group differ), naming both
// sides' values; nullopt when they match. Ranks are checked by the caller.
std::optional<std::string> handshake_mismatch(const Handshake& mine, const Handshake& theirs);

// Little-endian integers.
template <typename T>
void put_le(std::vector<std::byte>& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) out.push_back(std::byte((v >> (8 * i)) & 0xff));
}
template <typename T>
T get_le(const std::byte* p) {
  T v = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) v |= static_cast<T>(static_cast<T>(p[i]) << (8 * i));
  return v;
}

}  // namespace c10d::gloo_like
