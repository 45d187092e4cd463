#include "algorithms/ring_all_reduce.h"

#include <algorithm>
#include <array>
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

}  // namespace

void ring_reduce_scatter(const Context& ctx, DType dtype, const Reduction& reduction, void* data,
                         std::int64_t count, const RingOptions& options) {
  const int n = ctx.size();
  if (n == 1 || count == 0) return;
  const RingPattern ring = pattern_for(ctx, count, options);
  const std::size_t elem = element_size(dtype);
  const std::int64_t seg =
      std::max<std::int64_t>(1, options.segment_bytes / static_cast<std::int64_t>(elem));
  // Two receive slots: one segment is reduced while the next arrives.
  const std::int64_t slot = std::min(seg, block_of(count, n, 0).count);
  const Scratch scratch(ScratchSlot::kSegments, 2 * static_cast<std::size_t>(slot) * elem);
  auto& t = ctx.transport;

  for (int s = 0; s < n - 1; ++s) {
    const Block send = ring.reduce_scatter_send(s);
    const Block recv = ring.reduce_scatter_recv(s);
    std::vector<std::unique_ptr<transport::Request>> sends;
    for (std::int64_t off = 0; off < send.count; off += seg) {
      const Block part{send.offset + off, std::min(seg, send.count - off)};
      sends.push_back(t.isend(ring.right(), ctx.tag, bytes_at(data, elem, part)));
    }
    const std::int64_t parts = (recv.count + seg - 1) / seg;
    std::array<std::unique_ptr<transport::Request>, 2> pending;
    auto post = [&](std::int64_t j) {
      const std::int64_t len = std::min(seg, recv.count - j * seg);
      std::span<std::byte> into(scratch.data() + static_cast<std::size_t>(j % 2) * slot * elem,
                                static_cast<std::size_t>(len) * elem);
      pending[static_cast<std::size_t>(j % 2)] = t.irecv(ring.left(), ctx.tag, into);
    };
    for (std::int64_t j = 0; j < std::min<std::int64_t>(parts, 2); ++j) post(j);
    for (std::int64_t j = 0; j < parts; ++j) {
      pending[static_cast<std::size_t>(j % 2)]->wait(ctx.deadline);
      const std::int64_t len = std::min(seg, recv.count - j * seg);
      reduce_into(
          dtype, reduction,
          static_cast<std::byte*>(data) + (recv.offset + j * seg) * static_cast<std::int64_t>(elem),
          scratch.data() + static_cast<std::size_t>(j % 2) * slot * elem, len);
      if (j + 2 < parts) post(j + 2);
    }
    transport::wait_all(sends, ctx.deadline);
  }
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
