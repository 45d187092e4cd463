#include "backends/common/trace_ring.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <thread>
#include <utility>

#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::inline v1::backends {

namespace {

using Ref = std::atomic_ref<std::uint64_t>;

// A reader's or a waiting writer's patience: spins, then yields, then (a reader) gives up.
constexpr int kSpins = 64;
constexpr int kReadTries = 4096;

void pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

std::uint64_t ticks(OpRecord::Clock::time_point t) {
  return static_cast<std::uint64_t>(t.time_since_epoch().count());
}

OpRecord::Clock::time_point time_of(std::uint64_t ticks) {
  return OpRecord::Clock::time_point(OpRecord::Clock::duration(static_cast<std::int64_t>(ticks)));
}

// A record's small fields in one word: rank (32 bits), dtype, reduce op, dims, and the flags.
std::uint64_t pack(const OpRecord& r) {
  return static_cast<std::uint32_t>(r.rank) | std::uint64_t{r.dtype} << 32 |
         std::uint64_t{r.reduce_op} << 40 | std::uint64_t{r.dims} << 48 |
         std::uint64_t{r.collective} << 56 | std::uint64_t{r.timed} << 57;
}

void unpack(std::uint64_t w, OpRecord& r) {
  r.rank = static_cast<std::int32_t>(static_cast<std::uint32_t>(w));
  r.dtype = static_cast<std::uint8_t>(w >> 32);
  r.reduce_op = static_cast<std::uint8_t>(w >> 40);
  r.dims = static_cast<std::uint8_t>(w >> 48);
  r.collective = ((w >> 56) & 1) != 0;
  r.timed = ((w >> 57) & 1) != 0;
}

}  // namespace

TraceRing::TraceRing(TraceGroup group, std::size_t capacity)
    : group_(std::move(group)), capacity_(std::bit_ceil(capacity)) {
  C10D_CHECK(capacity > 0 && capacity <= (std::size_t{1} << 30),
             "a trace ring of group {} holds 1 to 2^30 ops, not {}", group_.desc, capacity);
  // Zeroed pages that stay untouched until an op lands in them; every slot is empty (id 0).
  void* p = ::mmap(nullptr, capacity_ * sizeof(Slot), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    C10D_THROW(Error, "cannot map the trace ring of group {} ({} ops, {} bytes): {}", group_.desc,
               capacity_, capacity_ * sizeof(Slot), std::strerror(errno));
  }
  slots_ = static_cast<Slot*>(p);
}

TraceRing::~TraceRing() { ::munmap(slots_, capacity_ * sizeof(Slot)); }

std::uint64_t TraceRing::begin(Slot& s) {
  Ref seq(s.seq);
  // The slot's one writer: the writers before it happened before it (trace_ring.h).
  const std::uint64_t v = seq.load(std::memory_order_relaxed);
  seq.store(v + 1, std::memory_order_relaxed);
  // A reader that sees any word stored after this sees the odd sequence after its copy.
  std::atomic_thread_fence(std::memory_order_release);
  return v + 2;
}

void TraceRing::end(Slot& s, std::uint64_t seq) {
  Ref(s.seq).store(seq, std::memory_order_release);
}

bool TraceRing::read(Slot& s, std::array<std::uint64_t, kWords>& out) {
  Ref seq(s.seq);
  for (int tries = 0; tries < kReadTries; ++tries) {
    const std::uint64_t before = seq.load(std::memory_order_acquire);
    if ((before & 1) == 0) {
      for (std::size_t i = 0; i < kWords; ++i) {
        out[i] = Ref(s.words[i]).load(std::memory_order_relaxed);
      }
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq.load(std::memory_order_relaxed) == before) return true;
    }
    tries < kSpins ? pause() : std::this_thread::yield();
  }
  return false;
}

bool TraceRing::free_for_add(Slot& s) {
  Ref seq(s.seq);
  for (int tries = 0; tries < kSpins; ++tries) {
    const std::uint64_t before = seq.load(std::memory_order_acquire);
    if ((before & 1) == 0) {
      const std::uint64_t id = Ref(s.words[kId]).load(std::memory_order_relaxed);
      const auto state =
          static_cast<OpRecord::State>(Ref(s.words[kState]).load(std::memory_order_relaxed));
      std::atomic_thread_fence(std::memory_order_acquire);
      if (seq.load(std::memory_order_relaxed) == before) {
        return id == 0 || state == OpRecord::State::kCompleted || state == OpRecord::State::kFailed;
      }
    }
    pause();
  }
  return false;  // its op's writer is midway through a transition: that op still runs
}

std::uint64_t TraceRing::add(const OpRecord& record, std::uint64_t other_sequence,
                             Milliseconds timeout) {
  const std::uint64_t id = next_id_.load(std::memory_order_relaxed);
  next_id_.store(id + 1, std::memory_order_release);
  Slot& s = slot(id);
  if (!free_for_add(s)) return id;  // the op there still runs: it stays, this one goes unrecorded
  const std::uint64_t seq = begin(s);
  Ref(s.words[kId]).store(id + 1, std::memory_order_relaxed);
  Ref(s.words[kState]).store(static_cast<std::uint64_t>(record.state()), std::memory_order_relaxed);
  Ref(s.words[kStarted]).store(ticks(record.started), std::memory_order_relaxed);
  Ref(s.words[kEnded]).store(ticks(record.ended), std::memory_order_relaxed);
  Ref(s.words[kOtherSequence]).store(other_sequence, std::memory_order_relaxed);
  Ref(s.words[kTimeout])
      .store(static_cast<std::uint64_t>(timeout.count()), std::memory_order_relaxed);
  Ref(s.words[kOp])
      .store(reinterpret_cast<std::uintptr_t>(record.op.data()), std::memory_order_relaxed);
  Ref(s.words[kOpSize]).store(record.op.size(), std::memory_order_relaxed);
  Ref(s.words[kSequence]).store(record.sequence, std::memory_order_relaxed);
  Ref(s.words[kCount]).store(static_cast<std::uint64_t>(record.count), std::memory_order_relaxed);
  Ref(s.words[kPacked]).store(pack(record), std::memory_order_relaxed);
  for (std::size_t i = 0; i < OpRecord::kMaxDims; ++i) {
    Ref(s.words[kShape + i])
        .store(static_cast<std::uint64_t>(record.shape[i]), std::memory_order_relaxed);
  }
  Ref(s.words[kQueued]).store(ticks(record.queued), std::memory_order_relaxed);
  end(s, seq);
  return id;
}

void TraceRing::update(std::uint64_t id, const OpRecord& record, std::string_view error) {
  // Kept before the state is published: a reader that sees "failed" finds the error.
  if (!error.empty()) keep_error(id, error);
  Slot& s = slot(id);
  // Another op's slot: this one was not recorded, or has been replaced since it ended.
  if (Ref(s.words[kId]).load(std::memory_order_relaxed) != id + 1) return;
  const std::uint64_t seq = begin(s);
  Ref(s.words[kState]).store(static_cast<std::uint64_t>(record.state()), std::memory_order_relaxed);
  Ref(s.words[kStarted]).store(ticks(record.started), std::memory_order_relaxed);
  Ref(s.words[kEnded]).store(ticks(record.ended), std::memory_order_relaxed);
  end(s, seq);
}

void TraceRing::keep_error(std::uint64_t id, std::string_view error) {
  std::lock_guard lock(errors_mu_);
  errors_[id].assign(error);
  // Only the errors of ops the ring still holds.
  const std::uint64_t next = next_id_.load(std::memory_order_relaxed);
  while (!errors_.empty() && errors_.begin()->first + capacity_ < next) {
    errors_.erase(errors_.begin());
  }
}

std::vector<TraceEntry> TraceRing::snapshot() const {
  const std::uint64_t used =
      std::min<std::uint64_t>(next_id_.load(std::memory_order_acquire), capacity_);
  std::vector<TraceEntry> out;
  out.reserve(used);
  std::array<std::uint64_t, kWords> words{};
  for (std::uint64_t i = 0; i < used; ++i) {
    // Left out: a slot whose first op is still being added, or one a writer held throughout.
    if (!read(slots_[i], words) || words[kId] == 0) continue;
    TraceEntry& e = out.emplace_back();
    e.id = words[kId] - 1;
    e.other_sequence = words[kOtherSequence];
    e.timeout_ms = static_cast<std::int64_t>(words[kTimeout]);
    OpRecord& r = e.record;
    r.op = std::string_view(reinterpret_cast<const char*>(words[kOp]), words[kOpSize]);
    r.sequence = words[kSequence];
    r.count = static_cast<std::int64_t>(words[kCount]);
    unpack(words[kPacked], r);
    for (std::size_t d = 0; d < OpRecord::kMaxDims; ++d) {
      r.shape[d] = static_cast<std::int64_t>(words[kShape + d]);
    }
    r.queued = time_of(words[kQueued]);
    r.state_ = static_cast<OpRecord::State>(words[kState]);
    r.started = time_of(words[kStarted]);
    r.ended = time_of(words[kEnded]);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.id < b.id; });
  std::lock_guard lock(errors_mu_);
  for (TraceEntry& e : out) {
    if (e.record.state() != OpRecord::State::kFailed) continue;
    if (const auto it = errors_.find(e.id); it != errors_.end()) e.error = it->second;
  }
  return out;
}

}  // namespace c10d::inline v1::backends
