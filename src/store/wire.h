// The TCP store's wire protocol: frames, their encoders and pure decoders.
//
// Every request and every response is one frame. All integers are little-endian and of fixed
// width, so machines of either byte order and word size interoperate.
//
//    0         4         6      7      8                       16
//    +---------+---------+------+------+-----------------------+----------------------+
//    | magic   | version | kind | flags| body length           | body ...             |
//    | u32     | u16     | u8   | u8   | u64                   | (body length bytes)  |
//    +---------+---------+------+------+-----------------------+----------------------+
//    magic = 0x44303143, the bytes "C10D"; a response's kind is the request's | 0x80.
//
// This 16-byte header, and the error body below, never change between versions, so a peer of
// another version can always be told, in words, which versions the two sides speak.
//
// Inside a body, a string (key or value) is a u32 length then its bytes; a list is a u32 count
// then its items. Request bodies, by kind:
//
//    kHello       u16 lowest version the client speaks (reserved; = version)
//    kAuth        32 bytes: HMAC-SHA256(token, server nonce || "c10d-store-auth")
//    kSet         key, value               kAppend     key, value
//    kGet         u64 timeout ms, key      kAdd        key, i64 delta
//    kCompareSet  key, expected, desired   kDelete     key
//    kCheck       list of keys             kNumKeys    (empty)
//    kWait        u64 timeout ms, list of keys
//    kMultiGet    u64 timeout ms, list of keys
//    kMultiSet    list of (key, value)
//
// A response body is a u8 status. kOk is followed by the kind's result:
//
//    kHello       u8 auth required, 32-byte nonce (zeros without auth), u64 max key bytes,
//                 u64 max value bytes,
//                 u64 max keys per request, u64 max request body bytes, string local socket
//                 (an abstract Unix socket name of this server, or empty)
//    kGet, kCompareSet: value       kAdd, kNumKeys: i64       kCheck, kDelete: u8
//    kMultiGet: list of values      the others: nothing
//
// kSet alone gets no answer when it succeeds (the client knows the server's limits from HELLO,
// so it only sends sets that fit); a failed kSet is answered with an error like any request.
// Any status other than kOk is followed by a string saying what went wrong. A request that
// breaks the protocol or a limit of the frame (bad kind, bad lengths, too large, before the
// handshake) is the last the server reads: it answers and closes the connection, so nothing
// sent after it runs. A timeout, a non-integer or out-of-range ADD, an APPEND that would make
// a value too large, an answer that would exceed max_response_bytes (kResponseTooLarge) or one
// that found the server's buffer for unread answers full for too long (kBusy) is answered and
// the connection goes on.
//
// Decoders are pure functions over byte spans: they never throw, and report short or bad input
// through a DecodeStatus. Every length is checked against what remains and against the limits
// before anything is allocated for it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/store.h"
#include "c10d/types.h"

namespace c10d::inline v1::store::wire {

inline constexpr std::uint32_t kMagic = 0x44303143;  // "C10D" as little-endian bytes
inline constexpr std::uint16_t kVersion = 1;
inline constexpr std::size_t kHeaderBytes = 16;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = 32;
inline constexpr std::uint8_t kResponseBit = 0x80;

enum class Kind : std::uint8_t {
  kHello = 1,
  kAuth = 2,
  kSet = 3,
  kGet = 4,
  kAdd = 5,
  kCompareSet = 6,
  kCheck = 7,
  kWait = 8,
  kDelete = 9,
  kNumKeys = 10,
  kAppend = 11,
  kMultiGet = 12,
  kMultiSet = 13,
};
inline constexpr std::uint8_t kMaxKind = 13;

enum class Status : std::uint8_t {
  kOk = 0,
  kTimeout = 1,
  kBadRequest = 2,
  kLimitExceeded = 3,
  kAuthRequired = 4,
  kAuthFailed = 5,
  kVersionMismatch = 6,
  kNotInteger = 7,
  kOutOfRange = 8,  // an ADD whose sum would overflow int64
  // The answer would exceed StoreLimits::max_response_bytes; the message names both sizes.
  kResponseTooLarge = 9,
  // The server holds as many unread answers as it may; the request was not served.
  kBusy = 10,
};

std::string_view kind_name(Kind kind);  // "SET", "GET", ...
std::string_view status_name(Status status);

struct Header {
  std::uint32_t magic = kMagic;
  std::uint16_t version = kVersion;
  std::uint8_t kind = 0;
  std::uint8_t flags = 0;
  std::uint64_t body_bytes = 0;
};

enum class DecodeCode : std::uint8_t {
  kOk,
  kShort,  // not enough bytes yet
  kBadMagic,
  kBadVersion,      // value = the peer's version
  kBadKind,         // value = the kind byte
  kFrameTooLarge,   // value = the claimed body length
  kKeyTooLarge,     // value = the claimed key length
  kValueTooLarge,   // value = the claimed value length
  kTooManyKeys,     // value = the claimed count
  kTruncated,       // a length runs past the end of the body
  kTrailingBytes,   // value = bytes left over
  kBadStatus,       // value = the status byte
  kAnswerTooLarge,  // value = the claimed body length of an answer (max_response_bytes)
};

struct DecodeStatus {
  DecodeCode code = DecodeCode::kOk;
  std::uint64_t value = 0;
  bool ok() const { return code == DecodeCode::kOk; }
};

// "key of 9000 bytes exceeds the limit of 8192", for logs and error messages.
std::string describe(DecodeStatus status, const StoreLimits& limits);

// ---- little-endian primitives ----

void put_u16(std::vector<std::uint8_t>& out, std::uint16_t v);
void put_u32(std::vector<std::uint8_t>& out, std::uint32_t v);
void put_u64(std::vector<std::uint8_t>& out, std::uint64_t v);
std::uint16_t get_u16(const std::uint8_t* p);
std::uint32_t get_u32(const std::uint8_t* p);
std::uint64_t get_u64(const std::uint8_t* p);

// Reads fields from a body; the first failure sticks and later reads return false.
class Reader {
 public:
  Reader(std::span<const std::uint8_t> data, const StoreLimits& limits)
      : data_(data), limits_(limits) {}
  bool u8(std::uint8_t& v);
  bool u16(std::uint16_t& v);
  bool u32(std::uint32_t& v);
  bool u64(std::uint64_t& v);
  bool i64(std::int64_t& v);
  bool fixed(std::size_t n, std::span<const std::uint8_t>& v);
  bool key(std::string_view& v);                 // checks max_key_bytes
  bool value(std::span<const std::uint8_t>& v);  // checks max_value_bytes
  bool count(std::uint32_t& n);                  // checks max_keys_per_op
  // kTrailingBytes unless everything was read.
  DecodeStatus finish();
  DecodeStatus status() const { return status_; }
  std::size_t remaining() const { return data_.size() - pos_; }

 private:
  bool fail(DecodeCode code, std::uint64_t value);
  bool take(std::size_t n, const std::uint8_t*& p);
  std::span<const std::uint8_t> data_;
  const StoreLimits& limits_;
  std::size_t pos_ = 0;
  DecodeStatus status_{};
};

// ---- frames ----

// Decodes a header from the first kHeaderBytes of `in`. kShort when fewer bytes are present;
// checks magic, version, kind (request kinds, or response kinds when `response`), and that the
// body fits in limits.max_frame_bytes (a request) or limits.max_response_bytes (an answer).
DecodeStatus decode_header(std::span<const std::uint8_t> in, bool response,
                           const StoreLimits& limits, Header& out);

// Appends a frame: reserve its header with begin_frame(), write the body, then end_frame().
std::size_t begin_frame(std::vector<std::uint8_t>& out, std::uint8_t kind);
void end_frame(std::vector<std::uint8_t>& out, std::size_t frame_start);

void put_bytes(std::vector<std::uint8_t>& out, std::span<const std::uint8_t> bytes);
void put_string(std::vector<std::uint8_t>& out, std::string_view s);
// A list of keys: u32 count, then each key (what Reader::count and Reader::key read back).
void put_key_list(std::vector<std::uint8_t>& out, std::span<const std::string> keys);

// Body bytes of a MULTI_GET answer (status, count, each value with its length) for `count`
// values of `value_bytes` in all; of a GET or COMPARE_SET answer with count 1 minus the count.
// The server checks these against max_response_bytes before it builds an answer.
inline std::uint64_t multi_get_answer_bytes(std::uint64_t count, std::uint64_t value_bytes) {
  return 1 + 4 + 4 * count + value_bytes;
}
inline std::uint64_t value_answer_bytes(std::uint64_t value_bytes) { return 1 + 4 + value_bytes; }

// A decoded request. Views point into the frame's body, which must outlive it.
struct Request {
  Kind kind = Kind::kHello;
  std::uint64_t timeout_ms = 0;
  std::int64_t delta = 0;
  std::uint16_t min_version = 0;
  std::vector<std::string_view> keys;
  std::vector<std::span<const std::uint8_t>> values;  // set/append: 1; compare_set: 2; multi_set
  std::span<const std::uint8_t> mac;
  void clear();
};

// Decodes a request body of `kind`. Never throws.
DecodeStatus decode_request(Kind kind, std::span<const std::uint8_t> body,
                            const StoreLimits& limits, Request& out);

// Appends a complete error response frame: status (not kOk) and message.
void encode_error(std::vector<std::uint8_t>& out, Kind kind, Status status,
                  std::string_view message, std::uint16_t version = kVersion);

// ---- authentication (on core/auth.h, which the TCP transport's handshake uses too) ----

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Mac = std::array<std::uint8_t, kMacBytes>;

Nonce random_nonce();
// HMAC-SHA256 keyed by the token over nonce || "c10d-store-auth".
Mac auth_mac(std::string_view token, const Nonce& nonce);
// Constant-time comparison.
bool mac_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b);

}  // namespace c10d::inline v1::store::wire
