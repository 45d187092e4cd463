// TraceRing: the flight recorder's memory of one group: the records (op_record.h) of its last N
// ops, oldest overwritten first. OpRunner adds an op when it is queued and updates it at each
// transition, so every backend built on the runner (TCP, ICI, MPI) records alike;
// flight_recorder.h dumps the rings of a process when an op fails, on abort, on SIGUSR1 or when
// asked (c10d::dump_traces), and trace_json.h writes and reads the dumps.
//
// Ids: an op's id (a dump's record_id) is the number of ops the ring recorded before it; it lives
// in slot id % capacity (a power of two). The op `capacity` later takes the slot over once the op
// there has ended (completed or failed); while that one still runs, the newer op is not recorded
// (its updates find another op in the slot and are dropped). So the op a hung rank sits in is never
// pushed out by the ops queued behind it, and a slot has one writer at a time: add(), then the
// updates of its op, each ordered after the one before by the op's own life.
//
// Cost: no lock and no atomic read-modify-write: about 25 plain stores to add an op and 5 per
// update. Each slot is a seqlock: its writer makes its sequence word odd, stores the words it
// changes, and makes it even again; snapshot() copies a slot and keeps the copy when the sequence
// was even and unchanged around it, else tries again. The slots are mapped zeroed and untouched,
// so a group's ring costs memory for the ops it recorded only. A failed op's error text is kept
// beside the slots under a mutex (failures are rare).
//
// Thread-safety: add() is called by one thread at a time (OpRunner::submit holds the runner's
// mutex); update() by the thread that makes the op's transition; snapshot() from any thread.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "backends/common/op_record.h"
#include "c10d/types.h"

namespace c10d::inline v1::backends {

// A group as dumps name it (PyTorch's pg_config and process_group fields).
struct TraceGroup {
  std::string name;        // pg_config's key: the group id ("0"), or the MPI group's name
  std::string desc;        // what messages call it: "world", "world.3"
  std::uint64_t id = 0;    // pg_id
  std::vector<int> ranks;  // the members' global ranks, in group rank order
  int rank = 0;            // this process's rank in the group
  std::string backend;     // "tcp", "ici", "mpi"

  int global_rank() const {
    return rank >= 0 && static_cast<std::size_t>(rank) < ranks.size() ? ranks[rank] : rank;
  }
};

struct TraceEntry {
  std::uint64_t id = 0;
  // The group's other counter when the op was queued: the point-to-point ops so far for a
  // collective, the collectives so far for a send or receive (PyTorch's p2p_seq_id and
  // collective_seq_id).
  std::uint64_t other_sequence = 0;
  OpRecord record;
  std::int64_t timeout_ms = 0;
  std::string error;  // failed: the error's message
};

class TraceRing {
 public:
  // Room for `capacity` ops, rounded up to a power of two (a slot is found with a mask, not a
  // division).
  TraceRing(TraceGroup group, std::size_t capacity);
  ~TraceRing();
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;

  const TraceGroup& group() const { return group_; }
  std::size_t capacity() const { return capacity_; }

  // Records a queued op (its record's sequence set); returns its id. One caller at a time.
  std::uint64_t add(const OpRecord& record, std::uint64_t other_sequence, Milliseconds timeout);
  // Op `id` moved to `record`'s state, with its timestamps; `error` for a failed one.
  void update(std::uint64_t id, const OpRecord& record, std::string_view error = {});
  // The ops held, oldest first. A slot a writer holds for longer than a few milliseconds (its
  // thread preempted midway) is left out.
  std::vector<TraceEntry> snapshot() const;

  // Whether the group's failure, and an op's failure, were dumped (flight_recorder.cc; under its
  // dump mutex).
  bool group_failure_dumped = false;
  bool op_failure_dumped = false;

 private:
  // A slot's words after its sequence word: the op's id + 1 (0: empty), its transitions (state,
  // started, ended: update() writes these), then what add() writes once: the other sequence
  // number, the timeout and the record's fields (rank, dtype, reduce op, collective, timed and
  // dims packed in one word). Field by field, not the record's bytes: a word read across fields
  // the caller has just stored separately would wait for those stores.
  enum Word : std::size_t {
    kId,
    kState,
    kStarted,
    kEnded,
    kOtherSequence,
    kTimeout,
    kOp,
    kOpSize,
    kSequence,
    kCount,
    kPacked,
    kShape,
    kQueued = kShape + OpRecord::kMaxDims,
    kWords
  };
  // Every word is read and written through std::atomic_ref.
  struct alignas(64) Slot {
    std::uint64_t seq;
    std::array<std::uint64_t, kWords> words;
  };

  Slot& slot(std::uint64_t id) const { return slots_[id & (capacity_ - 1)]; }
  // The writer's part of the seqlock: begin() makes the sequence odd (returns the value end()
  // stores), end() even.
  static std::uint64_t begin(Slot& s);
  static void end(Slot& s, std::uint64_t seq);
  // A consistent copy of `s`'s words; false when a writer held it throughout.
  static bool read(Slot& s, std::array<std::uint64_t, kWords>& out);
  // Whether add() may take `s`: empty, or its op ended (and so done writing).
  static bool free_for_add(Slot& s);
  void keep_error(std::uint64_t id, std::string_view error);

  const TraceGroup group_;
  const std::size_t capacity_;
  Slot* slots_;  // capacity_ slots, mapped zeroed (mmap); op id in slot id % capacity_
  std::atomic<std::uint64_t> next_id_{0};  // written by add() only
  mutable std::mutex errors_mu_;
  std::map<std::uint64_t, std::string> errors_;  // GUARDED_BY(errors_mu_); failed ops', by id
};

}  // namespace c10d::inline v1::backends
