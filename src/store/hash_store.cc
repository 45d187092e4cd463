// HashStore: the in-process Store, a map under one mutex with a condition variable that wakes
// waiters whenever a key is written. Semantics are the ones documented in c10d/store.h.
#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "core/check.h"
#include "store/store_util.h"

namespace c10d::inline v1 {
namespace {

using Clock = std::chrono::steady_clock;

const StoreLimits kLimits{};

constexpr std::string_view kWho = "HashStore";

void check_key(std::string_view key) { store::check_key(kWho, key, kLimits); }
void check_value(std::string_view key, std::size_t size) {
  store::check_value(kWho, key, size, kLimits);
}
void check_keys(std::span<const std::string> keys) { store::check_keys(kWho, keys, kLimits); }

std::int64_t parse_int64(std::string_view key, const Bytes& value) {
  const auto parsed = store::parse_int64(value);
  C10D_CHECK(parsed.has_value(), "HashStore: add on key '{}' whose value is not a decimal int64",
             key);
  return *parsed;
}

using store::deadline_after;
using store::describe_keys;
using store::to_bytes;

}  // namespace

struct HashStore::State {
  std::mutex mu;
  std::condition_variable changed;                   // notified after every write
  std::map<std::string, Bytes, std::less<>> values;  // GUARDED_BY(mu)

  std::vector<std::string> missing(std::span<const std::string> keys) const {
    std::vector<std::string> out;
    for (const std::string& key : keys) {
      if (values.find(key) == values.end()) out.push_back(key);
    }
    return out;
  }

  // Blocks (holding `lock` while checking) until every key exists or the timeout passes.
  void wait_for_keys(std::unique_lock<std::mutex>& lock, std::span<const std::string> keys,
                     Milliseconds timeout) {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = deadline_after(timeout);
    const bool present = changed.wait_until(lock, deadline, [&] { return missing(keys).empty(); });
    if (present) return;
    const auto waited = std::chrono::duration_cast<Milliseconds>(Clock::now() - start);
    C10D_THROW(TimeoutError, "HashStore: timed out after {} ms (timeout {} ms) waiting for keys {}",
               waited.count(), timeout.count(), describe_keys(missing(keys)));
  }

  void store(std::string_view key, Bytes value) {
    auto it = values.find(key);
    if (it == values.end()) {
      values.emplace(std::string(key), std::move(value));
    } else {
      it->second = std::move(value);
    }
  }
};

HashStore::HashStore(Milliseconds timeout) : Store(timeout), state_(std::make_unique<State>()) {}

HashStore::~HashStore() = default;

void HashStore::set(std::string_view key, std::span<const std::uint8_t> value) {
  check_key(key);
  check_value(key, value.size());
  Bytes copy = to_bytes(value);  // copied before taking the lock
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->store(key, std::move(copy));
  }
  state_->changed.notify_all();
}

Bytes HashStore::get(std::string_view key) {
  check_key(key);
  const std::string keys[] = {std::string(key)};
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->wait_for_keys(lock, keys, timeout());
  return state_->values.find(key)->second;
}

std::int64_t HashStore::add(std::string_view key, std::int64_t delta) {
  check_key(key);
  std::int64_t sum = 0;
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->values.find(key);
    const std::int64_t current = it == state_->values.end() ? 0 : parse_int64(key, it->second);
    C10D_CHECK(!__builtin_add_overflow(current, delta, &sum),
               "HashStore: add of {} to {} on key '{}' overflows int64", delta, current, key);
    const std::string text = std::to_string(sum);
    state_->store(key, Bytes(text.begin(), text.end()));
  }
  state_->changed.notify_all();
  return sum;
}

Bytes HashStore::compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                             std::span<const std::uint8_t> desired) {
  check_key(key);
  check_value(key, expected.size());
  check_value(key, desired.size());
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->values.find(key);
    if (it == state_->values.end()) {
      if (!expected.empty()) return to_bytes(expected);
      state_->values.emplace(std::string(key), to_bytes(desired));
    } else if (std::ranges::equal(it->second, expected)) {
      it->second = to_bytes(desired);
    } else {
      return it->second;
    }
  }
  state_->changed.notify_all();
  return to_bytes(desired);
}

bool HashStore::check(std::span<const std::string> keys) {
  check_keys(keys);
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->missing(keys).empty();
}

void HashStore::wait(std::span<const std::string> keys, Milliseconds timeout) {
  check_keys(keys);
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->wait_for_keys(lock, keys, timeout);
}

bool HashStore::delete_key(std::string_view key) {
  check_key(key);
  std::lock_guard<std::mutex> lock(state_->mu);
  auto it = state_->values.find(key);
  if (it == state_->values.end()) return false;
  state_->values.erase(it);
  return true;
}

std::int64_t HashStore::num_keys() {
  std::lock_guard<std::mutex> lock(state_->mu);
  return static_cast<std::int64_t>(state_->values.size());
}

void HashStore::append(std::string_view key, std::span<const std::uint8_t> value) {
  check_key(key);
  check_value(key, value.size());
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    auto it = state_->values.find(key);
    if (it == state_->values.end()) {
      state_->values.emplace(std::string(key), to_bytes(value));
    } else {
      check_value(key, it->second.size() + value.size());
      it->second.insert(it->second.end(), value.begin(), value.end());
    }
  }
  state_->changed.notify_all();
}

std::vector<Bytes> HashStore::multi_get(std::span<const std::string> keys) {
  check_keys(keys);
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->wait_for_keys(lock, keys, timeout());
  std::vector<Bytes> out;
  out.reserve(keys.size());
  for (const std::string& key : keys) out.push_back(state_->values.find(key)->second);
  return out;
}

void HashStore::multi_set(std::span<const std::string> keys, std::span<const Bytes> values) {
  C10D_CHECK(keys.size() == values.size(), "HashStore: multi_set got {} keys but {} values",
             keys.size(), values.size());
  check_keys(keys);
  for (std::size_t i = 0; i < keys.size(); ++i) check_value(keys[i], values[i].size());
  {
    // One critical section, so a reader sees all of the values or none of them.
    std::lock_guard<std::mutex> lock(state_->mu);
    for (std::size_t i = 0; i < keys.size(); ++i) state_->store(keys[i], values[i]);
  }
  state_->changed.notify_all();
}

}  // namespace c10d::inline v1
