// Numbers and flags from text a user wrote (environment variables, URL queries, launcher
// variables), and size arithmetic that cannot wrap.
//
// The parsers are strict: the whole text is the number (no sign where none is allowed, no
// spaces, no trailing garbage), it must fit its type and lie within [lo, hi]. They return a
// Parsed value or the words of the error and never throw, so each caller adds its context
// (which variable, which URL piece). The env_* helpers are that caller for environment
// variables: unset or empty means "not given"; anything else parses or throws InvalidArgument
// naming the variable, its value and the bound it broke, e.g.
//   "C10D_SHM_RING_BYTES=9223372036854775808: 9223372036854775808 is out of range [65536,
//    1073741824]".
//
// Thread-safety: all functions are pure or read the environment only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "c10d/types.h"

namespace c10d::inline v1::core {

// A parsed value, or why there is none.
template <typename T>
struct Parsed {
  std::optional<T> value;
  std::string error;  // set when !value: "'12x' is not an integer", "70000 is out of range ..."

  static Parsed ok(T v) { return Parsed{std::move(v), {}}; }
  static Parsed fail(std::string why) { return Parsed{std::nullopt, std::move(why)}; }
};

// A decimal integer in [lo, hi]; a leading '-' only (no '+', no spaces).
Parsed<std::int64_t> parse_int(std::string_view text, std::int64_t lo, std::int64_t hi);
// A decimal integer in [lo, hi] with no sign at all: "-1" is refused, never wrapped.
Parsed<std::uint64_t> parse_uint(std::string_view text, std::uint64_t lo, std::uint64_t hi);
// A finite decimal number in [lo, hi] ("inf", "nan" and hex floats are refused).
Parsed<double> parse_double(std::string_view text, double lo, double hi);
// 1/true/yes/on or 0/false/no/off (and the empty text, as off).
Parsed<bool> parse_flag(std::string_view text);

// The variable's value; nullopt when it is unset or empty.
std::optional<std::string> env_text(const char* name);
// The variable parsed as above; nullopt when unset or empty; InvalidArgument naming the
// variable, its value and the bound otherwise.
std::optional<std::int64_t> env_int(const char* name, std::int64_t lo, std::int64_t hi);
std::optional<std::uint64_t> env_uint(const char* name, std::uint64_t lo, std::uint64_t hi);
std::optional<double> env_double(const char* name, double lo, double hi);
std::optional<bool> env_flag(const char* name);

// The longest timeout c10d accepts: 2^31 - 1 ms (24.8 days), the most a poll() or a socket
// timeout can hold; a longer one is refused, never wrapped into a deadline in the past.
inline constexpr Milliseconds kMaxTimeout{2147483647};
// InvalidArgument "<what>: a timeout of N ms is out of range [1, 2147483647]" unless
// 0 < timeout <= kMaxTimeout.
void check_timeout(Milliseconds timeout, std::string_view what);

// `text` cut to `max_bytes`, each control character (below 0x20, and 0x7f) made '?': for bytes
// from outside (a store's value, a peer's message) that go into an error message or a log.
std::string printable(std::string_view text, std::size_t max_bytes = std::string_view::npos);

// a * b + c, or nullopt when it does not fit a size_t.
std::optional<std::size_t> checked_mul_add(std::size_t a, std::size_t b, std::size_t c = 0);

}  // namespace c10d::inline v1::core
