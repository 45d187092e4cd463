// The FileStore's file (file_store_state.h lists the FileStore's parts): an append-only log of
// records that processes share, locked per operation, and the lock bytes through which the ranks
// of a file:// job hold it.
// Internal to src/store.
//
// Record layout (all integers little-endian):
//
//    0        4      5            9                17
//    +--------+------+------------+----------------+-------------+---------------+
//    | magic  | kind | key length | value length   | key bytes   | value bytes   |
//    | u32    | u8   | u32        | u64            |             |               |
//    +--------+------+------------+----------------+-------------+---------------+
//    magic = 0x46303143, the bytes "C10F"; kind: 1 set, 2 delete (no value), 3 append,
//    4 generation (only as the file's first record: key = generation id, value = its
//    description, "world_size=N\nrun_id=R\nhost=H\npid=P"; see file_store_job.cc).
//
// Locks: open-file-description locks (F_OFD_SETLK), which exclude other open files of the same
// process too, so two FileStores on one path in one process behave as two processes would, and
// which the kernel drops when the last descriptor of the open file closes, however the process
// ends. They lie on single bytes far past the end of any real file, so they never cover data:
//
//   kOpLockByte        exclusive for the length of one operation (every FileStore)
//   kLeaseByte         shared, held by every live member of the file's generation
//   rank_byte(r)       exclusive, held by the live member that is rank r
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/fd.h"

namespace c10d::inline v1::store::file {

#ifndef F_OFD_SETLK
#error "FileStore needs open-file-description locks (F_OFD_SETLK, Linux 3.15 or later)"
#endif

using Clock = std::chrono::steady_clock;

inline constexpr std::uint32_t kRecordMagic = 0x46303143;  // "C10F" as little-endian bytes
inline constexpr std::size_t kRecordHeaderBytes = 17;
enum class RecordKind : std::uint8_t { kSet = 1, kDelete = 2, kAppend = 3, kGeneration = 4 };

inline constexpr off_t kOpLockByte = off_t{1} << 62;
inline constexpr off_t kLeaseByte = kOpLockByte + 1;
inline constexpr off_t rank_byte(int rank) { return kOpLockByte + 2 + rank; }

// Sleeps `backoff`, but not past the deadline, then doubles it up to `max`.
void sleep_backoff(std::chrono::microseconds& backoff, std::chrono::microseconds max,
                   Clock::time_point deadline);

std::uint64_t get_le(const std::uint8_t* in, int bytes);
// One record, encoded as above.
std::string encode(RecordKind kind, std::string_view key, std::span<const std::uint8_t> value);

// The generation record: which job's ranks the file belongs to, and who started it.
struct Generation {
  std::string id;  // 32 random hex digits
  std::int64_t world_size = 0;
  std::string run_id;
  std::string host;
  std::int64_t pid = 0;

  // A new generation, started by this process for a job of `world_size` ranks.
  static Generation start(std::int64_t world_size, std::string run_id);
  // "generation <id> (N ranks, run id 'R', started by H pid P)", for messages.
  std::string describe() const;
  // The record's value, "world_size=N\nrun_id=R\nhost=H\npid=P", and back (nullopt when the
  // text is not one).
  std::string encode() const;
  static std::optional<Generation> decode(std::string id, std::string_view text);
};

using core::Fd;

// Whether this open file could take a lock of `type` (F_RDLCK, F_WRLCK) on `byte` now: false
// when another open file holds one that conflicts. Throws StoreError naming `path` on errors.
bool try_lock(int fd, short type, off_t byte, const std::string& path);
void unlock(int fd, off_t byte);
// Whether another open file holds a lock on `byte` that conflicts with one of `type`.
bool held_by_others(int fd, short type, off_t byte, const std::string& path);

// The file at `path` (created when missing), open and holding the operation lock for the
// lifetime of this object. The open file is the one at `path` when the lock was taken: one
// deleted or replaced meanwhile is let go and the path opened again.
class LockedFile {
 public:
  LockedFile(const std::string& path, Clock::time_point deadline);
  ~LockedFile();  // releases the operation lock (and closes the file unless kept)
  LockedFile(const LockedFile&) = delete;
  LockedFile& operator=(const LockedFile&) = delete;

  int fd() const { return fd_.get(); }
  std::uint64_t size() const { return size_; }
  // The file's identity: it changes when the path is deleted and made again.
  dev_t device() const { return device_; }
  ino_t inode() const { return inode_; }

  // Reads exactly `n` bytes at `offset`; the caller has checked they lie within size().
  void read_at(std::uint8_t* out, std::size_t n, std::uint64_t offset) const;
  // Appends `bytes` at the end (the caller has replayed up to it). On failure, cuts the file
  // back so no torn record is left for other readers, and throws StoreError.
  void append(const std::string& bytes);
  // Cuts the file back to `size` bytes (dropping a torn tail).
  void truncate(std::uint64_t size);
  // Hands the open file over (its operation lock is still released at destruction): a job's
  // member keeps it to hold its lease and rank locks.
  Fd keep();

 private:
  [[noreturn]] void fail(const char* what) const;

  const std::string& path_;
  Fd fd_;
  int locked_fd_ = -1;  // the descriptor whose operation lock this object releases
  std::uint64_t size_ = 0;
  dev_t device_ = 0;
  ino_t inode_ = 0;
};

}  // namespace c10d::inline v1::store::file
