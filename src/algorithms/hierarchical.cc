#include "algorithms/hierarchical.h"

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "algorithms/choice.h"
#include "algorithms/halving_doubling_all_reduce.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/reduce_scatter.h"
#include "algorithms/ring_all_reduce.h"
#include "algorithms/scratch.h"
#include "algorithms/tree.h"
#include "core/check.h"
#include "core/copy.h"
#include "transport/sub_transport.h"

namespace c10d::inline v1::algorithms {
namespace {

// This rank's local group and cross group as transports of their own (SubTransport views of
// ctx's, which outlives them: the views are made and dropped within one collective), with
// contexts that carry ctx's tag and deadline.
class Groups {
 public:
  Groups(const Context& ctx, const HostLayout& layout, const char* op)
      : host_(checked_host(ctx, layout, op)),
        local_rank_(layout.local_of(ctx.rank())),
        local_(unowned(ctx), layout.ranks_on(host_)),
        cross_(unowned(ctx), layout.cross_ranks(local_rank_)),
        local_ctx_{local_, ctx.tag, ctx.deadline, ctx.call},
        cross_ctx_{cross_, ctx.tag, ctx.deadline, ctx.call} {}

  int host() const { return host_; }
  int local_rank() const { return local_rank_; }
  const Context& local() const { return local_ctx_; }
  const Context& cross() const { return cross_ctx_; }

 private:
  static int checked_host(const Context& ctx, const HostLayout& layout, const char* op) {
    C10D_CHECK(layout.world() == ctx.size() && layout.hierarchical(),
               "{} on rank {}: a host map of {} ranks on {} hosts ({} per host) for a group of "
               "{}; the hierarchical collectives need 2 or more hosts of the same 2 or more ranks",
               op, ctx.rank(), layout.world(), layout.hosts(), layout.per_host(), ctx.size());
    return layout.host_of(ctx.rank());
  }
  // A shared_ptr that owns nothing (the aliasing constructor with an empty owner).
  static std::shared_ptr<transport::Transport> unowned(const Context& ctx) {
    return {std::shared_ptr<void>(), &ctx.transport};
  }

  int host_;
  int local_rank_;
  transport::SubTransport local_;
  transport::SubTransport cross_;
  Context local_ctx_;
  Context cross_ctx_;
};

// The reduction the phases accumulate with: AVG and PREMUL_SUM as plain sums (reduce_kernels.h).
Reduction accumulating(const Reduction& r) {
  Reduction acc = r;
  if (r.op == ReduceOp::kAvg || r.op == ReduceOp::kPremulSum) acc.op = ReduceOp::kSum;
  return acc;
}

// The three phases of hier_all_reduce (hier_pattern.h) over `count` elements at `data`.
class HierPhases {
 public:
  HierPhases(const Groups& g, const HostLayout& layout, int rank, DType dtype, const Reduction& acc,
             void* data, std::int64_t count, const std::vector<std::int64_t>& host_shares)
      : g_(&g),
        p_(layout, rank, count, host_shares),
        dtype_(dtype),
        acc_(acc),
        data_(data),
        count_(count),
        local_{.blocks = p_.local_blocks()} {}

  void reduce_within() const {
    if (count_ > 0) ring_reduce_scatter(g_->local(), dtype_, acc_, data_, count_, local_);
  }
  void reduce_across() const {
    if (count_ > 0) {
      ring_all_reduce(g_->cross(), dtype_, acc_, data_, p_.own_chunk().count,
                      RingOptions{.blocks = p_.cross_blocks()});
    }
  }
  void gather_within() const {
    if (count_ > 0) ring_all_gather(g_->local(), dtype_, data_, count_, local_);
  }
  void run_all() const {
    reduce_within();
    reduce_across();
    gather_within();
  }

 private:
  const Groups* g_;
  HierPattern p_;
  DType dtype_;
  Reduction acc_;
  void* data_;
  std::int64_t count_;
  RingOptions local_;
};

// hier_all_reduce cut into `n` pieces, each reduced in the three phases, as a pipeline: a
// second thread runs the network phase of piece k while this one runs the shared-memory phases
// of its neighbours, so the host links stay busy and only the first piece's reduce and the last
// one's gather add to their time. This thread's order (reduce k+1, then gather k) is the same on
// every rank of a host and the second thread runs the cross phases in order, so every pair of
// ranks sees its messages in one order on both sides; local and cross pairs are disjoint, so
// the two threads share the tag.
void pipelined(const Groups& g, const HostLayout& layout, int rank, DType dtype,
               const Reduction& acc, void* data, std::int64_t count,
               const std::vector<std::int64_t>& host_shares, int n) {
  std::vector<HierPhases> phases;
  phases.reserve(static_cast<std::size_t>(n));
  const auto elem = static_cast<std::int64_t>(element_size(dtype));
  for (int k = 0; k < n; ++k) {
    const Block b = block_of(count, n, k);
    phases.emplace_back(g, layout, rank, dtype, acc,
                        static_cast<std::byte*>(data) + b.offset * elem, b.count, host_shares);
  }
  std::mutex mu;
  std::condition_variable cv;
  int reduced_within = 0;  // pieces whose phase 1 ended (this thread)
  int reduced_across = 0;  // pieces whose phase 2 ended (the network thread)
  bool failed = false;
  // Waits until `done` reaches `k`; false when the other thread failed first.
  const auto wait_for = [&](const int& done, int k) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return done >= k || failed; });
    return done >= k;
  };
  // Counts a finished phase in `done`, or (null) marks a failure; wakes the other thread.
  const auto signal = [&](int* done) {
    {
      const std::lock_guard lock(mu);
      if (done != nullptr) {
        ++*done;
      } else {
        failed = true;
      }
    }
    cv.notify_all();
  };
  std::exception_ptr across_error;
  std::thread across([&] {
    try {
      for (int k = 0; k < n; ++k) {
        if (!wait_for(reduced_within, k + 1)) return;
        phases[static_cast<std::size_t>(k)].reduce_across();
        signal(&reduced_across);
      }
    } catch (...) {
      across_error = std::current_exception();
      signal(nullptr);
    }
  });
  try {
    for (int k = 0; k <= n; ++k) {
      if (k < n) {
        phases[static_cast<std::size_t>(k)].reduce_within();
        signal(&reduced_within);
      }
      if (k > 0) {
        if (!wait_for(reduced_across, k)) break;
        phases[static_cast<std::size_t>(k - 1)].gather_within();
      }
    }
  } catch (...) {
    signal(nullptr);
    across.join();
    throw;
  }
  across.join();
  if (across_error) std::rethrow_exception(across_error);
}

// hier_all_reduce through each host's leader (HierRoute::kLeaders). A small vector's time is
// latency: this crosses the network once per pair of leaders instead of once per rank.
void through_leaders(const Groups& g, DType dtype, const Reduction& acc, void* data,
                     std::int64_t count) {
  if (count == 0) return;
  tree_reduce(g.local(), dtype, acc, data, count, 0);
  if (g.local_rank() == 0) halving_doubling_all_reduce(g.cross(), dtype, acc, data, count);
  tree_broadcast(
      g.local(),
      {static_cast<std::byte*>(data), static_cast<std::size_t>(count) * element_size(dtype)}, 0);
}

}  // namespace

int hier_pieces(std::int64_t bytes) {
  return static_cast<int>(std::clamp<std::int64_t>(bytes / kHierPieceBytes, 1, kHierMaxPieces));
}

void hier_all_reduce(const Context& ctx, const HostLayout& layout, DType dtype,
                     const Reduction& reduction, void* data, std::int64_t count,
                     const std::vector<std::int64_t>& host_shares, int pieces, HierRoute route) {
  C10D_CHECK(count >= 0, "hier_all_reduce on rank {}: count {} is negative", ctx.rank(), count);
  validate_reduction(dtype, reduction.op);  // fails on every rank alike, before any message
  const Groups g(ctx, layout, "hier_all_reduce");
  const Reduction acc = accumulating(reduction);
  // Made first: it checks the shares before PREMUL_SUM touches the data.
  const HierPhases whole(g, layout, ctx.rank(), dtype, acc, data, count, host_shares);
  if (reduction.op == ReduceOp::kPremulSum) {
    premul_in_place(dtype, reduction.premul_factor, data, count);
  }
  const auto bytes = count * static_cast<std::int64_t>(element_size(dtype));
  const int n_pieces = pieces > 0 ? pieces : hier_pieces(bytes);
  if (route == HierRoute::kBySize) {
    route = bytes <= kHierLeadersMaxBytes ? HierRoute::kLeaders : HierRoute::kRings;
  }
  if (route == HierRoute::kLeaders) {
    through_leaders(g, dtype, acc, data, count);
  } else if (n_pieces <= 1 || count < n_pieces) {
    whole.run_all();
  } else {
    pipelined(g, layout, ctx.rank(), dtype, acc, data, count, host_shares, n_pieces);
  }
  if (reduction.op == ReduceOp::kAvg) finish_average(dtype, data, count, ctx.size());
}

void hier_all_gather(const Context& ctx, const HostLayout& layout, std::span<const std::byte> input,
                     std::span<std::byte> output) {
  const auto n = static_cast<std::size_t>(ctx.size());
  const std::size_t block = input.size();
  C10D_CHECK(output.size() == n * block,
             "hier_all_gather on rank {}: {} blocks of {} bytes need a {}-byte output, got {}",
             ctx.rank(), n, block, n * block, output.size());
  const Groups g(ctx, layout, "hier_all_gather");
  std::byte* own = output.data() + static_cast<std::size_t>(ctx.rank()) * block;
  // The in-place form passes this very block as the input.
  if (own != input.data()) core::copy_bytes(own, input.data(), block);
  if (block == 0) return;
  const auto b = static_cast<std::int64_t>(block);
  ring_all_gather(g.cross(), DType::kUInt8, output.data(), b * layout.hosts(),
                  {.blocks = cross_row_blocks(layout, g.local_rank(), b)});
  // Local rank l now holds the blocks of cross group l, one per host: each host's row in turn.
  for (int h = 0; h < layout.hosts(); ++h) {
    ring_all_gather(g.local(), DType::kUInt8, output.data(), b * layout.per_host(),
                    {.blocks = local_row_blocks(layout, h, b)});
  }
}

void hier_reduce_scatter(const Context& ctx, const HostLayout& layout, DType dtype,
                         const Reduction& reduction, std::span<const void* const> inputs,
                         void* output, std::int64_t count) {
  C10D_CHECK(count >= 0, "hier_reduce_scatter on rank {}: count {} is negative", ctx.rank(), count);
  validate_reduction(dtype, reduction.op);
  const int n = ctx.size();
  C10D_CHECK(static_cast<int>(inputs.size()) == n,
             "hier_reduce_scatter on rank {}: {} input blocks for a group of {} ranks", ctx.rank(),
             inputs.size(), n);
  const Groups g(ctx, layout, "hier_reduce_scatter");
  const std::size_t bytes = static_cast<std::size_t>(count) * element_size(dtype);
  std::vector<const void*> in(inputs.begin(), inputs.end());
  std::optional<Scratch> scaled;  // PREMUL_SUM scales a copy: the inputs stay as they were
  if (reduction.op == ReduceOp::kPremulSum && bytes > 0) {
    scaled.emplace(ScratchSlot::kInputCopy, bytes * in.size());
    for (std::size_t r = 0; r < in.size(); ++r) {
      std::memcpy(scaled->data() + r * bytes, in[r], bytes);
    }
    premul_in_place(dtype, reduction.premul_factor, scaled->data(), count * n);
    in = block_pointers(scaled->data(), n, bytes);
  }
  const Reduction acc = accumulating(reduction);
  if (count > 0) {
    // The inputs are read only here and the output written only by the cross phase, after
    // it: they may overlap in any way.
    const Scratch partial(ScratchSlot::kHierarchy,
                          bytes * static_cast<std::size_t>(layout.hosts()));
    for (int h = 0; h < layout.hosts(); ++h) {
      std::vector<const void*> row;
      for (int r : layout.ranks_on(h)) row.push_back(in[static_cast<std::size_t>(r)]);
      ring_reduce_scatter_to(g.local(), dtype, acc, row,
                             partial.data() + static_cast<std::size_t>(h) * bytes, count);
    }
    ring_reduce_scatter_to(g.cross(), dtype, acc,
                           block_pointers(partial.data(), layout.hosts(), bytes), output, count);
  }
  if (reduction.op == ReduceOp::kAvg) finish_average(dtype, output, count, n);
}

void hier_broadcast(const Context& ctx, const HostLayout& layout, std::span<std::byte> data,
                    int root) {
  C10D_CHECK(root >= 0 && root < ctx.size(),
             "hier_broadcast: root {} is outside a group of size {} (rank {})", root, ctx.size(),
             ctx.rank());
  const Groups g(ctx, layout, "hier_broadcast");
  if (data.empty()) return;
  const auto bytes = static_cast<std::int64_t>(data.size());
  const int per_host = layout.per_host();
  const auto chunk = [&](int l) {
    const Block b = block_of(bytes, per_host, l);
    return data.subspan(static_cast<std::size_t>(b.offset), static_cast<std::size_t>(b.count));
  };
  // 1. The root hands local rank l of its host chunk l.
  const int root_host = layout.host_of(root);
  const int root_local = layout.local_of(root);
  auto& local = g.local().transport;
  if (ctx.rank() == root) {
    std::vector<std::unique_ptr<transport::Request>> sends;
    for (int l = 0; l < per_host; ++l) {
      if (l != root_local && !chunk(l).empty())
        sends.push_back(local.isend(l, ctx.tag, chunk(l), ctx.call));
    }
    transport::wait_all(sends, ctx.deadline);
  } else if (g.host() == root_host && !chunk(g.local_rank()).empty()) {
    local.irecv(root_local, ctx.tag, chunk(g.local_rank()), ctx.call)->wait(ctx.deadline);
  }
  // 2. Cross group l carries chunk l from the root's host to every other.
  const std::span<std::byte> mine = chunk(g.local_rank());
  if (static_cast<std::int64_t>(mine.size()) >= kChainBroadcastMinBytes) {
    pipelined_broadcast(g.cross(), mine, root_host);
  } else {
    tree_broadcast(g.cross(), mine, root_host);
  }
  // 3. Every host gathers its chunks (on the root's host, the root receives what it has).
  ring_all_gather(g.local(), DType::kUInt8, data.data(), bytes);
}

}  // namespace c10d::inline v1::algorithms
