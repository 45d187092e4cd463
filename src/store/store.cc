#include "c10d/store.h"

namespace c10d::inline v1 {

void Store::set(std::string_view key, std::string_view value) {
  set(key, std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(value.data()),
                                         value.size()));
}

std::string Store::get_string(std::string_view key) {
  Bytes value = get(key);
  return std::string(value.begin(), value.end());
}

Milliseconds Store::timeout() const {
  std::lock_guard<std::mutex> lock(timeout_mu_);
  return timeout_;
}

void Store::set_timeout(Milliseconds timeout) {
  std::lock_guard<std::mutex> lock(timeout_mu_);
  timeout_ = timeout;
}

}  // namespace c10d::inline v1
