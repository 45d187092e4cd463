// TraceRing: the flight recorder's memory of one group: the records (op_record.h) of its last N
// ops, oldest overwritten first. OpRunner adds an op when it is queued and updates it at each
// transition, so every backend built on the runner (TCP, ICI, MPI) records alike;
// flight_recorder.h dumps the rings of a process when an op fails, on abort, on SIGUSR1 or when
// asked (c10d::dump_traces), and trace_json.h writes and reads the dumps.
//
// Ids: an op's id (a dump's record_id) is the number of ops the ring recorded before it; slot
// id % capacity holds it until the op `capacity` later takes the slot, after which updates of
// the old op are dropped (the ring has moved past it).
//
// Cost: one uncontended mutex per add and update (queued, started, ended); no allocation once
// the ring is full, except a failed op's error text.
//
// Thread-safety: every method may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
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
  TraceRing(TraceGroup group, std::size_t capacity);
  TraceRing(const TraceRing&) = delete;
  TraceRing& operator=(const TraceRing&) = delete;

  const TraceGroup& group() const { return group_; }
  std::size_t capacity() const { return capacity_; }

  // Records a queued op (its record's sequence set); returns its id.
  std::uint64_t add(const OpRecord& record, std::uint64_t other_sequence, Milliseconds timeout);
  // Op `id` moved to `record`'s state, with its timestamps; `error` for a failed one.
  void update(std::uint64_t id, const OpRecord& record, std::string_view error = {});
  // The ops held, oldest first.
  std::vector<TraceEntry> snapshot() const;

  // Whether the group's failure, and an op's failure, were dumped (flight_recorder.cc; under its
  // dump mutex).
  bool group_failure_dumped = false;
  bool op_failure_dumped = false;

 private:
  const TraceGroup group_;
  const std::size_t capacity_;
  mutable std::mutex mu_;
  std::vector<TraceEntry> entries_;  // GUARDED_BY(mu_); op id in slot id % capacity_
  std::uint64_t next_id_ = 0;        // GUARDED_BY(mu_)
};

}  // namespace c10d::inline v1::backends
