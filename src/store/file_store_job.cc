// FileStore jobs (FileStoreJob; what file:// rendezvous makes; the state is file_store_state.h):
// the ranks of a job meet in a generation of the file, so that nothing is read from an earlier
// run's file or from another live job's.
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
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <utility>

#include "c10d/errors.h"
#include "core/check.h"
#include "core/logging.h"
#include "store/file_log.h"
#include "store/file_store_state.h"
#include "store/store_util.h"

namespace c10d::inline v1 {
namespace {

using store::deadline_after;
using store::file::Fd;
using store::file::Generation;
using store::file::held_by_others;
using store::file::kLeaseByte;
using store::file::rank_byte;
using store::file::sleep_backoff;
using store::file_store::elapsed_ms;
using store::file_store::kWaitBackoffFirst;
using store::file_store::kWaitBackoffMax;

// How long rank 0 waits for the ranks of a job whose rank 0 has left to end (a job that is
// ending: its ranks leave one by one) before it calls the file in use.
constexpr Milliseconds kEndingGrace{5000};
// How long a leaving member tries for the lock before it gives up deleting the file.
constexpr Milliseconds kLeaveTimeout{5000};

}  // namespace

[[noreturn]] void FileStore::State::in_use(const FileStoreJob& me, const std::string& why) const {
  C10D_THROW(StoreError,
             "FileStore '{}' is in use by another job: its {} still has live members{}; this "
             "is rank {} of {} (run id '{}'). Give each job a file of its own, or wait for the "
             "other to end",
             name, generation ? generation->describe() : "file", why, me.rank, me.world_size,
             me.run_id);
}

// Makes this store rank `me.rank` of the file's current generation (rank 0: of a new one).
void FileStore::State::join(const FileStoreJob& me, Milliseconds timeout) {
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
          in_use(me, fmt::format(", and {} ranks, not {}", generation->world_size, me.world_size));
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
      in_use(me,
             fmt::format(" but not its rank 0 (waited {} ms for them to end)", elapsed_ms(start)));
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
void FileStore::State::start_generation(LockedFile& file, const FileStoreJob& me) {
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
void FileStore::State::take_membership(LockedFile& file, const FileStoreJob& me) {
  if (!store::file::try_lock(file.fd(), F_RDLCK, kLeaseByte, name) ||
      !store::file::try_lock(file.fd(), F_WRLCK, rank_byte(me.rank), name)) {
    in_use(me, fmt::format(", and its rank {} is a live process already", me.rank));
  }
  job = me;
  membership = file.keep();
}

// The member leaves; the last one out deletes the file. Never throws.
void FileStore::State::leave() noexcept {
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

}  // namespace c10d::inline v1
