#include "backends/common/trace_ring.h"

#include <utility>

#include "core/check.h"

namespace c10d::inline v1::backends {

TraceRing::TraceRing(TraceGroup group, std::size_t capacity)
    : group_(std::move(group)), capacity_(capacity) {
  C10D_CHECK(capacity_ > 0, "a trace ring of group {} needs room for at least one op", group_.desc);
}

std::uint64_t TraceRing::add(const OpRecord& record, std::uint64_t other_sequence,
                             Milliseconds timeout) {
  std::lock_guard lock(mu_);
  const std::uint64_t id = next_id_++;
  if (entries_.size() < capacity_) entries_.emplace_back();
  TraceEntry& e = entries_[id % capacity_];
  e.id = id;
  e.other_sequence = other_sequence;
  e.record = record;
  e.timeout_ms = timeout.count();
  e.error.clear();
  return id;
}

void TraceRing::update(std::uint64_t id, const OpRecord& record, std::string_view error) {
  std::lock_guard lock(mu_);
  if (entries_.empty()) return;
  TraceEntry& e = entries_[id % capacity_];
  if (e.id != id) return;  // overwritten by a later op
  e.record.state_ = record.state();
  e.record.started = record.started;
  e.record.ended = record.ended;
  if (!error.empty()) e.error.assign(error);
}

std::vector<TraceEntry> TraceRing::snapshot() const {
  std::lock_guard lock(mu_);
  std::vector<TraceEntry> out;
  out.reserve(entries_.size());
  // Oldest first: from the slot the next op takes, once the ring is full.
  const std::size_t start = entries_.size() < capacity_ ? 0 : next_id_ % capacity_;
  for (std::size_t i = 0; i < entries_.size(); ++i) {
    out.push_back(entries_[(start + i) % entries_.size()]);
  }
  return out;
}

}  // namespace c10d::inline v1::backends
