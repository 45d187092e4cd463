// FileStore: a Store kept in an append-only log file that processes share.
//
// Every operation opens the file, takes an exclusive lock on it, replays the records other
// stores appended since this one last read into a local map, appends its own records and
// unlocks. The map is a cache of the log; the file is the truth. Waits poll with backoff.
//
// Record layout (all integers little-endian):
//
//    0        4      5            9                17
//    +--------+------+------------+----------------+-------------+---------------+
//    | magic  | kind | key length | value length   | key bytes   | value bytes   |
//    | u32    | u8   | u32        | u64            |             |               |
//    +--------+------+------------+----------------+-------------+---------------+
//    magic = 0x46303143, the bytes "C10F"; kind: 1 set, 2 delete (no value), 3 append.
//
// Lengths are checked against StoreLimits before anything is allocated. A torn tail -- the file
// ends inside a record's header or body -- can only be left by a writer that died mid-append (a
// live one holds the lock until its record is whole), so replay cuts the file back to the end of
// the last whole record (ftruncate, under the lock), logs a warning and goes on; the dead
// writer's operation never happened (of a dead multi_set, a prefix of the keys may remain).
// Every store's read offset is at or before the cut: stores replay only whole records, and a torn
// record starts at the end of the file. A complete header with a bad magic, kind or length is
// corruption, as is a file shorter than what a store has already read: a StoreError naming the
// path and the offset.
// Locks are open-file-description locks (F_OFD_SETLK; flock where those do not exist): they
// exclude other open files of the same process too, so two FileStores on one path in one
// process behave as two processes would.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "core/check.h"
#include "core/logging.h"
#include "store/store_util.h"

namespace c10d {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kRecordMagic = 0x46303143;  // "C10F" as little-endian bytes
constexpr std::size_t kRecordHeaderBytes = 17;
enum class RecordKind : std::uint8_t { kSet = 1, kDelete = 2, kAppend = 3 };

const StoreLimits kLimits{};

// Polling intervals: waits for keys back off from 1 ms to 50 ms; lock retries start shorter,
// since a lock is held only for the few system calls of one operation.
constexpr std::chrono::microseconds kWaitBackoffFirst{1000};
constexpr std::chrono::microseconds kWaitBackoffMax{50000};
constexpr std::chrono::microseconds kLockBackoffFirst{50};
constexpr std::chrono::microseconds kLockBackoffMax{5000};

// Sleeps `backoff`, but not past the deadline, then doubles it up to `max`.
void sleep_backoff(std::chrono::microseconds& backoff, std::chrono::microseconds max,
                   Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
  std::this_thread::sleep_for(std::min(backoff, std::max(left, std::chrono::microseconds(0))));
  backoff = std::min(backoff * 2, max);
}

std::int64_t elapsed_ms(Clock::time_point start) {
  return std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count();
}

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

std::uint64_t get_le(const std::uint8_t* in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t{in[i]} << (8 * i);
  return value;
}

// Owns a file descriptor.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

Fd open_file(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) C10D_THROW(StoreError, "FileStore '{}': cannot open: {}", path, std::strerror(errno));
  return Fd(fd);
}

// The file, open and exclusively locked for the lifetime of this object.
class LockedFile {
 public:
  LockedFile(const std::string& path, Clock::time_point deadline)
      : path_(path), fd_(open_file(path)) {
    const Clock::time_point start = Clock::now();
    std::chrono::microseconds backoff = kLockBackoffFirst;
    while (!try_lock()) {
      if (Clock::now() >= deadline) {
        C10D_THROW(TimeoutError, "FileStore '{}': could not lock the file within {} ms", path_,
                   elapsed_ms(start));
      }
      sleep_backoff(backoff, kLockBackoffMax, deadline);
    }
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) fail("fstat");
    size_ = static_cast<std::uint64_t>(st.st_size);
  }
  ~LockedFile() { unlock(); }  // closing the fd afterwards would release the lock anyway
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  std::uint64_t size() const { return size_; }

  // Reads exactly `n` bytes at `offset`; the caller has checked they lie within size().
  void read_at(std::uint8_t* out, std::size_t n, std::uint64_t offset) const {
    while (n > 0) {
      const ssize_t got = ::pread(fd_.get(), out, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) fail("read");
      if (got == 0) {
        C10D_THROW(StoreError, "FileStore '{}': the file ended early at offset {}", path_, offset);
      }
      out += got;
      n -= static_cast<std::size_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
  }

  // Appends `bytes` at the end (the caller has replayed up to it). On failure, cuts the file
  // back so no torn record is left for other readers, and throws StoreError.
  void append(const std::string& bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t put = ::pwrite(fd_.get(), bytes.data() + done, bytes.size() - done,
                                   static_cast<off_t>(size_ + done));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) {
        const int saved = errno;
        if (::ftruncate(fd_.get(), static_cast<off_t>(size_)) != 0) {
          C10D_LOG_ERROR("FileStore '{}': could not cut a torn record at offset {} (replay will)",
                         path_, size_);
        }
        errno = saved;
        fail("write");
      }
      done += static_cast<std::size_t>(put);
    }
    size_ += bytes.size();
  }

  // Cuts the file back to `size` bytes (dropping a torn tail).
  void truncate(std::uint64_t size) {
    int rc;
    do {
      rc = ::ftruncate(fd_.get(), static_cast<off_t>(size));
    } while (rc != 0 && errno == EINTR);
    if (rc != 0) fail("ftruncate");
    size_ = size;
  }

 private:
  bool try_lock() {
    for (;;) {
#ifdef F_OFD_SETLK
      struct flock request {};
      request.l_type = F_WRLCK;
      request.l_whence = SEEK_SET;  // l_start = l_len = 0: the whole file, however long
      if (::fcntl(fd_.get(), F_OFD_SETLK, &request) == 0) return true;
      if (errno == EAGAIN || errno == EACCES) return false;
#else
      if (::flock(fd_.get(), LOCK_EX | LOCK_NB) == 0) return true;
      if (errno == EWOULDBLOCK) return false;
#endif
      if (errno != EINTR) fail("lock");
    }
  }

  void unlock() {
#ifdef F_OFD_SETLK
    struct flock request {};
    request.l_type = F_UNLCK;
    request.l_whence = SEEK_SET;
    (void)::fcntl(fd_.get(), F_OFD_SETLK, &request);
#else
    (void)::flock(fd_.get(), LOCK_UN);
#endif
  }

  [[noreturn]] void fail(const char* what) const {
    C10D_THROW(StoreError, "FileStore '{}': {} failed: {}", path_, what, std::strerror(errno));
  }

  const std::string& path_;
  Fd fd_;
  std::uint64_t size_ = 0;
};

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

  // Runs fn(file) with the file locked and `values` up to date; fn appends through write().
  template <typename Fn>
  auto transact(Clock::time_point deadline, Fn&& fn) {
    std::lock_guard<std::mutex> lock(mu);
    LockedFile file(name, deadline);
    replay(file);
    return fn(file);
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
      if (kind < 1 || kind > 3) corrupt(fmt::format("unknown record kind {}", kind));
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
    std::string out;
    out.reserve(kRecordHeaderBytes + key.size() + value.size());
    put_le(out, kRecordMagic, 4);
    put_le(out, static_cast<std::uint8_t>(kind), 1);
    put_le(out, key.size(), 4);
    put_le(out, value.size(), 8);
    out.append(key);
    out.append(reinterpret_cast<const char*>(value.data()), value.size());
    return out;
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
};

FileStore::FileStore(std::filesystem::path path, Milliseconds timeout)
    : Store(timeout), state_(std::make_unique<State>(std::move(path))) {
  open_file(state_->name);  // creates the file, and reports a bad path now rather than later
}

FileStore::~FileStore() = default;

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

}  // namespace c10d
