#include "algorithms/slot_probe.h"

#include <algorithm>
#include <cstring>
#include <span>

namespace c10d::inline v1::algorithms {

namespace {

// Batches of rounds, each timed whole (a precise clock read, about 30 ns here, is near a near
// round's own time): the least batch leaves out a rank that was preempted or arrived late.
constexpr int kBatches = 4;
constexpr int kRoundsPerBatch = 4;

}  // namespace

std::chrono::nanoseconds slot_round_time(const Context& ctx, transport::SharedSlots& slots,
                                         std::uint64_t check) {
  using Clock = std::chrono::steady_clock;
  // The first round only brings the ranks in step: its time is how late the last one came.
  slots.gather(ctx.tag, check, {}, ctx.deadline);
  auto best = Clock::duration::max();
  for (int b = 0; b < kBatches; ++b) {
    const auto start = Clock::now();
    for (int i = 0; i < kRoundsPerBatch; ++i) slots.gather(ctx.tag, check, {}, ctx.deadline);
    best = std::min(best, (Clock::now() - start) / kRoundsPerBatch);
  }
  const std::int64_t mine = std::chrono::duration_cast<std::chrono::nanoseconds>(best).count();
  slots.gather(ctx.tag, check, std::as_bytes(std::span(&mine, 1)), ctx.deadline);
  std::int64_t slowest = 0;
  for (int r = 0; r < ctx.size(); ++r) {
    std::int64_t theirs = 0;
    std::memcpy(&theirs, slots.part(r).data(), sizeof theirs);
    slowest = std::max(slowest, theirs);
  }
  return std::chrono::nanoseconds(slowest);
}

}  // namespace c10d::inline v1::algorithms
