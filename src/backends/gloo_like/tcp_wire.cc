// Handshake encoding and checking: see tcp_wire.h.
#include "backends/gloo_like/tcp_wire.h"

#include <fmt/format.h>

#include <algorithm>

namespace c10d::gloo_like {

std::vector<std::byte> encode_handshake(const Handshake& h) {
  std::vector<std::byte> out;
  put_le(out, h.magic);
  put_le(out, h.version);
  put_le(out, h.world_size);
  put_le(out, h.rank);
  put_le(out, static_cast<std::uint32_t>(h.group.size()));
  for (char c : h.group) out.push_back(static_cast<std::byte>(c));
  return out;
}

std::uint32_t decode_handshake_fixed(std::span<const std::byte, Handshake::kFixedBytes> b,
                                     Handshake& out) {
  out.magic = get_le<std::uint32_t>(b.data());
  out.version = get_le<std::uint16_t>(b.data() + 4);
  out.world_size = get_le<std::uint32_t>(b.data() + 6);
  out.rank = get_le<std::uint32_t>(b.data() + 10);
  return get_le<std::uint32_t>(b.data() + 14);
}

std::optional<std::string> handshake_mismatch(const Handshake& mine, const Handshake& theirs) {
  if (theirs.magic != mine.magic) {
    return fmt::format("bad magic: peer sent {:#010x}, expected {:#010x} (\"C10T\")", theirs.magic,
                       mine.magic);
  }
  if (theirs.version != mine.version) {
    return fmt::format("version mismatch: peer has version {}, this rank has version {}",
                       theirs.version, mine.version);
  }
  if (theirs.world_size != mine.world_size) {
    return fmt::format("world size mismatch: peer has world size {}, this rank has world size {}",
                       theirs.world_size, mine.world_size);
  }
  if (theirs.group != mine.group) {
    return fmt::format("group mismatch: peer is in group \"{}\", this rank is in group \"{}\"",
                       theirs.group, mine.group);
  }
  return std::nullopt;
}

std::vector<std::byte> encode_abort_notice(const AbortNotice& notice) {
  const std::size_t n = std::min(notice.message.size(), kMaxAbortMessageBytes);
  std::vector<std::byte> out;
  put_le(out, kAbortTag);
  put_le(out, static_cast<std::uint64_t>(4 + n));
  put_le(out, static_cast<std::uint32_t>(notice.lost_rank));
  const auto* p = reinterpret_cast<const std::byte*>(notice.message.data());
  out.insert(out.end(), p, p + n);
  return out;
}

AbortNotice decode_abort_notice(std::span<const std::byte> payload) {
  AbortNotice notice;
  if (payload.size() < 4) return notice;
  notice.lost_rank = static_cast<std::int32_t>(get_le<std::uint32_t>(payload.data()));
  notice.message.assign(reinterpret_cast<const char*>(payload.data() + 4), payload.size() - 4);
  return notice;
}

}  // namespace c10d::gloo_like
