// FileStore: a Store kept in an append-only log file that processes share (the file's layout
// and locks are drawn in file_log.h).
//
// Every operation opens the file, takes the operation lock, replays the records other stores
// appended since this one last read into a local map, appends its own records and unlocks. The
// map is a cache of the log; the file is the truth. Waits poll with backoff.
//
// This file holds the public class: argument checks and each operation as one transaction on
// the file; the shared state and the files that work on it are listed in file_store_state.h.
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "core/check.h"
#include "core/parse.h"
#include "store/file_log.h"
#include "store/file_store_state.h"
#include "store/store_util.h"

namespace c10d::inline v1 {
namespace {

using store::file::LockedFile;
using store::file::RecordKind;
using store::file_store::kLimits;

// The longest run id (C10D_RUN_ID) a generation records.
constexpr std::size_t kMaxRunIdBytes = 256;

std::string who(const std::string& path) { return fmt::format("FileStore '{}'", path); }
void check_key(const std::string& path, std::string_view key) {
  store::check_key(who(path), key, kLimits);
}
void check_value(const std::string& path, std::string_view key, std::size_t size) {
  store::check_value(who(path), key, size, kLimits);
}
void check_keys(const std::string& path, std::span<const std::string> keys) {
  store::check_keys(who(path), keys, kLimits);
}

using store::deadline_after;
using store::describe_keys;
using store::to_bytes;

}  // namespace

FileStore::FileStore(std::filesystem::path path, Milliseconds timeout)
    : Store(timeout), state_(std::make_unique<State>(std::move(path))) {
  // Creates the file, and reports a bad path now rather than later.
  LockedFile file(state_->name, deadline_after(timeout));
}

FileStore::FileStore(std::filesystem::path path, Milliseconds timeout, const FileStoreJob& job)
    : Store(timeout), state_(std::make_unique<State>(std::move(path))) {
  C10D_CHECK(job.world_size >= 1 && job.rank >= 0 && job.rank < job.world_size,
             "FileStore '{}': rank {} is outside a job of {} ranks", state_->name, job.rank,
             job.world_size);
  C10D_CHECK(job.run_id.size() <= kMaxRunIdBytes && job.run_id.find('\n') == std::string::npos,
             "FileStore '{}': run id '{}' must be one line of at most {} bytes", state_->name,
             job.run_id, kMaxRunIdBytes);
  state_->join(job, timeout);
}

FileStore::~FileStore() {
  if (state_->job) state_->leave();
}

const std::filesystem::path& FileStore::path() const { return state_->path; }

void FileStore::set(std::string_view key, std::span<const std::uint8_t> value) {
  check_key(state_->name, key);
  check_value(state_->name, key, value.size());
  state_->transact(deadline_after(timeout()),
                   [&](LockedFile& file) { state_->write(file, RecordKind::kSet, key, value); });
}

Bytes FileStore::get(std::string_view key) {
  check_key(state_->name, key);
  const std::string keys[] = {std::string(key)};
  return std::move(state_->wait_for(keys, timeout(), /*fetch=*/true).front());
}

std::int64_t FileStore::add(std::string_view key, std::int64_t delta) {
  check_key(state_->name, key);
  return state_->transact(deadline_after(timeout()), [&](LockedFile& file) {
    std::int64_t current = 0;
    if (auto it = state_->values.find(key); it != state_->values.end()) {
      const auto parsed = store::parse_int64(it->second);
      C10D_CHECK(parsed.has_value(),
                 "FileStore '{}': add on key '{}' whose value is not a decimal int64", state_->name,
                 key);
      current = *parsed;
    }
    std::int64_t sum = 0;
    C10D_CHECK(!__builtin_add_overflow(current, delta, &sum),
               "FileStore '{}': add of {} to {} on key '{}' overflows int64", state_->name, delta,
               current, key);
    const std::string text = std::to_string(sum);
    state_->write(file, RecordKind::kSet, key, Bytes(text.begin(), text.end()));
    return sum;
  });
}

Bytes FileStore::compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                             std::span<const std::uint8_t> desired) {
  check_key(state_->name, key);
  check_value(state_->name, key, expected.size());
  check_value(state_->name, key, desired.size());
  return state_->transact(deadline_after(timeout()), [&](LockedFile& file) {
    auto it = state_->values.find(key);
    if (it == state_->values.end() && !expected.empty()) return to_bytes(expected);
    if (it != state_->values.end() && !std::ranges::equal(it->second, expected)) return it->second;
    state_->write(file, RecordKind::kSet, key, desired);
    return to_bytes(desired);
  });
}

bool FileStore::check(std::span<const std::string> keys) {
  check_keys(state_->name, keys);
  return state_->transact(deadline_after(timeout()),
                          [&](LockedFile&) { return state_->missing(keys).empty(); });
}

void FileStore::wait(std::span<const std::string> keys, Milliseconds timeout) {
  check_keys(state_->name, keys);
  state_->wait_for(keys, timeout, /*fetch=*/false);
}

bool FileStore::delete_key(std::string_view key) {
  check_key(state_->name, key);
  return state_->transact(deadline_after(timeout()), [&](LockedFile& file) {
    if (state_->values.find(key) == state_->values.end()) return false;
    state_->write(file, RecordKind::kDelete, key, {});
    return true;
  });
}

std::int64_t FileStore::num_keys() {
  return state_->transact(deadline_after(timeout()), [&](LockedFile&) {
    return static_cast<std::int64_t>(state_->values.size());
  });
}

void FileStore::append(std::string_view key, std::span<const std::uint8_t> value) {
  check_key(state_->name, key);
  check_value(state_->name, key, value.size());
  state_->transact(deadline_after(timeout()), [&](LockedFile& file) {
    if (auto it = state_->values.find(key); it != state_->values.end()) {
      check_value(state_->name, key, it->second.size() + value.size());
    }
    state_->write(file, RecordKind::kAppend, key, value);
  });
}

std::vector<Bytes> FileStore::multi_get(std::span<const std::string> keys) {
  check_keys(state_->name, keys);
  return state_->wait_for(keys, timeout(), /*fetch=*/true);
}

void FileStore::multi_set(std::span<const std::string> keys, std::span<const Bytes> values) {
  C10D_CHECK(keys.size() == values.size(), "FileStore '{}': multi_set got {} keys but {} values",
             state_->name, keys.size(), values.size());
  check_keys(state_->name, keys);
  for (std::size_t i = 0; i < keys.size(); ++i) {
    check_value(state_->name, keys[i], values[i].size());
  }
  state_->transact(deadline_after(timeout()), [&](LockedFile& file) {
    // One append for the batch, so a failed write is cut back whole and no reader sees half.
    std::string bytes;
    for (std::size_t i = 0; i < keys.size(); ++i) {
      bytes += State::encode(RecordKind::kSet, keys[i], values[i]);
    }
    file.append(bytes);
    state_->offset = file.size();
    for (std::size_t i = 0; i < keys.size(); ++i) {
      state_->apply(RecordKind::kSet, keys[i], values[i]);
    }
  });
}

}  // namespace c10d::inline v1
