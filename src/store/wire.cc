// Encoders and pure decoders of the TCP store's frames; the layout is drawn in wire.h.
#include "store/wire.h"

#include <fmt/format.h>

#include <cstring>

#include "c10d/errors.h"
#include "core/auth.h"

namespace c10d::inline v1::store::wire {

std::string_view kind_name(Kind kind) {
  switch (kind) {
    case Kind::kHello:
      return "HELLO";
    case Kind::kAuth:
      return "AUTH";
    case Kind::kSet:
      return "SET";
    case Kind::kGet:
      return "GET";
    case Kind::kAdd:
      return "ADD";
    case Kind::kCompareSet:
      return "COMPARE_SET";
    case Kind::kCheck:
      return "CHECK";
    case Kind::kWait:
      return "WAIT";
    case Kind::kDelete:
      return "DELETE";
    case Kind::kNumKeys:
      return "NUM_KEYS";
    case Kind::kAppend:
      return "APPEND";
    case Kind::kMultiGet:
      return "MULTI_GET";
    case Kind::kMultiSet:
      return "MULTI_SET";
  }
  return "UNKNOWN";
}

std::string_view status_name(Status status) {
  switch (status) {
    case Status::kOk:
      return "ok";
    case Status::kTimeout:
      return "timeout";
    case Status::kBadRequest:
      return "bad request";
    case Status::kLimitExceeded:
      return "limit exceeded";
    case Status::kAuthRequired:
      return "authentication required";
    case Status::kAuthFailed:
      return "authentication failed";
    case Status::kVersionMismatch:
      return "protocol version mismatch";
    case Status::kNotInteger:
      return "value is not an integer";
    case Status::kOutOfRange:
      return "out of range";
    case Status::kResponseTooLarge:
      return "answer too large";
    case Status::kBusy:
      return "server busy";
  }
  return "unknown status";
}

std::string describe(DecodeStatus s, const StoreLimits& limits) {
  switch (s.code) {
    case DecodeCode::kOk:
      return "ok";
    case DecodeCode::kShort:
      return "frame is shorter than its header";
    case DecodeCode::kBadMagic:
      return fmt::format("bad magic 0x{:08x} (expected 0x{:08x})", s.value, kMagic);
    case DecodeCode::kBadVersion:
      return fmt::format("protocol version {} (this side speaks {})", s.value, kVersion);
    case DecodeCode::kBadKind:
      return fmt::format("unknown frame kind {}", s.value);
    case DecodeCode::kFrameTooLarge:
      return fmt::format("frame body of {} bytes exceeds the limit of {}", s.value,
                         limits.max_frame_bytes);
    case DecodeCode::kKeyTooLarge:
      return fmt::format("key of {} bytes exceeds the limit of {}", s.value, limits.max_key_bytes);
    case DecodeCode::kValueTooLarge:
      return fmt::format("value of {} bytes exceeds the limit of {}", s.value,
                         limits.max_value_bytes);
    case DecodeCode::kTooManyKeys:
      return fmt::format("{} keys in one request exceed the limit of {}", s.value,
                         limits.max_keys_per_op);
    case DecodeCode::kTruncated:
      return "a length runs past the end of the frame";
    case DecodeCode::kTrailingBytes:
      return fmt::format("{} unexpected bytes after the request", s.value);
    case DecodeCode::kBadStatus:
      return fmt::format("unknown status {}", s.value);
    case DecodeCode::kAnswerTooLarge:
      return fmt::format("answer body of {} bytes exceeds the limit of {} (max_response_bytes)",
                         s.value, limits.max_response_bytes);
  }
  return "unknown decode error";
}

void put_u16(std::vector<std::uint8_t>& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v));
  out.push_back(static_cast<std::uint8_t>(v >> 8));
}

void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

std::uint16_t get_u16(const std::uint8_t* p) {
  return static_cast<std::uint16_t>(p[0] | (p[1] << 8));
}

std::uint32_t get_u32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

std::uint64_t get_u64(const std::uint8_t* p) {
  std::uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

bool Reader::fail(DecodeCode code, std::uint64_t value) {
  if (status_.ok()) status_ = {code, value};
  return false;
}

bool Reader::take(std::size_t n, const std::uint8_t*& p) {
  if (!status_.ok()) return false;
  if (n > data_.size() - pos_) return fail(DecodeCode::kTruncated, n);
  p = data_.data() + pos_;
  pos_ += n;
  return true;
}

bool Reader::u8(std::uint8_t& v) {
  const std::uint8_t* p;
  if (!take(1, p)) return false;
  v = *p;
  return true;
}

bool Reader::u16(std::uint16_t& v) {
  const std::uint8_t* p;
  if (!take(2, p)) return false;
  v = get_u16(p);
  return true;
}

bool Reader::u32(std::uint32_t& v) {
  const std::uint8_t* p;
  if (!take(4, p)) return false;
  v = get_u32(p);
  return true;
}

bool Reader::u64(std::uint64_t& v) {
  const std::uint8_t* p;
  if (!take(8, p)) return false;
  v = get_u64(p);
  return true;
}

bool Reader::i64(std::int64_t& v) {
  std::uint64_t u;
  if (!u64(u)) return false;
  v = static_cast<std::int64_t>(u);
  return true;
}

bool Reader::fixed(std::size_t n, std::span<const std::uint8_t>& v) {
  const std::uint8_t* p;
  if (!take(n, p)) return false;
  v = {p, n};
  return true;
}

bool Reader::key(std::string_view& v) {
  std::uint32_t n;
  if (!u32(n)) return false;
  if (n > limits_.max_key_bytes) return fail(DecodeCode::kKeyTooLarge, n);
  const std::uint8_t* p;
  if (!take(n, p)) return false;
  v = {reinterpret_cast<const char*>(p), n};
  return true;
}

bool Reader::value(std::span<const std::uint8_t>& v) {
  std::uint32_t n;
  if (!u32(n)) return false;
  if (n > limits_.max_value_bytes) return fail(DecodeCode::kValueTooLarge, n);
  return fixed(n, v);
}

bool Reader::count(std::uint32_t& n) {
  if (!u32(n)) return false;
  if (n > limits_.max_keys_per_op) return fail(DecodeCode::kTooManyKeys, n);
  // Every item takes at least its 4-byte length: a count the body cannot hold is a lie, caught
  // before anything is reserved for it.
  if (static_cast<std::uint64_t>(n) * 4 > remaining()) return fail(DecodeCode::kTruncated, n);
  return true;
}

DecodeStatus Reader::finish() {
  if (status_.ok() && pos_ != data_.size()) fail(DecodeCode::kTrailingBytes, data_.size() - pos_);
  return status_;
}

DecodeStatus decode_header(std::span<const std::uint8_t> in, bool response,
                           const StoreLimits& limits, Header& out) {
  if (in.size() < kHeaderBytes) return {DecodeCode::kShort, in.size()};
  const std::uint8_t* p = in.data();
  out.magic = get_u32(p);
  out.version = get_u16(p + 4);
  out.kind = p[6];
  out.flags = p[7];
  out.body_bytes = get_u64(p + 8);
  if (out.magic != kMagic) return {DecodeCode::kBadMagic, out.magic};
  // A response of another version is still read: its body may be the version-error message.
  if (out.version != kVersion && !response) return {DecodeCode::kBadVersion, out.version};
  const bool is_response = (out.kind & kResponseBit) != 0;
  const std::uint8_t base = out.kind & static_cast<std::uint8_t>(~kResponseBit);
  if (is_response != response || base == 0 || base > kMaxKind) {
    return {DecodeCode::kBadKind, out.kind};
  }
  if (response && out.body_bytes > limits.max_response_bytes) {
    return {DecodeCode::kAnswerTooLarge, out.body_bytes};
  }
  if (!response && out.body_bytes > limits.max_frame_bytes) {
    return {DecodeCode::kFrameTooLarge, out.body_bytes};
  }
  return {};
}

std::size_t begin_frame(std::vector<std::uint8_t>& out, std::uint8_t kind) {
  const std::size_t start = out.size();
  put_u32(out, kMagic);
  put_u16(out, kVersion);
  out.push_back(kind);
  out.push_back(0);
  put_u64(out, 0);  // body length, filled by end_frame
  return start;
}

void end_frame(std::vector<std::uint8_t>& out, std::size_t frame_start) {
  std::uint64_t body = out.size() - frame_start - kHeaderBytes;
  for (int i = 0; i < 8; ++i) out[frame_start + 8 + i] = static_cast<std::uint8_t>(body >> (8 * i));
}

void put_bytes(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> bytes) {
  put_u32(out, static_cast<std::uint32_t>(bytes.size()));
  out.insert(out.end(), bytes.begin(), bytes.end());
}

void put_string(std::vector<std::uint8_t>& out, std::string_view s) {
  put_u32(out, static_cast<std::uint32_t>(s.size()));
  out.insert(out.end(), s.begin(), s.end());
}

void put_key_list(std::vector<std::uint8_t>& out, std::span<const std::string> keys) {
  put_u32(out, static_cast<std::uint32_t>(keys.size()));
  for (const auto& k : keys) put_string(out, k);
}

void Request::clear() {
  timeout_ms = 0;
  delta = 0;
  min_version = 0;
  keys.clear();
  values.clear();
  mac = {};
}

DecodeStatus decode_request(Kind kind, std::span<const std::uint8_t> body,
                            const StoreLimits& limits, Request& out) {
  out.clear();
  out.kind = kind;
  Reader r(body, limits);
  std::string_view key;
  std::span<const std::uint8_t> value;
  auto one_key = [&] {
    if (r.key(key)) out.keys.push_back(key);
  };
  auto one_value = [&] {
    if (r.value(value)) out.values.push_back(value);
  };
  auto key_list = [&] {
    std::uint32_t n = 0;
    if (!r.count(n)) return;
    out.keys.reserve(n);
    for (std::uint32_t i = 0; i < n && r.key(key); ++i) out.keys.push_back(key);
  };
  switch (kind) {
    case Kind::kHello:
      r.u16(out.min_version);
      break;
    case Kind::kAuth:
      r.fixed(kMacBytes, out.mac);
      break;
    case Kind::kSet:
    case Kind::kAppend:
      one_key();
      one_value();
      break;
    case Kind::kGet:
      r.u64(out.timeout_ms);
      one_key();
      break;
    case Kind::kAdd:
      one_key();
      r.i64(out.delta);
      break;
    case Kind::kCompareSet:
      one_key();
      one_value();
      one_value();
      break;
    case Kind::kDelete:
      one_key();
      break;
    case Kind::kCheck:
      key_list();
      break;
    case Kind::kWait:
    case Kind::kMultiGet:
      r.u64(out.timeout_ms);
      key_list();
      break;
    case Kind::kNumKeys:
      break;
    case Kind::kMultiSet: {
      std::uint32_t n = 0;
      if (!r.count(n)) break;
      out.keys.reserve(n);
      out.values.reserve(n);
      for (std::uint32_t i = 0; i < n && r.status().ok(); ++i) {
        one_key();
        one_value();
      }
      break;
    }
    default:
      return {DecodeCode::kBadKind, static_cast<std::uint64_t>(kind)};
  }
  return r.finish();
}

void encode_error(std::vector<std::uint8_t>& out, Kind kind, Status status,
                  std::string_view message, std::uint16_t version) {
  const std::size_t start = begin_frame(out, static_cast<std::uint8_t>(kind) | kResponseBit);
  out[start + 4] = static_cast<std::uint8_t>(version);
  out[start + 5] = static_cast<std::uint8_t>(version >> 8);
  out.push_back(static_cast<std::uint8_t>(status));
  put_string(out, message);
  end_frame(out, start);
}

Nonce random_nonce() {
  Nonce nonce;
  core::random_bytes(nonce);
  return nonce;
}

Mac auth_mac(std::string_view token, const Nonce& nonce) {
  static constexpr std::string_view kContext = "c10d-store-auth";
  return core::hmac_sha256(core::as_bytes(token), {nonce, core::as_bytes(kContext)});
}

bool mac_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  return core::mac_equal(a, b);
}

}  // namespace c10d::inline v1::store::wire
