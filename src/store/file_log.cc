#include "store/file_log.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include "c10d/errors.h"
#include "c10d/types.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1::store::file {
namespace {

// Lock retries start short: a lock is held only for the few system calls of one operation.
constexpr std::chrono::microseconds kLockBackoffFirst{50};
constexpr std::chrono::microseconds kLockBackoffMax{5000};

void put_le(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

struct flock byte_lock(short type, off_t byte) {
  struct flock request {};
  request.l_type = type;
  request.l_whence = SEEK_SET;
  request.l_start = byte;
  request.l_len = 1;
  return request;
}

Fd open_file(const std::string& path) {
  int fd;
  do {
    fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) C10D_THROW(StoreError, "FileStore '{}': cannot open: {}", path, std::strerror(errno));
  return Fd(fd);
}

}  // namespace

void sleep_backoff(std::chrono::microseconds& backoff, std::chrono::microseconds max,
                   Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::microseconds>(deadline - Clock::now());
  std::this_thread::sleep_for(std::min(backoff, std::max(left, std::chrono::microseconds(0))));
  backoff = std::min(backoff * 2, max);
}

std::uint64_t get_le(const std::uint8_t* in, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t{in[i]} << (8 * i);
  return value;
}

std::string encode(RecordKind kind, std::string_view key, std::span<const std::uint8_t> value) {
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

Generation Generation::start(std::int64_t world_size, std::string run_id) {
  std::random_device rd;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  Generation g;
  g.id = fmt::format("{:08x}{:08x}{:08x}{:08x}", rd(), rd(), rd(), rd());
  g.world_size = world_size;
  g.run_id = std::move(run_id);
  g.host = host;
  g.pid = ::getpid();
  return g;
}

std::string Generation::describe() const {
  return fmt::format("generation {} ({} ranks, run id '{}', started by {} pid {})", id, world_size,
                     run_id, host, pid);
}

std::string Generation::encode() const {
  return fmt::format("world_size={}\nrun_id={}\nhost={}\npid={}", world_size, run_id, host, pid);
}

std::optional<Generation> Generation::decode(std::string id, std::string_view text) {
  constexpr std::string_view kNames[4] = {"world_size=", "run_id=", "host=", "pid="};
  std::string_view fields[4];
  for (int i = 0; i < 4; ++i) {
    const auto nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    if (!line.starts_with(kNames[i]) || (i < 3) == (nl == std::string_view::npos)) {
      return std::nullopt;
    }
    fields[i] = line.substr(kNames[i].size());
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
  }
  const auto world = core::parse_int(fields[0], 1, std::numeric_limits<int>::max());
  const auto pid = core::parse_int(fields[3], 0, std::numeric_limits<std::int64_t>::max());
  if (!world.value || !pid.value) return std::nullopt;
  Generation g;
  g.id = std::move(id);
  g.world_size = *world.value;
  g.run_id = std::string(fields[1]);
  g.host = std::string(fields[2]);
  g.pid = *pid.value;
  return g;
}

bool try_lock(int fd, short type, off_t byte, const std::string& path) {
  for (;;) {
    struct flock request = byte_lock(type, byte);
    if (::fcntl(fd, F_OFD_SETLK, &request) == 0) return true;
    if (errno == EAGAIN || errno == EACCES) return false;
    if (errno != EINTR) {
      C10D_THROW(StoreError, "FileStore '{}': lock failed: {}", path, std::strerror(errno));
    }
  }
}

void unlock(int fd, off_t byte) {
  struct flock request = byte_lock(F_UNLCK, byte);
  (void)::fcntl(fd, F_OFD_SETLK, &request);
}

bool held_by_others(int fd, short type, off_t byte, const std::string& path) {
  for (;;) {
    struct flock request = byte_lock(type, byte);
    if (::fcntl(fd, F_OFD_GETLK, &request) == 0) return request.l_type != F_UNLCK;
    if (errno != EINTR) {
      C10D_THROW(StoreError, "FileStore '{}': lock query failed: {}", path, std::strerror(errno));
    }
  }
}

LockedFile::LockedFile(const std::string& path, Clock::time_point deadline) : path_(path) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    fd_ = open_file(path);
    std::chrono::microseconds backoff = kLockBackoffFirst;
    while (!try_lock(fd_.get(), F_WRLCK, kOpLockByte, path_)) {
      if (Clock::now() >= deadline) {
        C10D_THROW(TimeoutError, "FileStore '{}': could not lock the file within {} ms", path_,
                   std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count());
      }
      sleep_backoff(backoff, kLockBackoffMax, deadline);
    }
    struct stat st {};
    if (::fstat(fd_.get(), &st) != 0) fail("fstat");
    // The path may have been deleted (and made again) while this waited for the lock: then
    // this open file is no longer the store's, and the path is opened again.
    struct stat now {};
    if (::stat(path_.c_str(), &now) != 0 && errno != ENOENT) fail("stat");
    if (now.st_nlink > 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino) {
      locked_fd_ = fd_.get();
      size_ = static_cast<std::uint64_t>(st.st_size);
      device_ = st.st_dev;
      inode_ = st.st_ino;
      return;
    }
    unlock(fd_.get(), kOpLockByte);
    if (Clock::now() >= deadline) {
      C10D_THROW(TimeoutError, "FileStore '{}': the file kept being replaced for {} ms", path_,
                 std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count());
    }
  }
}

LockedFile::~LockedFile() { unlock(locked_fd_, kOpLockByte); }

Fd LockedFile::keep() { return std::move(fd_); }

void LockedFile::read_at(std::uint8_t* out, std::size_t n, std::uint64_t offset) const {
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

void LockedFile::append(const std::string& bytes) {
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

void LockedFile::truncate(std::uint64_t size) {
  int rc;
  do {
    rc = ::ftruncate(fd_.get(), static_cast<off_t>(size));
  } while (rc != 0 && errno == EINTR);
  if (rc != 0) fail("ftruncate");
  size_ = size;
}

void LockedFile::fail(const char* what) const {
  C10D_THROW(StoreError, "FileStore '{}': {} failed: {}", path_, what, std::strerror(errno));
}

}  // namespace c10d::inline v1::store::file
