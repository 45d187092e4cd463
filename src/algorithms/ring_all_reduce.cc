#include "algorithms/ring_all_reduce.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <numeric>

#include "algorithms/reduce_kernels.h"
#include "algorithms/ring_pattern.h"
#include "algorithms/scratch.h"
#include "core/check.h"

namespace c10d::algorithms {
namespace {

RingPattern pattern_for(const Context& ctx, std::int64_t count, const RingOptions& options) {
  if (options.order.empty()) return RingPattern::identity(ctx.size(), ctx.rank(), count);
  C10D_CHECK(static_cast<int>(options.order.size()) == ctx.size(),
             "ring order has {} ranks, the group {}", options.order.size(), ctx.size());
  return RingPattern(options.order, ctx.rank(), count);
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

// Runs reduce-scatter steps; `buffers(s)` names step s's buffers. Segments of at most
// `options.segment_bytes` go out at once; the receiver keeps two in flight, in two slots of
// scratch, and reduces one while the next arrives.
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
                              {b.send + bytes(off), bytes(std::min(seg, send_count - off))}));
    }
    const std::int64_t parts = (recv_count + seg - 1) / seg;
    std::array<std::unique_ptr<transport::Request>, 2> pending;
    const auto slot_of = [&](std::int64_t j) {
      return scratch.data() + static_cast<std::size_t>(j % 2) * bytes(slot);
    };
    const auto len_of = [&](std::int64_t j) { return std::min(seg, recv_count - j * seg); };
    auto post = [&](std::int64_t j) {
      pending[static_cast<std::size_t>(j % 2)] =
          t.irecv(ring.left(), ctx.tag, {slot_of(j), bytes(len_of(j))});
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

}  // namespace

void ring_reduce_scatter(const Context& ctx, DType dtype, const Reduction& reduction, void* data,
                         std::int64_t count, const RingOptions& options) {
  if (ctx.size() == 1 || count == 0) return;
  const RingPattern ring = pattern_for(ctx, count, options);
  const std::size_t elem = element_size(dtype);
  auto* const base = static_cast<std::byte*>(data);
  run_reduce_scatter(ctx, ring, dtype, reduction, count, options, [&](int s) {
    std::byte* const recv = bytes_at(base, elem, ring.reduce_scatter_recv(s)).data();
    return StepBuffers{bytes_at(base, elem, ring.reduce_scatter_send(s)).data(), recv, recv};
  });
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
  const RingPattern ring = pattern_for(ctx, count, options);
  const std::size_t elem = element_size(dtype);
  auto& t = ctx.transport;
  for (int s = 0; s < n - 1; ++s) {
    const Block send = ring.all_gather_send(s);
    const Block recv = ring.all_gather_recv(s);
    std::unique_ptr<transport::Request> r, w;
    if (recv.count > 0) r = t.irecv(ring.left(), ctx.tag, bytes_at(data, elem, recv));
    if (send.count > 0) w = t.isend(ring.right(), ctx.tag, bytes_at(data, elem, send));
    if (r) r->wait(ctx.deadline);
    if (w) w->wait(ctx.deadline);
  }
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
  ring_reduce_scatter(ctx, dtype, accumulate, data, count, options);
  ring_all_gather(ctx, dtype, data, count, options);
  if (reduction.op == ReduceOp::kAvg) finish_average(dtype, data, count, ctx.size());
}

}  // namespace c10d::algorithms
