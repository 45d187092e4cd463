// FileStore's cache of its log (file_store_state.h): every operation replays the records other
// stores appended since this one last read, then appends its own through write().
//
// Lengths are checked against StoreLimits before anything is allocated. A torn tail -- the file
// ends inside a record's header or body -- can only be left by a writer that died mid-append (a
// live one holds the lock until its record is whole), so replay cuts the file back to the end of
// the last whole record (ftruncate, under the lock), logs a warning and goes on; the dead
// writer's operation never happened (of a dead multi_set, a prefix of the keys may remain).
// Every store's read offset is at or before the cut: stores replay only whole records, and a torn
// record starts at the end of the file. A complete header with a bad magic, kind or length is
// corruption, as is a file shorter than what a store has already read, or another file at the
// path than the one it read (deleted and made again): a StoreError naming the path.
#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "core/check.h"
#include "core/logging.h"
#include "store/file_log.h"
#include "store/file_store_state.h"
#include "store/store_util.h"

namespace c10d::inline v1 {
namespace {

using store::deadline_after;
using store::describe_keys;
using store::to_bytes;
using store::file::Generation;
using store::file::get_le;
using store::file::kRecordHeaderBytes;
using store::file::kRecordMagic;
using store::file::sleep_backoff;
using store::file_store::elapsed_ms;
using store::file_store::kLimits;
using store::file_store::kWaitBackoffFirst;
using store::file_store::kWaitBackoffMax;

}  // namespace

// What this store read came from the file now at the path, or the store has read nothing.
void FileStore::State::check_same_file(const LockedFile& file) {
  if (bound && (file.device() != device || file.inode() != inode)) {
    if (offset != 0) {
      C10D_THROW(StoreError,
                 "FileStore '{}': the file was deleted and made again since this store read "
                 "{} bytes of it (a file:// job's last rank deletes it when it leaves, and a "
                 "new job's rank 0 starts over): whatever this store knew is gone",
                 name, offset);
    }
  }
  bound = true;
  device = file.device();
  inode = file.inode();
}

// Drops everything read, to read a (possibly other) file from its start.
void FileStore::State::forget() {
  values.clear();
  offset = 0;
  bound = false;
  generation.reset();
}

// Applies the records appended since `offset`, cutting off a torn tail (see the top).
void FileStore::State::replay(LockedFile& file) {
  const std::uint64_t size = file.size();
  if (size < offset) {
    // Recovery never cuts below a store's offset, so whole records were lost: not a crash.
    C10D_THROW(StoreError,
               "FileStore '{}': the file shrank to {} bytes, below offset {} already read: "
               "whole records were lost, not a torn tail",
               name, size, offset);
  }
  while (offset < size) {
    if (size - offset < kRecordHeaderBytes) return cut_torn_tail(file, "a record header");
    std::array<std::uint8_t, kRecordHeaderBytes> header;
    file.read_at(header.data(), header.size(), offset);
    const std::uint64_t magic = get_le(&header[0], 4);
    const std::uint8_t kind = header[4];
    const std::uint64_t key_len = get_le(&header[5], 4);
    const std::uint64_t value_len = get_le(&header[9], 8);
    if (magic != kRecordMagic) corrupt(fmt::format("bad record magic {:#010x}", magic));
    if (kind < 1 || kind > 4) corrupt(fmt::format("unknown record kind {}", kind));
    if (key_len > kLimits.max_key_bytes || value_len > kLimits.max_value_bytes) {
      corrupt(fmt::format("a key of {} / value of {} bytes, over the limits {} / {}", key_len,
                          value_len, kLimits.max_key_bytes, kLimits.max_value_bytes));
    }
    const std::uint64_t body = key_len + value_len;
    if (size - offset - kRecordHeaderBytes < body) {
      return cut_torn_tail(file, fmt::format("a record of {} bytes", kRecordHeaderBytes + body));
    }
    std::string key(key_len, '\0');
    file.read_at(reinterpret_cast<std::uint8_t*>(key.data()), key.size(),
                 offset + kRecordHeaderBytes);
    Bytes value(value_len);
    file.read_at(value.data(), value.size(), offset + kRecordHeaderBytes + key_len);
    const auto record_kind = static_cast<RecordKind>(kind);
    if (record_kind == RecordKind::kGeneration) {
      if (offset != 0) corrupt("a generation record past the start of the file");
      generation = Generation::decode(
          std::move(key),
          std::string_view(reinterpret_cast<const char*>(value.data()), value.size()));
      if (!generation) corrupt("a generation record that does not describe one");
      offset += kRecordHeaderBytes + body;
      continue;
    }
    if (record_kind == RecordKind::kAppend) {
      auto it = values.find(key);
      if (it != values.end() && it->second.size() + value.size() > kLimits.max_value_bytes) {
        corrupt(fmt::format("an append past the value limit of {} bytes", kLimits.max_value_bytes));
      }
    }
    apply(record_kind, key, std::move(value));
    offset += kRecordHeaderBytes + body;
  }
}

// The file ends inside the record at `offset`, left by a writer that died mid-append.
void FileStore::State::cut_torn_tail(LockedFile& file, const std::string& what) {
  const std::uint64_t dropped = file.size() - offset;
  file.truncate(offset);
  C10D_LOG_WARN(
      "FileStore '{}': cut a torn record at offset {} ({} bytes dropped; the file ended "
      "inside {}), left by a writer that died or failed mid-append",
      name, offset, dropped, what);
}

[[noreturn]] void FileStore::State::corrupt(const std::string& what) const {
  C10D_THROW(StoreError, "FileStore '{}': corrupt log at offset {}: {}", name, offset, what);
}

void FileStore::State::apply(RecordKind kind, std::string_view key, Bytes value) {
  auto it = values.find(key);
  if (kind == RecordKind::kDelete) {
    if (it != values.end()) values.erase(it);
  } else if (it == values.end()) {
    values.emplace(std::string(key), std::move(value));
  } else if (kind == RecordKind::kSet) {
    it->second = std::move(value);
  } else {
    it->second.insert(it->second.end(), value.begin(), value.end());
  }
}

// Appends one record to the file and applies it to the cache.
void FileStore::State::write(LockedFile& file, RecordKind kind, std::string_view key,
                             std::span<const std::uint8_t> value) {
  std::string bytes = encode(kind, key, value);
  file.append(bytes);
  offset = file.size();
  apply(kind, key, to_bytes(value));
}

std::string FileStore::State::encode(RecordKind kind, std::string_view key,
                                     std::span<const std::uint8_t> value) {
  return store::file::encode(kind, key, value);
}

std::vector<std::string> FileStore::State::missing(std::span<const std::string> keys) const {
  std::vector<std::string> out;
  for (const std::string& key : keys) {
    if (values.find(key) == values.end()) out.push_back(key);
  }
  return out;
}

// Polls until every key exists, then returns their values (when `fetch`), or throws
// TimeoutError naming the path, the keys still missing, the time waited and the timeout.
std::vector<Bytes> FileStore::State::wait_for(std::span<const std::string> keys,
                                              Milliseconds timeout, bool fetch) {
  const Clock::time_point start = Clock::now();
  const Clock::time_point deadline = deadline_after(timeout);
  std::chrono::microseconds backoff = kWaitBackoffFirst;
  for (;;) {
    std::vector<std::string> absent;
    std::vector<Bytes> found = transact(deadline, [&](LockedFile&) {
      std::vector<Bytes> out;
      absent = missing(keys);
      if (absent.empty() && fetch) {
        for (const std::string& key : keys) out.push_back(values.find(key)->second);
      }
      return out;
    });
    if (absent.empty()) return found;
    if (Clock::now() >= deadline) {
      C10D_THROW(TimeoutError,
                 "FileStore '{}': timed out after {} ms (timeout {} ms) waiting for keys {}", name,
                 elapsed_ms(start), timeout.count(), describe_keys(absent));
    }
    sleep_backoff(backoff, kWaitBackoffMax, deadline);
  }
}

}  // namespace c10d::inline v1
