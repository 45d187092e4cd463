// FileStore: a Store kept in an append-only log file that processes share (the file's layout
// and locks are drawn in file_log.h).
//
// Every operation opens the file, takes the operation lock, replays the records other stores
// appended since this one last read into a local map, appends its own records and unlocks. The
// map is a cache of the log; the file is the truth. Waits poll with backoff.
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
//
// Jobs (FileStoreJob; what file:// rendezvous makes): the ranks of a job meet in a generation of
// the file, so that nothing is read from an earlier run's file or from another live job's.
//  - Rank 0 starts it. Under the operation lock, when no live process holds the lease byte, it
//    deletes whatever is at the path and writes a new file whose first record is the
//    generation (a random id, the world size, the run id, its host and pid); then it takes the
//    lease (shared) and its rank byte (exclusive). When a live generation with its rank 0 holds
//    the file, rank 0 fails at once: the file is in use by another job. When only other
//    members of one still run, it waits for them to end, for up to kEndingGrace.
//  - Every other rank's constructor waits (up to its timeout) until the file holds a live
//    generation whose rank 0 is there, so no key of an earlier run ever reaches its caller (an
//    empty file, one without a generation, or one whose members are all gone was left by an
//    earlier run). It joins when the world size and the
//    run id match and its rank byte is free, taking the lease and its rank byte; otherwise the
//    file is in use by another job, and it fails at once.
//  - Members hold their locks through one open file for the store's life; the kernel drops them
//    when the process ends, however it ends. The last member to leave deletes the file.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"
#include "store/file_log.h"
#include "store/store_util.h"

namespace c10d::inline v1 {
namespace {

using store::file::Clock;
using store::file::Fd;
using store::file::Generation;
using store::file::get_le;
using store::file::held_by_others;
using store::file::kLeaseByte;
using store::file::kRecordHeaderBytes;
using store::file::kRecordMagic;
using store::file::LockedFile;
using store::file::rank_byte;
using store::file::RecordKind;
using store::file::sleep_backoff;

const StoreLimits kLimits{};

// Waits for keys (and for a generation to join) back off from 1 ms to 50 ms.
constexpr std::chrono::microseconds kWaitBackoffFirst{1000};
constexpr std::chrono::microseconds kWaitBackoffMax{50000};
// The longest run id (C10D_RUN_ID) a generation records.
constexpr std::size_t kMaxRunIdBytes = 256;
// How long rank 0 waits for the ranks of a job whose rank 0 has left to end (a job that is
// ending: its ranks leave one by one) before it calls the file in use.
constexpr Milliseconds kEndingGrace{5000};
// How long a leaving member tries for the lock before it gives up deleting the file.
constexpr Milliseconds kLeaveTimeout{5000};

std::int64_t elapsed_ms(Clock::time_point start) {
  return std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count();
}

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

struct FileStore::State {
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
  std::optional<Generation> generation;  // GUARDED_BY(mu): the file's, when it has one
  // A job's member: its rank and the open file holding its lease and rank locks.
  std::optional<FileStoreJob> job;
  Fd membership;

  // Runs fn(file) with the file locked and `values` up to date; fn appends through write().
  template <typename Fn>
  auto transact(Clock::time_point deadline, Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu);
    LockedFile file(name, deadline);
    check_same_file(file);
    replay(file);
    return fn(file);
  }

  // What this store read came from the file now at the path, or the store has read nothing.
  void check_same_file(const LockedFile& file) {
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
  void forget() {
    values.clear();
    offset = 0;
    bound = false;
    generation.reset();
  }

  // Applies the records appended since `offset`, cutting off a torn tail (see the top).
  void replay(LockedFile& file) {
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
          corrupt(
              fmt::format("an append past the value limit of {} bytes", kLimits.max_value_bytes));
        }
      }
      apply(record_kind, key, std::move(value));
      offset += kRecordHeaderBytes + body;
    }
  }

  // The file ends inside the record at `offset`, left by a writer that died mid-append.
  void cut_torn_tail(LockedFile& file, const std::string& what) {
    const std::uint64_t dropped = file.size() - offset;
    file.truncate(offset);
    C10D_LOG_WARN(
        "FileStore '{}': cut a torn record at offset {} ({} bytes dropped; the file ended "
        "inside {}), left by a writer that died or failed mid-append",
        name, offset, dropped, what);
  }

  [[noreturn]] void corrupt(const std::string& what) const {
    C10D_THROW(StoreError, "FileStore '{}': corrupt log at offset {}: {}", name, offset, what);
  }

  void apply(RecordKind kind, std::string_view key, Bytes value) {
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
  void write(LockedFile& file, RecordKind kind, std::string_view key,
             std::span<const std::uint8_t> value) {
    std::string bytes = encode(kind, key, value);
    file.append(bytes);
    offset = file.size();
    apply(kind, key, to_bytes(value));
  }

  static std::string encode(RecordKind kind, std::string_view key,
                            std::span<const std::uint8_t> value) {
    return store::file::encode(kind, key, value);
  }

  std::vector<std::string> missing(std::span<const std::string> keys) const {
    std::vector<std::string> out;
    for (const std::string& key : keys) {
      if (values.find(key) == values.end()) out.push_back(key);
    }
    return out;
  }

  // Polls until every key exists, then returns their values (when `fetch`), or throws
  // TimeoutError naming the path, the keys still missing, the time waited and the timeout.
  std::vector<Bytes> wait_for(std::span<const std::string> keys, Milliseconds timeout, bool fetch) {
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
                   "FileStore '{}': timed out after {} ms (timeout {} ms) waiting for keys {}",
                   name, elapsed_ms(start), timeout.count(), describe_keys(absent));
      }
      sleep_backoff(backoff, kWaitBackoffMax, deadline);
    }
  }

  // ---- Jobs (see the top) ----

  [[noreturn]] void in_use(const FileStoreJob& me, const std::string& why) const {
    C10D_THROW(StoreError,
               "FileStore '{}' is in use by another job: its {} still has live members{}; this "
               "is rank {} of {} (run id '{}'). Give each job a file of its own, or wait for the "
               "other to end",
               name, generation ? generation->describe() : "file", why, me.rank, me.world_size,
               me.run_id);
  }

  // Makes this store rank `me.rank` of the file's current generation (rank 0: of a new one).
  void join(const FileStoreJob& me, Milliseconds timeout) {
    const Clock::time_point start = Clock::now();
    const Clock::time_point deadline = deadline_after(timeout);
    std::chrono::microseconds backoff = kWaitBackoffFirst;
    std::string found;  // what the file held at the last look, for the timeout message
    for (;;) {
      {
        std::lock_guard<std::mutex> lock(mu);
        LockedFile file(name, deadline);
        forget();  // not a member yet: every look reads the file afresh
        check_same_file(file);
        replay(file);
        const bool live = held_by_others(file.fd(), F_WRLCK, kLeaseByte, name);
        const bool led = live && held_by_others(file.fd(), F_WRLCK, rank_byte(0), name);
        if (me.rank == 0 && !live) {
          if (file.size() > 0) {
            // An earlier run's file (or a file that is no job's): start from a new one.
            if (::unlink(name.c_str()) != 0 && errno != ENOENT) {
              C10D_THROW(StoreError, "FileStore '{}': cannot delete the stale file: {}", name,
                         std::strerror(errno));
            }
            C10D_LOG_INFO("FileStore '{}': rank 0 deleted a file no live job holds ({})", name,
                          generation ? generation->describe() : "no generation");
            continue;
          }
          start_generation(file, me);
          return;
        }
        if (me.rank == 0 && led) in_use(me, "");
        if (me.rank != 0 && generation && led) {
          if (generation->world_size != me.world_size) {
            in_use(me,
                   fmt::format(", and {} ranks, not {}", generation->world_size, me.world_size));
          }
          if (generation->run_id != me.run_id) {
            in_use(me, fmt::format(", and run id '{}', not '{}'", generation->run_id, me.run_id));
          }
          if (held_by_others(file.fd(), F_WRLCK, rank_byte(me.rank), name)) {
            in_use(me, fmt::format(", and its rank {} is a live process already", me.rank));
          }
          take_membership(file, me);
          return;
        }
        if (!generation) {
          found = file.size() == 0 ? "the file is empty" : "the file holds no generation";
        } else if (!live) {
          found = "the file holds " + generation->describe() + " of an earlier job, all gone";
        } else {
          found = "the file holds " + generation->describe() +
                  ", whose rank 0 has left while other members still run";
        }
      }
      if (me.rank == 0 && (Clock::now() - start >= kEndingGrace || Clock::now() >= deadline)) {
        in_use(me, fmt::format(" but not its rank 0 (waited {} ms for them to end)",
                               elapsed_ms(start)));
      }
      if (Clock::now() >= deadline) {
        C10D_THROW(TimeoutError,
                   "FileStore '{}': rank {} of {} timed out after {} ms (timeout {} ms) waiting "
                   "for rank 0 to start this job's generation ({})",
                   name, me.rank, me.world_size, elapsed_ms(start), timeout.count(), found);
      }
      sleep_backoff(backoff, kWaitBackoffMax, deadline);
    }
  }

  // Under the operation lock, in an empty file no live job holds.
  void start_generation(LockedFile& file, const FileStoreJob& me) {
    Generation g = Generation::start(me.world_size, me.run_id);
    const std::string text = g.encode();
    file.append(encode(RecordKind::kGeneration, g.id,
                       {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()}));
    offset = file.size();
    generation = std::move(g);
    take_membership(file, me);
    C10D_LOG_INFO("FileStore '{}': rank 0 started {}", name, generation->describe());
  }

  // Under the operation lock: takes the lease and the rank's byte through this open file, and
  // keeps it open for the store's life.
  void take_membership(LockedFile& file, const FileStoreJob& me) {
    if (!store::file::try_lock(file.fd(), F_RDLCK, kLeaseByte, name) ||
        !store::file::try_lock(file.fd(), F_WRLCK, rank_byte(me.rank), name)) {
      in_use(me, fmt::format(", and its rank {} is a live process already", me.rank));
    }
    job = me;
    membership = file.keep();
  }

  // The member leaves; the last one out deletes the file. Never throws.
  void leave() noexcept {
    try {
      std::lock_guard<std::mutex> lock(mu);
      LockedFile file(name, deadline_after(kLeaveTimeout));
      store::file::unlock(membership.get(), rank_byte(job->rank));
      store::file::unlock(membership.get(), kLeaseByte);
      if (file.device() == device && file.inode() == inode &&
          !held_by_others(file.fd(), F_WRLCK, kLeaseByte, name)) {
        ::unlink(name.c_str());
      }
    } catch (const std::exception& e) {
      C10D_LOG_WARN("FileStore '{}': rank {} could not tidy up as it left: {}", name, job->rank,
                    e.what());
    }
    membership = Fd();  // whatever happened above, the locks go with the open file
  }
};

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
