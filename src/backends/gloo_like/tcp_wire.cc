// Handshake and frame encoding and checking: see tcp_wire.h.
#include "backends/gloo_like/tcp_wire.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

#include "core/parse.h"

namespace c10d::inline v1::gloo_like {

namespace {

constexpr std::string_view kConnectDomain = "c10d-transport-connect";
constexpr std::string_view kAcceptDomain = "c10d-transport-accept";
constexpr std::string_view kKeyDomain = "c10d-transport-key";

std::span<const std::uint8_t> as_u8(std::span<const std::byte> b) {
  return {reinterpret_cast<const std::uint8_t*>(b.data()), b.size()};
}

void put_preamble(std::vector<std::byte>& out) {
  put_le(out, kHandshakeMagic);
  put_le(out, kHandshakeVersion);
}

void put_group(std::vector<std::byte>& out, const std::string& group) {
  // Encoders trust their caller less than their peers: a name over the limit is cut, and the
  // peer then refuses it as a group mismatch naming both.
  const std::size_t n = std::min<std::size_t>(group.size(), kMaxGroupBytes);
  put_le(out, static_cast<std::uint32_t>(n));
  const auto* p = reinterpret_cast<const std::byte*>(group.data());
  out.insert(out.end(), p, p + n);
}

core::Mac frame_mac(const TransportKey& key, std::string_view domain, const Nonce& first,
                    const Nonce& second, std::span<const std::byte> fields) {
  return core::hmac_sha256(key, {core::as_bytes(domain), first, second, as_u8(fields)});
}

void put_mac(std::vector<std::byte>& out, const core::Mac& mac) {
  for (std::uint8_t b : mac) out.push_back(static_cast<std::byte>(b));
}

// The signed part of a Proof or an Accept: `fixed` bytes ending in name_len, the name, then the
// MAC. Checks the length against its limit and the MAC before anything is allocated; on kOk,
// `group` views the name inside `in`.
HandshakeDecode decode_signed(std::span<const std::byte> in, std::size_t fixed,
                              const TransportKey& key, std::string_view domain, const Nonce& first,
                              const Nonce& second, std::string_view& group) {
  if (in.size() < fixed) return {HandshakeCode::kShort, fixed, 0};
  const std::uint32_t name_len = get_le<std::uint32_t>(in.data() + fixed - 4);
  if (name_len > kMaxGroupBytes) return {HandshakeCode::kGroupTooLong, 0, name_len};
  const std::size_t signed_bytes = fixed + name_len;
  const std::size_t total = signed_bytes + core::kMacBytes;
  if (in.size() < total) return {HandshakeCode::kShort, total, 0};
  const core::Mac expected = frame_mac(key, domain, first, second, in.first(signed_bytes));
  if (!core::mac_equal(expected, as_u8(in.subspan(signed_bytes, core::kMacBytes)))) {
    return {HandshakeCode::kBadMac, 0, 0};
  }
  group = {reinterpret_cast<const char*>(in.data() + fixed), name_len};
  return {HandshakeCode::kOk, total, 0};
}

}  // namespace

std::string describe(const HandshakeDecode& d) {
  switch (d.code) {
    case HandshakeCode::kOk:
      return "ok";
    case HandshakeCode::kShort:
      return fmt::format("incomplete: {} bytes needed", d.bytes);
    case HandshakeCode::kBadMagic:
      return fmt::format("bad magic {:#010x}, expected {:#010x} (\"C10T\")", d.value,
                         kHandshakeMagic);
    case HandshakeCode::kBadVersion:
      return fmt::format("handshake version {}, this rank speaks version {}", d.value,
                         kHandshakeVersion);
    case HandshakeCode::kGroupTooLong:
      return fmt::format("group name of {} bytes exceeds the limit of {}", d.value, kMaxGroupBytes);
    case HandshakeCode::kBadMac:
      return "its proof does not check out against this job's key";
    case HandshakeCode::kBadStatus:
      return fmt::format("unknown status {}", d.value);
  }
  return "unknown decode result";
}

Nonce new_nonce() {
  Nonce n;
  core::random_bytes(n);
  return n;
}

TransportKey derive_transport_key(std::string_view secret) {
  return core::hmac_sha256(core::as_bytes(secret), {core::as_bytes(kKeyDomain)});
}

std::vector<std::byte> encode_greeting(const Nonce& nonce) {
  std::vector<std::byte> out;
  put_preamble(out);
  for (std::uint8_t b : nonce) out.push_back(static_cast<std::byte>(b));
  return out;
}

std::vector<std::byte> encode_version_notice() {
  std::vector<std::byte> out;
  put_preamble(out);
  return out;
}

std::vector<std::byte> encode_proof(const Proof& proof, const TransportKey& key,
                                    const Nonces& nonces) {
  std::vector<std::byte> out;
  put_le(out, proof.connector.world_size);
  put_le(out, proof.connector.rank);
  put_le(out, proof.expected_rank);
  put_group(out, proof.connector.group);
  put_mac(out, frame_mac(key, kConnectDomain, nonces.connector, nonces.acceptor, out));
  return out;
}

std::vector<std::byte> encode_accept(const Accept& accept, const TransportKey& key,
                                     const Nonces& nonces) {
  std::vector<std::byte> out;
  put_le(out, accept.acceptor.world_size);
  put_le(out, accept.acceptor.rank);
  out.push_back(static_cast<std::byte>(accept.status));
  put_group(out, accept.acceptor.group);
  put_mac(out, frame_mac(key, kAcceptDomain, nonces.acceptor, nonces.connector, out));
  return out;
}

HandshakeDecode decode_greeting(std::span<const std::byte> in, Nonce& nonce) {
  if (in.size() >= 4 && get_le<std::uint32_t>(in.data()) != kHandshakeMagic) {
    return {HandshakeCode::kBadMagic, 0, get_le<std::uint32_t>(in.data())};
  }
  if (in.size() < kPreambleBytes) return {HandshakeCode::kShort, kPreambleBytes, 0};
  const auto version = get_le<std::uint16_t>(in.data() + 4);
  if (version != kHandshakeVersion) return {HandshakeCode::kBadVersion, kPreambleBytes, version};
  if (in.size() < kGreetingBytes) return {HandshakeCode::kShort, kGreetingBytes, 0};
  for (std::size_t i = 0; i < kNonceBytes; ++i) {
    nonce[i] = static_cast<std::uint8_t>(in[kPreambleBytes + i]);
  }
  return {HandshakeCode::kOk, kGreetingBytes, 0};
}

HandshakeDecode decode_proof(std::span<const std::byte> in, const TransportKey& key,
                             const Nonces& nonces, Proof& out) {
  std::string_view group;
  const HandshakeDecode d = decode_signed(in, kProofFixedBytes, key, kConnectDomain,
                                          nonces.connector, nonces.acceptor, group);
  if (!d.ok()) return d;
  out.connector.world_size = get_le<std::uint32_t>(in.data());
  out.connector.rank = get_le<std::uint32_t>(in.data() + 4);
  out.expected_rank = get_le<std::uint32_t>(in.data() + 8);
  out.connector.group.assign(group);
  return d;
}

HandshakeDecode decode_accept(std::span<const std::byte> in, const TransportKey& key,
                              const Nonces& nonces, Accept& out) {
  std::string_view group;
  const HandshakeDecode d = decode_signed(in, kAcceptFixedBytes, key, kAcceptDomain,
                                          nonces.acceptor, nonces.connector, group);
  if (!d.ok()) return d;
  const auto status = static_cast<std::uint8_t>(in[8]);
  if (status > kMaxAcceptStatus) return {HandshakeCode::kBadStatus, 0, status};
  out.acceptor.world_size = get_le<std::uint32_t>(in.data());
  out.acceptor.rank = get_le<std::uint32_t>(in.data() + 4);
  out.status = static_cast<AcceptStatus>(status);
  out.acceptor.group.assign(group);
  return d;
}

AcceptStatus judge_proof(const Identity& acceptor, const Proof& proof) {
  const Identity& c = proof.connector;
  if (c.world_size != acceptor.world_size) return AcceptStatus::kWorldSizeMismatch;
  if (c.group != acceptor.group) return AcceptStatus::kGroupMismatch;
  if (proof.expected_rank != acceptor.rank) return AcceptStatus::kWrongRank;
  if (c.rank >= acceptor.world_size || c.rank == acceptor.rank) return AcceptStatus::kBadRank;
  return AcceptStatus::kAccepted;
}

AcceptStatus judge_accept(const Identity& connector, std::uint32_t expected_rank,
                          const Accept& accept) {
  if (accept.status != AcceptStatus::kAccepted) return accept.status;
  const Identity& a = accept.acceptor;
  if (a.world_size != connector.world_size) return AcceptStatus::kWorldSizeMismatch;
  if (a.group != connector.group) return AcceptStatus::kGroupMismatch;
  if (a.rank != expected_rank) return AcceptStatus::kWrongRank;
  return AcceptStatus::kAccepted;
}

namespace {

// The messages both sides share: world size and group, said from `self`'s side.
std::string mismatch(AcceptStatus status, const Identity& self, const Identity& peer) {
  if (status == AcceptStatus::kWorldSizeMismatch) {
    return fmt::format("world size mismatch: peer has world size {}, this rank has world size {}",
                       peer.world_size, self.world_size);
  }
  return fmt::format("group mismatch: peer is in group \"{}\", this rank is in group \"{}\"",
                     peer.group, self.group);
}

}  // namespace

std::string refusal_at_acceptor(AcceptStatus status, const Identity& acceptor, const Proof& proof) {
  const Identity& c = proof.connector;
  switch (status) {
    case AcceptStatus::kAccepted:
      return "accepted";
    case AcceptStatus::kWorldSizeMismatch:
    case AcceptStatus::kGroupMismatch:
      return mismatch(status, acceptor, c);
    case AcceptStatus::kWrongRank:
      return fmt::format("the peer, rank {}, meant to reach rank {}, but this is rank {}", c.rank,
                         proof.expected_rank, acceptor.rank);
    case AcceptStatus::kBadRank:
      return fmt::format(
          "the peer says it is rank {}, not another rank of a world of {} (this "
          "is rank {})",
          c.rank, acceptor.world_size, acceptor.rank);
    case AcceptStatus::kDuplicate:
      return fmt::format(
          "duplicate peer rank {}: a proven connection from rank {} is already in "
          "place (two processes with rank {}?)",
          c.rank, c.rank, c.rank);
  }
  return fmt::format("unknown status {}", static_cast<int>(status));
}

std::string refusal_at_connector(AcceptStatus status, const Identity& connector,
                                 std::uint32_t expected_rank, const Identity& acceptor) {
  switch (status) {
    case AcceptStatus::kAccepted:
      return "accepted";
    case AcceptStatus::kWorldSizeMismatch:
    case AcceptStatus::kGroupMismatch:
      return mismatch(status, connector, acceptor);
    case AcceptStatus::kWrongRank:
      return fmt::format("the peer is rank {}, not rank {} (a stale address in the store?)",
                         acceptor.rank, expected_rank);
    case AcceptStatus::kBadRank:
      return fmt::format(
          "the peer, rank {} of a world of {}, does not take rank {} as another "
          "rank of its world",
          acceptor.rank, acceptor.world_size, connector.rank);
    case AcceptStatus::kDuplicate:
      return fmt::format(
          "rank {} already holds a proven connection from rank {} (two processes "
          "with rank {}?)",
          acceptor.rank, connector.rank, connector.rank);
  }
  return fmt::format("unknown status {}", static_cast<int>(status));
}

namespace {

// The lost rank as the notice frame and the failure record carry it: -1, a rank, or -2 - rank
// for a rank that made no progress. Any negative value thus decodes to -1 or a rank >= 0
// (with `stalled`); whether that rank is in the group is the reader's check.
std::int32_t cause_of(const AbortNotice& notice) {
  return notice.stalled && notice.lost_rank >= 0 ? -2 - notice.lost_rank : notice.lost_rank;
}

AbortNotice notice_of(std::int32_t cause, std::string_view message) {
  AbortNotice notice;
  notice.lost_rank = cause;
  if (cause <= -2) {
    notice.stalled = true;
    notice.lost_rank = -2 - cause;
  }
  // It ends up in error messages and logs: no control characters from a peer.
  notice.message = core::printable(message, kMaxAbortMessageBytes);
  return notice;
}

}  // namespace

std::vector<std::byte> encode_abort_notice(const AbortNotice& notice) {
  const std::size_t n = std::min(notice.message.size(), kMaxAbortMessageBytes);
  const auto header = encode_frame_header(kAbortTag, 4 + n);
  std::vector<std::byte> out(header.begin(), header.end());
  put_le(out, static_cast<std::uint32_t>(cause_of(notice)));
  const auto* p = reinterpret_cast<const std::byte*>(notice.message.data());
  out.insert(out.end(), p, p + n);
  return out;
}

AbortNotice decode_abort_notice(std::span<const std::byte> payload) {
  if (payload.size() < 4) return AbortNotice{};
  return notice_of(
      static_cast<std::int32_t>(get_le<std::uint32_t>(payload.data())),
      std::string_view(reinterpret_cast<const char*>(payload.data() + 4), payload.size() - 4));
}

AbortNotice heard_abort_notice(AbortNotice notice, int self, int world_size) {
  if (notice.lost_rank < 0 || notice.lost_rank >= world_size || notice.lost_rank == self) {
    notice.lost_rank = -1;
    notice.stalled = false;
  }
  return notice;
}

std::string encode_failure_record(const FailureRecord& record) {
  return fmt::format("{}\n{}\n{}", cause_of(record.notice), record.from, record.notice.message);
}

std::optional<FailureRecord> decode_failure_record(std::string_view text) {
  const auto nl = text.find('\n');
  if (nl == std::string_view::npos) return std::nullopt;
  const auto nl2 = text.find('\n', nl + 1);
  if (nl2 == std::string_view::npos) return std::nullopt;
  const auto cause = core::parse_int(text.substr(0, nl), std::numeric_limits<std::int32_t>::min(),
                                     std::numeric_limits<std::int32_t>::max());
  const auto from = core::parse_int(text.substr(nl + 1, nl2 - nl - 1), 0,
                                    std::numeric_limits<std::int32_t>::max());
  if (!cause.value || !from.value) return std::nullopt;
  return FailureRecord{notice_of(static_cast<std::int32_t>(*cause.value), text.substr(nl2 + 1)),
                       static_cast<std::int32_t>(*from.value)};
}

std::array<std::byte, kFrameHeaderBytes> encode_frame_header(std::uint64_t tag,
                                                             std::uint64_t length,
                                                             std::uint64_t call) {
  std::array<std::byte, kFrameHeaderBytes> out{};
  for (std::size_t i = 0; i < 8; ++i) {
    out[i] = static_cast<std::byte>((tag >> (8 * i)) & 0xff);
    out[8 + i] = static_cast<std::byte>((length >> (8 * i)) & 0xff);
    out[16 + i] = static_cast<std::byte>((call >> (8 * i)) & 0xff);
  }
  return out;
}

std::string describe_frame_fault(FrameFault fault, const FrameHeader& header) {
  switch (fault) {
    case FrameFault::kNone:
      return "no fault";
    case FrameFault::kTooLong:
      return fmt::format("length {} of the frame on tag {:#x} is over the limit of {} bytes",
                         header.length, header.tag, kMaxMessageBytes);
    case FrameFault::kGoodbyeWithPayload:
      return fmt::format("a goodbye frame with length {} (it has none)", header.length);
    case FrameFault::kAbortLength:
      return fmt::format("an abort notice of length {} (from 4 to {} bytes)", header.length,
                         4 + kMaxAbortMessageBytes);
  }
  return fmt::format("unknown fault {}", static_cast<int>(fault));
}

}  // namespace c10d::inline v1::gloo_like
