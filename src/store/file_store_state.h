// FileStore's shared state, FileStore::State, and the parts of the FileStore that work on it, one
// file each (the file's layout and locks are drawn in file_log.h):
//   file_store.cc         the public class: argument checks, each operation as a transaction
//   file_store_replay.cc  the cache of the log: replaying what others appended, cutting a torn
//                         tail, telling corruption, appending records, waiting for keys
//   file_store_job.cc     jobs (FileStoreJob): starting or joining a generation of the file,
//                         the members' locks, leaving
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/store.h"
#include "store/file_log.h"

namespace c10d::inline v1 {

namespace store::file_store {

using file::Clock;

const StoreLimits kLimits{};

// Waits for keys (and for a generation to join) back off from 1 ms to 50 ms.
constexpr std::chrono::microseconds kWaitBackoffFirst{1000};
constexpr std::chrono::microseconds kWaitBackoffMax{50000};

inline std::int64_t elapsed_ms(Clock::time_point start) {
  return std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count();
}

}  // namespace store::file_store

struct FileStore::State {
  using Clock = store::file::Clock;
  using LockedFile = store::file::LockedFile;
  using RecordKind = store::file::RecordKind;

  explicit State(std::filesystem::path p) : path(std::move(p)), name(path.string()) {}

  const std::filesystem::path path;
  const std::string name;  // path as messages show it
  std::mutex mu;           // serializes this object's operations on the cache and the file
  std::map<std::string, Bytes, std::less<>> values;  // GUARDED_BY(mu)
  std::uint64_t offset = 0;  // GUARDED_BY(mu): bytes of the log replayed into `values`
  // GUARDED_BY(mu): the file those bytes came from (set by the first read).
  bool bound = false;
  dev_t device = 0;
  ino_t inode = 0;
  std::optional<store::file::Generation> generation;  // GUARDED_BY(mu): the file's, when it has one
  // A job's member: its rank and the open file holding its lease and rank locks.
  std::optional<FileStoreJob> job;
  store::file::Fd membership;

  // Runs fn(file) with the file locked and `values` up to date; fn appends through write().
  template <typename Fn>
  auto transact(Clock::time_point deadline, Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu);
    LockedFile file(name, deadline);
    check_same_file(file);
    replay(file);
    return fn(file);
  }

  // ---- The cache of the log (file_store_replay.cc). ----
  void check_same_file(const LockedFile& file);
  void forget();
  void replay(LockedFile& file);
  void cut_torn_tail(LockedFile& file, const std::string& what);
  [[noreturn]] void corrupt(const std::string& what) const;
  void apply(RecordKind kind, std::string_view key, Bytes value);
  void write(LockedFile& file, RecordKind kind, std::string_view key,
             std::span<const std::uint8_t> value);
  static std::string encode(RecordKind kind, std::string_view key,
                            std::span<const std::uint8_t> value);
  std::vector<std::string> missing(std::span<const std::string> keys) const;
  std::vector<Bytes> wait_for(std::span<const std::string> keys, Milliseconds timeout, bool fetch);

  // ---- Jobs (file_store_job.cc). ----
  [[noreturn]] void in_use(const FileStoreJob& me, const std::string& why) const;
  void join(const FileStoreJob& me, Milliseconds timeout);
  void start_generation(LockedFile& file, const FileStoreJob& me);
  void take_membership(LockedFile& file, const FileStoreJob& me);
  void leave() noexcept;
};

}  // namespace c10d::inline v1
