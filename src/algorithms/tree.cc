#include "algorithms/tree.h"

#include <algorithm>
#include <array>
#include <bit>
#include <deque>
#include <memory>

#include "algorithms/reduce_kernels.h"
#include "algorithms/scratch.h"
#include "core/check.h"

namespace c10d::inline v1::algorithms {
namespace {

// Requests a chain keeps posted per link: enough that a segment is on the wire while the
// previous one is forwarded, few enough that a long message does not post thousands at once.
constexpr std::size_t kChainInFlight = 4;

int virtual_rank(int n, int root, int rank) { return (rank - root + n) % n; }
int real_rank(int n, int root, int v) { return (v + root) % n; }

void check_root(const Context& ctx, int root, const char* op) {
  C10D_CHECK(root >= 0 && root < ctx.size(), "{}: root {} is outside a group of size {} (rank {})",
             op, root, ctx.size(), ctx.rank());
}

}  // namespace

int binomial_parent(int n, int root, int rank) {
  const int v = virtual_rank(n, root, rank);
  if (v == 0) return -1;
  return real_rank(n, root, v & (v - 1));
}

std::vector<int> binomial_children(int n, int root, int rank) {
  const int v = virtual_rank(n, root, rank);
  // The root may add every power of two below n; any other rank only those below its lowest set
  // bit (the higher ones belong to its ancestors).
  const unsigned limit = v == 0 ? std::bit_ceil(static_cast<unsigned>(n)) : (v & -v);
  std::vector<int> children;
  for (unsigned mask = limit >> 1; mask > 0; mask >>= 1) {
    const long long c = static_cast<long long>(v) + mask;
    if (c < n) children.push_back(real_rank(n, root, static_cast<int>(c)));
  }
  return children;
}

int chain_next(int n, int root, int rank) {
  const int v = virtual_rank(n, root, rank);
  return v + 1 < n ? real_rank(n, root, v + 1) : -1;
}

int chain_prev(int n, int root, int rank) {
  const int v = virtual_rank(n, root, rank);
  return v > 0 ? real_rank(n, root, v - 1) : -1;
}

void tree_broadcast(const Context& ctx, std::span<std::byte> data, int root) {
  check_root(ctx, root, "tree_broadcast");
  const int n = ctx.size();
  if (n == 1 || data.empty()) return;
  auto& t = ctx.transport;
  const int parent = binomial_parent(n, root, ctx.rank());
  if (parent >= 0) t.irecv(parent, ctx.tag, data, ctx.call)->wait(ctx.deadline);
  std::vector<std::unique_ptr<transport::Request>> sends;
  for (int child : binomial_children(n, root, ctx.rank())) {
    sends.push_back(t.isend(child, ctx.tag, data, ctx.call));
  }
  transport::wait_all(sends, ctx.deadline);
}

void pipelined_broadcast(const Context& ctx, std::span<std::byte> data, int root,
                         std::int64_t segment_bytes) {
  check_root(ctx, root, "pipelined_broadcast");
  C10D_CHECK(segment_bytes > 0, "pipelined_broadcast: segment_bytes {} must be positive (rank {})",
             segment_bytes, ctx.rank());
  const int n = ctx.size();
  if (n == 1 || data.empty()) return;
  auto& t = ctx.transport;
  const int prev = chain_prev(n, root, ctx.rank());
  const int next = chain_next(n, root, ctx.rank());
  const auto seg = static_cast<std::size_t>(segment_bytes);
  const std::size_t segments = (data.size() + seg - 1) / seg;
  auto segment = [&](std::size_t j) {
    const std::size_t offset = j * seg;
    return data.subspan(offset, std::min(seg, data.size() - offset));
  };

  // Receives land straight in `data` (no scratch); segment j is forwarded as soon as it is in.
  std::deque<std::unique_ptr<transport::Request>> recvs;
  std::deque<std::unique_ptr<transport::Request>> sends;
  std::size_t posted = 0;
  for (std::size_t j = 0; j < segments; ++j) {
    if (prev >= 0) {
      while (posted < segments && posted < j + kChainInFlight) {
        recvs.push_back(t.irecv(prev, ctx.tag, segment(posted++), ctx.call));
      }
      recvs.front()->wait(ctx.deadline);
      recvs.pop_front();
    }
    if (next >= 0) {
      sends.push_back(t.isend(next, ctx.tag, segment(j), ctx.call));
      if (sends.size() > kChainInFlight) {
        sends.front()->wait(ctx.deadline);
        sends.pop_front();
      }
    }
  }
  for (auto& s : sends) s->wait(ctx.deadline);
}

void tree_reduce(const Context& ctx, DType dtype, const Reduction& reduction, void* data,
                 std::int64_t count, int root) {
  // Both checks fail on every rank alike, before any message.
  validate_reduction(dtype, reduction.op);
  check_root(ctx, root, "tree_reduce");
  C10D_CHECK(count >= 0, "tree_reduce: count {} is negative (rank {})", count, ctx.rank());
  if (reduction.op == ReduceOp::kPremulSum) {
    premul_in_place(dtype, reduction.premul_factor, data, count);
  }
  const int n = ctx.size();
  if (n > 1 && count > 0) {
    auto& t = ctx.transport;
    const std::size_t bytes = static_cast<std::size_t>(count) * element_size(dtype);
    auto* acc = static_cast<std::byte*>(data);
    // Smallest subtree first: it finishes earliest.
    std::vector<int> children = binomial_children(n, root, ctx.rank());
    std::reverse(children.begin(), children.end());
    // Two receive slots: one child's subtree sum is reduced while the next arrives.
    const std::size_t slots = std::min<std::size_t>(children.size(), 2);
    const Scratch scratch(ScratchSlot::kSegments, slots * bytes);
    std::array<std::unique_ptr<transport::Request>, 2> pending;
    auto slot = [&](std::size_t j) { return scratch.span().subspan((j % 2) * bytes, bytes); };
    auto post = [&](std::size_t j) {
      pending[j % 2] = t.irecv(children[j], ctx.tag, slot(j), ctx.call);
    };
    for (std::size_t j = 0; j < slots; ++j) post(j);
    for (std::size_t j = 0; j < children.size(); ++j) {
      pending[j % 2]->wait(ctx.deadline);
      reduce_into(dtype, reduction, acc, slot(j).data(), count);
      if (j + 2 < children.size()) post(j + 2);
    }
    const int parent = binomial_parent(n, root, ctx.rank());
    if (parent >= 0) {
      t.isend(parent, ctx.tag, std::span<const std::byte>(acc, bytes), ctx.call)
          ->wait(ctx.deadline);
    }
  }
  if (reduction.op == ReduceOp::kAvg && ctx.rank() == root) {
    finish_average(dtype, data, count, n);
  }
}

}  // namespace c10d::inline v1::algorithms
