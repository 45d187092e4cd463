#include "core/parse.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <system_error>
#include <type_traits>

#include "core/check.h"

namespace c10d::inline v1::core {
namespace {

template <typename T>
Parsed<T> parse_integer(std::string_view text, T lo, T hi) {
  if (text.empty())
    return Parsed<T>::fail(fmt::format("is empty, not a number in [{}, {}]", lo, hi));
  T value{};
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec == std::errc::result_out_of_range) {
    return Parsed<T>::fail(fmt::format("'{}' is out of range [{}, {}]", text, lo, hi));
  }
  if (ec != std::errc() || ptr != end) {
    return Parsed<T>::fail(fmt::format("'{}' is not {} in [{}, {}]", text,
                                       std::is_signed_v<T> ? "an integer" : "a whole number", lo,
                                       hi));
  }
  if (value < lo || value > hi) {
    return Parsed<T>::fail(fmt::format("{} is out of range [{}, {}]", value, lo, hi));
  }
  return Parsed<T>::ok(value);
}

// Throws InvalidArgument "NAME=value: why" for a parse of an environment variable that failed.
template <typename T>
std::optional<T> from_env(const char* name, const Parsed<T>& parsed, std::string_view text) {
  if (!parsed.value) C10D_THROW(InvalidArgument, "{}={}: {}", name, text, parsed.error);
  return parsed.value;
}

}  // namespace

Parsed<std::int64_t> parse_int(std::string_view text, std::int64_t lo, std::int64_t hi) {
  return parse_integer<std::int64_t>(text, lo, hi);
}

Parsed<std::uint64_t> parse_uint(std::string_view text, std::uint64_t lo, std::uint64_t hi) {
  return parse_integer<std::uint64_t>(text, lo, hi);
}

Parsed<double> parse_double(std::string_view text, double lo, double hi) {
  if (text.empty()) {
    return Parsed<double>::fail(fmt::format("is empty, not a number in [{}, {}]", lo, hi));
  }
  double value = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, value, std::chars_format::general);
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && !std::isfinite(value))) {
    return Parsed<double>::fail(fmt::format("'{}' is out of range [{}, {}]", text, lo, hi));
  }
  if (ec != std::errc() || ptr != end) {
    return Parsed<double>::fail(fmt::format("'{}' is not a number in [{}, {}]", text, lo, hi));
  }
  if (!(value >= lo && value <= hi)) {
    return Parsed<double>::fail(fmt::format("{} is out of range [{}, {}]", value, lo, hi));
  }
  return Parsed<double>::ok(value);
}

Parsed<bool> parse_flag(std::string_view text) {
  if (text == "1" || text == "true" || text == "yes" || text == "on") return Parsed<bool>::ok(true);
  if (text.empty() || text == "0" || text == "false" || text == "no" || text == "off") {
    return Parsed<bool>::ok(false);
  }
  return Parsed<bool>::fail(fmt::format("'{}' is not a boolean (1/0, true/false)", text));
}

std::optional<std::string> env_text(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

std::optional<std::int64_t> env_int(const char* name, std::int64_t lo, std::int64_t hi) {
  const auto text = env_text(name);
  if (!text) return std::nullopt;
  return from_env(name, parse_int(*text, lo, hi), *text);
}

std::optional<std::uint64_t> env_uint(const char* name, std::uint64_t lo, std::uint64_t hi) {
  const auto text = env_text(name);
  if (!text) return std::nullopt;
  return from_env(name, parse_uint(*text, lo, hi), *text);
}

std::optional<double> env_double(const char* name, double lo, double hi) {
  const auto text = env_text(name);
  if (!text) return std::nullopt;
  return from_env(name, parse_double(*text, lo, hi), *text);
}

std::optional<bool> env_flag(const char* name) {
  const auto text = env_text(name);
  if (!text) return std::nullopt;
  return from_env(name, parse_flag(*text), *text);
}

void check_timeout(Milliseconds timeout, std::string_view what) {
  C10D_CHECK(timeout.count() > 0 && timeout <= kMaxTimeout,
             "{}: a timeout of {} ms is out of range [1, {}]", what, timeout.count(),
             kMaxTimeout.count());
}

std::string printable(std::string_view text, std::size_t max_bytes) {
  std::string out(text.substr(0, max_bytes));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return out;
}

std::optional<std::size_t> checked_mul_add(std::size_t a, std::size_t b, std::size_t c) {
  std::size_t product = 0;
  std::size_t sum = 0;
  if (__builtin_mul_overflow(a, b, &product) || __builtin_add_overflow(product, c, &sum)) {
    return std::nullopt;
  }
  return sum;
}

}  // namespace c10d::inline v1::core
