// PrefixStore: namespaces another store's keys as "<prefix>/<key>" and forwards every call.
#include <string>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "core/check.h"

namespace c10d::inline v1 {
namespace {

// The base's timeout, so a PrefixStore starts with the deadline its base was given.
Milliseconds checked_timeout(const std::shared_ptr<Store>& base, const std::string& prefix) {
  C10D_CHECK(base != nullptr, "PrefixStore '{}': the base store is null", prefix);
  return base->timeout();
}

}  // namespace

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> base)
    : Store(checked_timeout(base, prefix)), prefix_(std::move(prefix)), base_(std::move(base)) {}

std::string PrefixStore::key_of(std::string_view key) const {
  std::string out;
  out.reserve(prefix_.size() + 1 + key.size());
  out.append(prefix_).append("/").append(key);
  return out;
}

std::vector<std::string> PrefixStore::keys_of(std::span<const std::string> keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(key_of(key));
  return out;
}

void PrefixStore::set(std::string_view key, std::span<const std::uint8_t> value) {
  base_->set(key_of(key), value);
}

// get and multi_get first wait with this store's own timeout, so set_timeout() on a PrefixStore
// bounds them even when the base was given a longer one.
Bytes PrefixStore::get(std::string_view key) {
  const std::string keys[] = {key_of(key)};
  base_->wait(keys, timeout());
  return base_->get(keys[0]);
}

std::int64_t PrefixStore::add(std::string_view key, std::int64_t delta) {
  return base_->add(key_of(key), delta);
}

Bytes PrefixStore::compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                               std::span<const std::uint8_t> desired) {
  return base_->compare_set(key_of(key), expected, desired);
}

bool PrefixStore::check(std::span<const std::string> keys) { return base_->check(keys_of(keys)); }

void PrefixStore::wait(std::span<const std::string> keys, Milliseconds timeout) {
  base_->wait(keys_of(keys), timeout);
}

bool PrefixStore::delete_key(std::string_view key) { return base_->delete_key(key_of(key)); }

std::int64_t PrefixStore::num_keys() { return base_->num_keys(); }

void PrefixStore::append(std::string_view key, std::span<const std::uint8_t> value) {
  base_->append(key_of(key), value);
}

std::vector<Bytes> PrefixStore::multi_get(std::span<const std::string> keys) {
  const std::vector<std::string> full = keys_of(keys);
  base_->wait(full, timeout());
  return base_->multi_get(full);
}

void PrefixStore::multi_set(std::span<const std::string> keys, std::span<const Bytes> values) {
  C10D_CHECK(keys.size() == values.size(), "PrefixStore '{}': multi_set got {} keys but {} values",
             prefix_, keys.size(), values.size());
  base_->multi_set(keys_of(keys), values);
}

}  // namespace c10d::inline v1
