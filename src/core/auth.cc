// Random bytes, HMAC-SHA256 and the token from the environment: see auth.h.
#include "core/auth.h"

#include <fmt/format.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>
#include <cstdlib>
#include <vector>

#include "c10d/errors.h"

namespace c10d::inline v1::core {

void random_bytes(std::span<std::uint8_t> out) {
  // RAND_bytes takes an int count; nobody here asks for more than a few dozen bytes.
  if (out.size() > INT_MAX || RAND_bytes(out.data(), static_cast<int>(out.size())) != 1) {
    throw Error(
        fmt::format("could not draw {} random bytes from OpenSSL's RAND_bytes", out.size()));
  }
}

std::string random_hex(std::size_t n) {
  std::vector<std::uint8_t> bytes(n);
  random_bytes(bytes);
  std::string hex;
  hex.reserve(2 * n);
  for (std::uint8_t b : bytes) hex += fmt::format("{:02x}", b);
  return hex;
}

Mac hmac_sha256(std::span<const std::uint8_t> key,
                std::initializer_list<std::span<const std::uint8_t>> parts) {
  // The one-shot HMAC() (in OpenSSL 1.1 and 3 alike) takes the message in one piece.
  std::vector<std::uint8_t> message;
  std::size_t total = 0;
  for (auto part : parts) total += part.size();
  message.reserve(total);
  for (auto part : parts) message.insert(message.end(), part.begin(), part.end());
  Mac mac{};
  unsigned int len = 0;
  // A zero-length key is legal for HMAC, but OpenSSL wants a non-null pointer.
  static const std::uint8_t kNoKey = 0;
  if (key.size() > INT_MAX ||
      HMAC(EVP_sha256(), key.empty() ? &kNoKey : key.data(), static_cast<int>(key.size()),
           message.empty() ? &kNoKey : message.data(), message.size(), mac.data(),
           &len) == nullptr ||
      len != mac.size()) {
    throw Error("HMAC-SHA256 failed in OpenSSL");
  }
  return mac;
}

bool mac_equal(std::span<const std::uint8_t> a, std::span<const std::uint8_t> b) {
  return a.size() == b.size() && CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::optional<std::string> token_from_env() {
  const char* env = std::getenv("C10D_STORE_TOKEN");
  if (env == nullptr) return std::nullopt;
  if (*env == '\0') throw InvalidArgument(empty_token_message("C10D_STORE_TOKEN"));
  return std::string(env);
}

std::string empty_token_message(std::string_view what) {
  return fmt::format(
      "{} is empty: an empty token would turn authentication off; set it to a secret (e.g. "
      "openssl rand -hex 32), or leave it unset for none",
      what);
}

}  // namespace c10d::inline v1::core
