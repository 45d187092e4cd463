#include "algorithms/ring_all_reduce.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>

#include "algorithms/reduce_kernels.h"
#include "algorithms/ring_pattern.h"
#include "algorithms/scratch.h"
#include "core/check.h"

namespace c10d::inline v1::algorithms {
namespace {

RingPattern pattern_for(const Context& ctx, std::int64_t count, const RingOptions& options) {
  std::vector<int> order = options.order;
  if (order.empty()) {
    order.resize(static_cast<std::size_t>(ctx.size()));
    std::iota(order.begin(), order.end(), 0);
  }
  C10D_CHECK(static_cast<int>(order.size()) == ctx.size(), "ring order has {} ranks, the group {}",
             order.size(), ctx.size());
  if (options.blocks.empty()) return RingPattern(std::move(order), ctx.rank(), count);
  std::int64_t sum = 0;
  for (const Block& b : options.blocks) sum += b.count;
  C10D_CHECK(sum == count, "ring on rank {}: its blocks hold {} elements, not the count {}",
             ctx.rank(), sum, count);
  return RingPattern(std::move(order), ctx.rank(), options.blocks);
}

std::span<std::byte> bytes_at(void* data, std::size_t elem, Block b) {
  return {static_cast<std::byte*>(data) + b.offset * static_cast<std::int64_t>(elem),
          static_cast<std::size_t>(b.count) * elem};
}

// One reduce-scatter step's buffers, as bytes: `send` goes right whole (the block
// reduce_scatter_send(s) as this rank holds it now); the block reduce_scatter_recv(s) arrives
// from the left and is combined with this rank's `own` contribution to it into `dst` (`own`
// itself in place, or a separate buffer).
struct StepBuffers {
  const std::byte* send;
  const std::byte* own;
  std::byte* dst;
};

// Runs reduce-scatter steps one after the other (ring_reduce_scatter_to: step s+2 writes the
// partial-sum slot step s sent from, so a step waits for its sends); `buffers(s)` names step
// s's buffers. Segments of at most `options.segment_bytes` go out at once; the receiver keeps
// two in flight, in two slots of scratch, and reduces one while the next arrives.
template <typename BuffersOf>
void run_reduce_scatter(const Context& ctx, const RingPattern& ring, DType dtype,
                        const Reduction& reduction, std::int64_t count, const RingOptions& options,
                        BuffersOf buffers) {
  const int n = ctx.size();
  const std::size_t elem = element_size(dtype);
  const std::int64_t seg =
      std::max<std::int64_t>(1, options.segment_bytes / static_cast<std::int64_t>(elem));
  const std::int64_t slot = std::min(seg, block_of(count, n, 0).count);
  const Scratch scratch(ScratchSlot::kSegments, 2 * static_cast<std::size_t>(slot) * elem);
  const auto bytes = [elem](std::int64_t elements) {
    return static_cast<std::size_t>(elements) * elem;
  };
  auto& t = ctx.transport;

  for (int s = 0; s < n - 1; ++s) {
    const StepBuffers b = buffers(s);
    const std::int64_t send_count = ring.reduce_scatter_send(s).count;
    const std::int64_t recv_count = ring.reduce_scatter_recv(s).count;
    std::vector<std::unique_ptr<transport::Request>> sends;
    for (std::int64_t off = 0; off < send_count; off += seg) {
      sends.push_back(t.isend(ring.right(), ctx.tag,
                              {b.send + bytes(off), bytes(std::min(seg, send_count - off))},
                              ctx.call));
    }
    const std::int64_t parts = (recv_count + seg - 1) / seg;
    std::array<std::unique_ptr<transport::Request>, 2> pending;
    const auto slot_of = [&](std::int64_t j) {
      return scratch.data() + static_cast<std::size_t>(j % 2) * bytes(slot);
    };
    const auto len_of = [&](std::int64_t j) { return std::min(seg, recv_count - j * seg); };
    auto post = [&](std::int64_t j) {
      pending[static_cast<std::size_t>(j % 2)] =
          t.irecv(ring.left(), ctx.tag, {slot_of(j), bytes(len_of(j))}, ctx.call);
    };
    for (std::int64_t j = 0; j < std::min<std::int64_t>(parts, 2); ++j) post(j);
    for (std::int64_t j = 0; j < parts; ++j) {
      pending[static_cast<std::size_t>(j % 2)]->wait(ctx.deadline);
      const std::size_t at = bytes(j * seg);
      reduce_to(dtype, reduction, b.dst + at, b.own + at, slot_of(j), len_of(j));
      if (j + 2 < parts) post(j + 2);
    }
    transport::wait_all(sends, ctx.deadline);
  }
}

// Waits for a receive, looking every kSendCheck whether a send failed: the sends are only waited
// for at the end, and a right neighbour that died would otherwise leave this rank waiting on its
// left one until the deadline instead of failing with the dead rank's name.
constexpr auto kSendCheck = std::chrono::milliseconds(50);
void wait_watching_sends(transport::Request& recv,
                         const std::vector<std::unique_ptr<transport::Request>>& sends,
                         transport::Clock::time_point deadline) {
  for (;;) {
    const auto slice = std::min(deadline, transport::Clock::now() + kSendCheck);
    try {
      recv.wait(slice);
      return;
    } catch (const TimeoutError&) {
      if (slice >= deadline) throw;
    }
    for (const auto& s : sends) s->test();  // rethrows a failed send's error
  }
}

// The ring all-reduce as one pipeline of 2(n-1) stages: reduce-scatter steps 0..n-2, then
// all-gather steps 0..n-2; stages [first, end) of it run here (the reduce-scatter alone is
// [0, n-1), the all-gather alone [n-1, 2(n-1))). What a stage receives is what the next stage sends
// (reduce-scatter step s+1 sends the block step s reduced, all-gather step 0 the block the last
// reduce-scatter step finished, all-gather step s+1 the block step s received), so each segment
// goes on to the right as soon as it is reduced or has arrived, instead of when its whole step is
// done: a rank's outgoing bytes form one stream and no step waits for the slowest segment of the
// one before. Segments from the left arrive in (stage, segment) order, since every rank sends in
// that order; receives are posted in the same order: the reduce-scatter ones into two slots of
// scratch (one reduced while the next arrives), then every all-gather one straight into place. A
// block's all-gather receive lands where the same block's partial sum was sent from: by then the
// right neighbour has taken that partial sum whole, since the final values are made from it.
void run_pipelined(const Context& ctx, const RingPattern& ring, DType dtype,
                   const Reduction& reduction, void* data, const RingOptions& options, int first,
                   int end) {
  const int n = ctx.size();
  const std::size_t elem = element_size(dtype);
  const std::int64_t seg =
      std::max<std::int64_t>(1, options.segment_bytes / static_cast<std::int64_t>(elem));
  const auto recv_block = [&](int t) {
    return t < n - 1 ? ring.reduce_scatter_recv(t) : ring.all_gather_recv(t - (n - 1));
  };
  const auto segments = [&](Block b) { return (b.count + seg - 1) / seg; };
  // Segment j of block b, as bytes of `data`.
  const auto piece = [&](Block b, std::int64_t j) {
    const Block part{b.offset + j * seg, std::min(seg, b.count - j * seg)};
    return bytes_at(data, elem, part);
  };
  std::int64_t slot_elems = 0;
  for (int t = first; t < std::min(end, n - 1); ++t) {
    slot_elems = std::max(slot_elems, std::min(seg, recv_block(t).count));
  }
  const Scratch scratch(ScratchSlot::kSegments, 2 * static_cast<std::size_t>(slot_elems) * elem);
  auto& tr = ctx.transport;

  std::vector<std::unique_ptr<transport::Request>> sends;
  const auto send = [&](std::span<std::byte> bytes) {
    if (!bytes.empty()) sends.push_back(tr.isend(ring.right(), ctx.tag, bytes, ctx.call));
  };
  const Block start = first == 0 ? ring.reduce_scatter_send(0) : ring.all_gather_send(0);
  for (std::int64_t j = 0; j < segments(start); ++j) send(piece(start, j));

  // Receives in arrival order: (stage, segment). `posted` is the next one to post; reduce-scatter
  // receives wait for a free slot (at most two in flight), all-gather ones are posted at once.
  struct Unit {
    int stage = 0;
    std::int64_t segment = 0;
  };
  const auto next = [&](Unit u) {
    if (++u.segment < segments(recv_block(u.stage))) return u;
    return Unit{u.stage + 1, 0};
  };
  const auto skip_empty = [&](Unit u) {
    while (u.stage < end && segments(recv_block(u.stage)) == 0) u = Unit{u.stage + 1, 0};
    return u;
  };
  std::deque<std::unique_ptr<transport::Request>> pending;  // posted, in order
  std::int64_t rs_posted = 0;                               // reduce-scatter receives posted
  std::int64_t rs_done = 0;
  Unit posted = skip_empty(Unit{first, 0});
  const auto slot_of = [&](std::int64_t k) {
    return scratch.data() + static_cast<std::size_t>(k % 2 * slot_elems) * elem;
  };
  const auto post_more = [&] {
    while (posted.stage < end) {
      const std::span<std::byte> into = piece(recv_block(posted.stage), posted.segment);
      if (posted.stage < n - 1) {
        if (rs_posted - rs_done >= 2) return;
        pending.push_back(
            tr.irecv(ring.left(), ctx.tag, {slot_of(rs_posted), into.size()}, ctx.call));
        ++rs_posted;
      } else {
        pending.push_back(tr.irecv(ring.left(), ctx.tag, into, ctx.call));
      }
      posted = skip_empty(next(posted));
    }
  };
  post_more();
  for (Unit u = skip_empty(Unit{first, 0}); u.stage < end; u = skip_empty(next(u))) {
    wait_watching_sends(*pending.front(), sends, ctx.deadline);
    pending.pop_front();
    const std::span<std::byte> mine = piece(recv_block(u.stage), u.segment);
    if (u.stage < n - 1) {
      reduce_to(dtype, reduction, mine.data(), mine.data(), slot_of(rs_done), mine.size() / elem);
      ++rs_done;
      post_more();
    }
    if (u.stage + 1 < end) send(mine);  // the next stage sends what this one received
  }
  transport::wait_all(sends, ctx.deadline);
}

}  // namespace

void ring_reduce_scatter(const Context& ctx, DType dtype, const Reduction& reduction, void* data,
                         std::int64_t count, const RingOptions& options) {
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  run_pipelined(ctx, pattern_for(ctx, count, options), dtype, reduction, data, options, 0, n - 1);
}

void ring_reduce_scatter_to(const Context& ctx, DType dtype, const Reduction& reduction,
                            std::span<const void* const> inputs, void* output, std::int64_t count,
                            const RingOptions& options) {
  const int n = ctx.size();
  C10D_CHECK(static_cast<int>(inputs.size()) == n,
             "reduce-scatter on rank {}: {} input blocks for {} ranks", ctx.rank(), inputs.size(),
             n);
  const std::size_t block_bytes = static_cast<std::size_t>(count) * element_size(dtype);
  if (n == 1 || count == 0) {
    const void* own = inputs[static_cast<std::size_t>(ctx.rank())];
    if (block_bytes > 0 && own != output) std::memcpy(output, own, block_bytes);
    return;
  }
  C10D_CHECK(options.blocks.empty(),
             "reduce-scatter on rank {}: the ranks' blocks are fixed by the inputs", ctx.rank());
  // Over n * count elements the ring's blocks are exactly the ranks' blocks of `count`.
  const RingPattern ring = pattern_for(ctx, count * n, options);
  const auto input_of = [&](Block b) {
    return static_cast<const std::byte*>(inputs[static_cast<std::size_t>(b.offset / count)]);
  };
  // The partial sums in flight: step s writes one slot, step s + 1 sends it while writing the
  // other; the last step writes the output.
  const std::size_t partial = n > 2 ? block_bytes : 0;
  const Scratch partials(ScratchSlot::kPartials, 2 * partial);
  const auto partial_of = [&](int s) {
    return partials.data() + static_cast<std::size_t>(s % 2) * partial;
  };
  run_reduce_scatter(ctx, ring, dtype, reduction, count * n, options, [&](int s) {
    const std::byte* send = s == 0 ? input_of(ring.reduce_scatter_send(0)) : partial_of(s - 1);
    std::byte* dst = s == n - 2 ? static_cast<std::byte*>(output) : partial_of(s);
    return StepBuffers{send, input_of(ring.reduce_scatter_recv(s)), dst};
  });
}

void ring_all_gather(const Context& ctx, DType dtype, void* data, std::int64_t count,
                     const RingOptions& options) {
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  run_pipelined(ctx, pattern_for(ctx, count, options), dtype, Reduction{}, data, options, n - 1,
                2 * (n - 1));
}

void ring_all_reduce(const Context& ctx, DType dtype, const Reduction& reduction, void* data,
                     std::int64_t count, const RingOptions& options) {
  validate_reduction(dtype, reduction.op);  // fails on every rank alike, before any message
  // AVG and PREMUL_SUM accumulate as plain sums: each rank scales its own input once before,
  // or the result once after, so partial sums arriving from peers are never scaled twice.
  Reduction accumulate = reduction;
  if (reduction.op == ReduceOp::kPremulSum) {
    premul_in_place(dtype, reduction.premul_factor, data, count);
    accumulate.op = ReduceOp::kSum;
  } else if (reduction.op == ReduceOp::kAvg) {
    accumulate.op = ReduceOp::kSum;
  }
  if (ctx.size() > 1 && count > 0) {
    run_pipelined(ctx, pattern_for(ctx, count, options), dtype, accumulate, data, options, 0,
                  2 * (ctx.size() - 1));
  }
  if (reduction.op == ReduceOp::kAvg) finish_average(dtype, data, count, ctx.size());
}

}  // namespace c10d::inline v1::algorithms
