#include "algorithms/halving_doubling_all_reduce.h"

#include <memory>
#include <vector>

#include "algorithms/halving_doubling_pattern.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/scratch.h"

namespace c10d::inline v1::algorithms {
namespace {

std::span<std::byte> span_of(void* data, std::size_t elem, Block b) {
  return {static_cast<std::byte*>(data) + b.offset * static_cast<std::int64_t>(elem),
          static_cast<std::size_t>(b.count) * elem};
}

// Sends `send` of data to peer while receiving `recv_count` elements into `into`.
void exchange(const Context& ctx, int peer, std::span<const std::byte> send,
              std::span<std::byte> into) {
  auto& t = ctx.transport;
  std::unique_ptr<transport::Request> r, w;
  if (!into.empty()) r = t.irecv(peer, ctx.tag, into, ctx.call);
  if (!send.empty()) w = t.isend(peer, ctx.tag, send, ctx.call);
  if (r) r->wait(ctx.deadline);
  if (w) w->wait(ctx.deadline);
}

}  // namespace

void halving_doubling_all_reduce(const Context& ctx, DType dtype, const Reduction& reduction,
                                 void* data, std::int64_t count) {
  validate_reduction(dtype, reduction.op);
  if (reduction.op == ReduceOp::kPremulSum) {
    premul_in_place(dtype, reduction.premul_factor, data, count);
  }
  if (ctx.size() > 1 && count > 0) {
    const HalvingDoublingPattern p(ctx.size(), ctx.rank(), count);
    const std::size_t elem = element_size(dtype);
    const Block all{0, count};
    const Scratch scratch(ScratchSlot::kSegments, static_cast<std::size_t>(count) * elem);
    using Role = HalvingDoublingPattern::FoldRole;

    if (p.fold_role() == Role::kSendAndSitOut) {
      exchange(ctx, p.fold_peer(), span_of(data, elem, all), {});
    } else if (p.fold_role() == Role::kReceive) {
      exchange(ctx, p.fold_peer(), {}, scratch.span());
      reduce_into(dtype, reduction, data, scratch.data(), count);
    }
    if (p.participates() && static_cast<std::int64_t>(count * elem) <= kRecursiveDoublingMaxBytes) {
      // Recursive doubling: the whole vector at every step, so log2(pof2) messages instead of
      // twice that. Each rank combines its own and its peer's partial in the same order-free
      // way (reduce_into is commutative), so every rank ends with the same bits.
      for (int k = 0; k < p.steps(); ++k) {
        exchange(ctx, p.halving_step(k).peer, span_of(data, elem, all),
                 scratch.span().first(static_cast<std::size_t>(count) * elem));
        reduce_into(dtype, reduction, data, scratch.data(), count);
      }
    } else if (p.participates()) {
      for (int k = 0; k < p.steps(); ++k) {
        const auto e = p.halving_step(k);
        exchange(ctx, e.peer, span_of(data, elem, e.send),
                 scratch.span().first(static_cast<std::size_t>(e.recv.count) * elem));
        reduce_into(dtype, reduction,
                    static_cast<std::byte*>(data) + e.recv.offset * static_cast<std::int64_t>(elem),
                    scratch.data(), e.recv.count);
      }
      for (int k = 0; k < p.steps(); ++k) {
        const auto e = p.doubling_step(k);
        exchange(ctx, e.peer, span_of(data, elem, e.send), span_of(data, elem, e.recv));
      }
    }
    if (p.fold_role() == Role::kSendAndSitOut) {
      exchange(ctx, p.fold_peer(), {}, span_of(data, elem, all));
    } else if (p.fold_role() == Role::kReceive) {
      exchange(ctx, p.fold_peer(), span_of(data, elem, all), {});
    }
  }
  if (reduction.op == ReduceOp::kAvg) finish_average(dtype, data, count, ctx.size());
}

}  // namespace c10d::inline v1::algorithms
