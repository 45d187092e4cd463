// The cryptography the store and the TCP transport share to authenticate their peers: random
// bytes from a CSPRNG, HMAC-SHA256, a constant-time comparison (all from OpenSSL's libcrypto,
// which only core/auth.cc includes), and the job's shared secret from C10D_STORE_TOKEN.
//
// Stateless functions; thread-safe. Failures of the library itself (it found no entropy) throw
// c10d::Error; an empty C10D_STORE_TOKEN throws InvalidArgument.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace c10d::inline v1::core {

inline constexpr std::size_t kMacBytes = 32;  // HMAC-SHA256
using Mac = std::array<std::uint8_t, kMacBytes>;

// Fills `out` from OpenSSL's CSPRNG (RAND_bytes).
void random_bytes(std::span<std::uint8_t> out);

// `n` random bytes as 2n lowercase hex digits.
std::string random_hex(std::size_t n);

// HMAC-SHA256 keyed by `key` over the concatenation of `parts`.
Mac hmac_sha256(std::span<const std::uint8_t> key,
                std::initializer_list<std::span<const std::uint8_t>> parts);

// Constant-time comparison (false when the sizes differ).
bool mac_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b);

// The bytes of a string, for the functions above.
inline std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// C10D_STORE_TOKEN: nullopt when it is not set. Set but empty throws InvalidArgument (with
// empty_token_message): an empty secret would turn authentication off without a word.
std::optional<std::string> token_from_env();

// Why an empty token given as `what` ("C10D_STORE_TOKEN", "--token") is refused, and what to do.
std::string empty_token_message(std::string_view what);

}  // namespace c10d::inline v1::core
