// Wire formats of the TCP transport: the handshake each connection opens with, and the message
// frame. Pure functions over bytes, no sockets.
//
// Handshake, version 6 (little-endian). Connector C is the rank that connects (and will write on
// the connection), acceptor A the rank that accepted (and will read). Both prove they know the
// job's key by HMAC-SHA256 over fresh nonces from both sides; the key never crosses the wire.
// Every handshake frame from either side opens with the same 6 bytes in every version, so a
// peer of another version can always be told which one it speaks:
//   +-------------+-------------+
//   | magic u32   | version u16 |
//   | "C10T"      | 5           |
//   +-------------+-------------+
//  1. C -> A  Hello:     magic, version, nonce_c (32 random bytes). Says nothing of the job.
//  2. A -> C  Challenge: magic, version, nonce_a (32 random bytes), the same 38-byte layout.
//     A answers a Hello of the wrong magic with nothing (it logs and closes), and one of another
//     version with a version notice (its own magic and version, 6 bytes) before it closes.
//  3. C -> A  Proof:
//   +----------------+----------+-------------------+--------------+------------+-----------+
//   | world_size u32 | rank u32 | expected_rank u32 | name_len u32 | name bytes | mac_c     |
//   |                | C's      | A's, as C knows it| <= 1024      | group name | 32 bytes  |
//   +----------------+----------+-------------------+--------------+------------+-----------+
//     mac_c = HMAC-SHA256(key, "c10d-transport-connect" || nonce_c || nonce_a || the bytes
//     before mac_c). A checks it in constant time; a bad one is closed without a word.
//  4. A -> C  Accept:
//   +----------------+----------+-----------+--------------+------------+-----------+
//   | world_size u32 | rank u32 | status u8 | name_len u32 | name bytes | mac_a     |
//   |                | A's      |           | <= 1024      | group name | 32 bytes  |
//   +----------------+----------+-----------+--------------+------------+-----------+
//     mac_a = HMAC-SHA256(key, "c10d-transport-accept" || nonce_a || nonce_c || the bytes
//     before mac_a). status (AcceptStatus): 0 accepted, else why A refused C; A closes a
//     connection it refused. C checks mac_a, then the fields, and names both sides' values.
// The key is HMAC-SHA256(secret, "c10d-transport-key"), the secret being the store's token
// (C10D_STORE_TOKEN or an option), else a random job secret kept in the store (tcp_handshake.h).
// Version 5 had the same handshake and frames, with calls that left out a rooted op's root;
// version 4 the same handshake, but message frames without the call; version 3 had the
// same frames as 4, but its ranks made every connection during set-up and sent their last frame
// forward only; version 2 exchanged world size, rank and group name in the
// clear, with no proof; version 1 had one connection per pair of ranks instead of one per
// direction.
//
// Message frame, after the handshake, from the connecting rank to the accepting one:
//   +----------+-------------+-----------+-----------------+
//   | tag u64  | length u64  | call u64  | length bytes    |
//   +----------+-------------+-----------+-----------------+
// `call` is the call of the collective the message belongs to (transport.h: Calls), 0 for
// point-to-point and control messages, goodbyes and abort notices: a receive compares it with its
// own before it takes the payload, and one that differs fails the receive (CallMismatch) and
// drops the payload. The reader checks each header before it uses it (decode_frame_header): a
// length over kMaxMessageBytes, or a reserved tag with a length its frame never has, is a fault
// that ends the connection; nothing is allocated for the length a header claims (see
// tcp_reader.cc). Goodbye: a message frame with tag kGoodbyeTag and length 0, the last frame of an
// orderly close. Abort notice: the last frame of a transport that aborted, tag kAbortTag, whose
// payload is
//   +---------------+------------------------------------------+
//   | lost_rank i32 | message bytes (<= kMaxAbortMessageBytes)  |
//   +---------------+------------------------------------------+
// lost_rank is the rank whose loss caused the abort (-1: none, e.g. abort()), so a rank that
// hears of a failure second-hand still names the rank that failed first; a rank that made no
// progress (an op timed out waiting for it, Transport::find_stalled) is sent as -2 - rank.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/auth.h"

namespace c10d::inline v1::gloo_like {

// No op uses this tag: it has the user bit and a group id above transport::kMaxGroups.
inline constexpr std::uint64_t kGoodbyeTag = ~std::uint64_t{0};
inline constexpr std::uint64_t kAbortTag = ~std::uint64_t{0} - 1;
inline constexpr std::size_t kMaxAbortMessageBytes = 4096;

// AbortNotice::lost_rank when the abort blames no rank.
inline constexpr std::int32_t kNoLostRank = -1;

struct AbortNotice {
  std::int32_t lost_rank = kNoLostRank;
  std::string message;
  bool stalled = false;  // lost_rank did not die: it made no progress
};
// The whole frame (header and payload); the message is cut to kMaxAbortMessageBytes.
std::vector<std::byte> encode_abort_notice(const AbortNotice& notice);
// The payload (after the header), of any length: shorter than 4 bytes gives lost_rank -1 and no
// message; the message is cut to kMaxAbortMessageBytes, its control characters made '?'. Reads
// nothing outside `payload`. lost_rank comes back as -1 or a rank >= 0 (-2 - rank gives that rank
// with `stalled`), not checked against any group: the reader does that.
AbortNotice decode_abort_notice(std::span<const std::byte> payload);
// What rank `self` of a group of `world_size` ranks takes from a notice a peer sent (or
// recorded in the store), and passes on in its own: a lost rank outside the group, or `self`,
// is a peer's garbage and blames no one (-1, not stalled); a rank of the group that made no
// progress stays one, so that every rank the failure reaches blames it alike.
AbortNotice heard_abort_notice(AbortNotice notice, int self, int world_size);

// The failure record a failing rank leaves in the store (<group>/failure) for peers whose
// connection to it ended mid-frame, or that have none: "<lost>\n<from>\n<what>", <lost> the
// notice's lost rank as on the wire (-1, a rank, or -2 - rank for one that made no progress),
// <from> the rank that recorded it, <what> its notice's message. A reader says what the abort
// notice of rank <from> would have made it say (heard_abort_notice, then "peer rank ...
// (rank <from> reports: <what>)"), whether or not it has a connection to that rank.
struct FailureRecord {
  AbortNotice notice;
  std::int32_t from = -1;
};
std::string encode_failure_record(const FailureRecord& record);
// The record read back; nullopt when its first two lines are not decimal i32s (no sign but '-',
// no spaces, nothing after them), <from> is negative, or there is no third line. The message is
// kept to kMaxAbortMessageBytes, its control characters made '?'.
std::optional<FailureRecord> decode_failure_record(std::string_view text);

// ---- the handshake ----

inline constexpr std::uint32_t kHandshakeMagic = 0x54303143;  // "C10T" as little-endian bytes
inline constexpr std::uint16_t kHandshakeVersion = 6;
inline constexpr std::size_t kPreambleBytes = 6;  // magic and version
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kGreetingBytes = kPreambleBytes + kNonceBytes;  // Hello, Challenge
inline constexpr std::uint32_t kMaxGroupBytes = 1024;
inline constexpr std::size_t kProofFixedBytes = 16;   // up to and including name_len
inline constexpr std::size_t kAcceptFixedBytes = 13;  // up to and including name_len

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using TransportKey = core::Mac;

// The nonces of one handshake.
struct Nonces {
  Nonce connector{};
  Nonce acceptor{};
};

// Who a side of the handshake says it is.
struct Identity {
  std::uint32_t world_size = 0;
  std::uint32_t rank = 0;
  std::string group;
};

struct Proof {
  Identity connector;
  std::uint32_t expected_rank = 0;  // the rank C meant to reach
};

enum class AcceptStatus : std::uint8_t {
  kAccepted = 0,
  kWorldSizeMismatch = 1,
  kGroupMismatch = 2,
  kWrongRank = 3,  // A is not the rank C expected
  kBadRank = 4,    // C's rank is A's own, or outside the world
  kDuplicate = 5,  // A already holds a proven connection from C's rank
};
inline constexpr std::uint8_t kMaxAcceptStatus = 5;

struct Accept {
  Identity acceptor;
  AcceptStatus status = AcceptStatus::kAccepted;
};

enum class HandshakeCode : std::uint8_t {
  kOk,
  kShort,         // more bytes are needed: `bytes` says how many in all, at least
  kBadMagic,      // value = the magic
  kBadVersion,    // value = the peer's version
  kGroupTooLong,  // value = the claimed name length
  kBadMac,        // the frame is not signed with this key over these nonces
  kBadStatus,     // value = the status byte (an Accept whose MAC checked out)
};

// What a decoder made of the bytes it was given.
struct HandshakeDecode {
  HandshakeCode code = HandshakeCode::kOk;
  std::size_t bytes = 0;    // kOk: the frame's size; kShort: the bytes needed to go on
  std::uint64_t value = 0;  // see HandshakeCode
  bool ok() const { return code == HandshakeCode::kOk; }
};

// "bad magic 0x12345678, expected 0x54303143 ("C10T")", for logs and errors.
std::string describe(const HandshakeDecode& d);

// 32 bytes from the CSPRNG.
Nonce new_nonce();
// HMAC-SHA256(secret, "c10d-transport-key").
TransportKey derive_transport_key(std::string_view secret);

// Hello and Challenge (the same layout).
std::vector<std::byte> encode_greeting(const Nonce& nonce);
// Magic and this version alone: the answer to a Hello of another version.
std::vector<std::byte> encode_version_notice();
std::vector<std::byte> encode_proof(const Proof& proof, const TransportKey& key,
                                    const Nonces& nonces);
std::vector<std::byte> encode_accept(const Accept& accept, const TransportKey& key,
                                     const Nonces& nonces);

// Decoders: pure, never throw, never read past `in`, never allocate before a length is checked
// against its limit. A frame is decoded from the start of `in`; bytes after it are left alone.
// decode_greeting reports kBadMagic as soon as 4 bytes are in and kBadVersion once 6 are (then
// bytes = 6: a version notice ends there).
HandshakeDecode decode_greeting(std::span<const std::byte> in, Nonce& nonce);
// kBadMac unless the frame is signed with `key` over `nonces`; `out` is filled only on kOk.
HandshakeDecode decode_proof(std::span<const std::byte> in, const TransportKey& key,
                             const Nonces& nonces, Proof& out);
HandshakeDecode decode_accept(std::span<const std::byte> in, const TransportKey& key,
                              const Nonces& nonces, Accept& out);

// A's verdict on a proven Proof: world size, group, the rank C expected, C's rank. Duplicates
// are the caller's to find (it knows its connections).
AcceptStatus judge_proof(const Identity& acceptor, const Proof& proof);
// C's verdict on a proven Accept: A's status, then A's fields checked again on this side.
AcceptStatus judge_accept(const Identity& connector, std::uint32_t expected_rank,
                          const Accept& accept);
// Why the handshake failed, from A's side (about C) or from C's (about A), naming both sides'
// values (e.g. group mismatch: peer is in group "green", this rank is in group "blue").
std::string refusal_at_acceptor(AcceptStatus status, const Identity& acceptor, const Proof& proof);
std::string refusal_at_connector(AcceptStatus status, const Identity& connector,
                                 std::uint32_t expected_rank, const Identity& acceptor);

// ---- Message frame headers ----

inline constexpr std::size_t kFrameHeaderBytes = 24;
// A data frame claiming more is refused before anything is read or allocated for it.
inline constexpr std::uint64_t kMaxMessageBytes = std::uint64_t{1} << 40;

enum class FrameKind : std::uint8_t { kData, kGoodbye, kAbort };

struct FrameHeader {
  FrameKind kind = FrameKind::kData;
  std::uint64_t tag = 0;
  std::uint64_t length = 0;  // payload bytes after the header
  std::uint64_t call = 0;    // transport::Call of the message; 0: unchecked
};

// What makes a header one this protocol never sends.
enum class FrameFault : std::uint8_t {
  kNone,
  kTooLong,             // a data frame longer than kMaxMessageBytes
  kGoodbyeWithPayload,  // kGoodbyeTag with a length other than 0
  kAbortLength,         // kAbortTag with a length outside [4, 4 + kMaxAbortMessageBytes]
};

std::array<std::byte, kFrameHeaderBytes> encode_frame_header(std::uint64_t tag,
                                                             std::uint64_t length,
                                                             std::uint64_t call = 0);
// Decodes the 24 bytes of a header: `out` gets its tag, length and call either way, and its kind
// when the result is kNone. Pure; called by the read side for every frame.
inline FrameFault decode_frame_header(std::span<const std::byte, kFrameHeaderBytes> bytes,
                                      FrameHeader& out);
// `fault` of `header` as text naming the values ("length 2199023255552 of the frame on tag ...
// is over the limit of 1099511627776 bytes").
std::string describe_frame_fault(FrameFault fault, const FrameHeader& header);

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

inline FrameFault decode_frame_header(std::span<const std::byte, kFrameHeaderBytes> bytes,
                                      FrameHeader& out) {
  out.tag = get_le<std::uint64_t>(bytes.data());
  out.length = get_le<std::uint64_t>(bytes.data() + 8);
  out.call = get_le<std::uint64_t>(bytes.data() + 16);
  out.kind = FrameKind::kData;
  if (out.tag == kGoodbyeTag) {
    if (out.length != 0) return FrameFault::kGoodbyeWithPayload;
    out.kind = FrameKind::kGoodbye;
  } else if (out.tag == kAbortTag) {
    if (out.length < 4 || out.length > 4 + kMaxAbortMessageBytes) return FrameFault::kAbortLength;
    out.kind = FrameKind::kAbort;
  } else if (out.length > kMaxMessageBytes) {
    return FrameFault::kTooLong;
  }
  return FrameFault::kNone;
}

}  // namespace c10d::inline v1::gloo_like
