#include "store/attempt_store.h"

#include <fmt/format.h>

#include <utility>

#include "core/check.h"
#include "core/parse.h"

namespace c10d::inline v1::store {

int restart_count_from_env() {
  const auto text = core::env_text("C10D_RESTART_COUNT");
  if (!text) return 0;
  const auto parsed = core::parse_int(*text, 0, kMaxAttempt);
  C10D_CHECK(parsed.value, "C10D_RESTART_COUNT {}", parsed.error);
  return static_cast<int>(*parsed.value);
}

std::string attempt_prefix(int attempt) { return fmt::format("c10d/attempt/{}", attempt); }

std::string attempt_key(int attempt, std::string_view key) {
  if (attempt == 0) return std::string(key);
  return fmt::format("{}/{}", attempt_prefix(attempt), key);
}

std::shared_ptr<Store> store_for_attempt(std::shared_ptr<Store> base, int attempt) {
  C10D_CHECK(attempt >= 0 && attempt <= kMaxAttempt, "store attempt {} is out of range [0, {}]",
             attempt, kMaxAttempt);
  if (attempt == 0) return base;
  return std::make_shared<PrefixStore>(attempt_prefix(attempt), std::move(base));
}

}  // namespace c10d::inline v1::store
