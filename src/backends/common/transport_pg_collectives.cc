// TransportProcessGroup's collectives (transport_process_group_impl.h): each checks its
// arguments on the caller's thread (InvalidArgument at once, nothing queued) and queues a closure
// that runs it against a Context; and the algorithm each runs (algorithms/choice.h, forced by
// C10D_ALGO or the algo option; a backend's hooks may take some with their own).
#include <fmt/ranges.h>

#include <algorithm>

#include "algorithms/all_gather.h"
#include "algorithms/all_to_all.h"
#include "algorithms/barrier.h"
#include "algorithms/gather_scatter.h"
#include "algorithms/halving_doubling_all_reduce.h"
#include "algorithms/hierarchical.h"
#include "algorithms/host_probe.h"
#include "algorithms/host_shares.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/reduce_scatter.h"
#include "algorithms/scratch.h"
#include "algorithms/slot_all_reduce.h"
#include "algorithms/slot_probe.h"
#include "algorithms/tree.h"
#include "backends/common/transport_process_group_impl.h"
#include "core/copy.h"
#include "core/logging.h"

namespace c10d::inline v1::backends::tpg_detail {

namespace {

// Runs `round`, a shared-slot round of the op ctx runs on `rank`, and words a SlotMismatch as
// the two calls.
template <typename Round>
void in_slots(const Context& ctx, int rank, Round&& round) {
  try {
    round();
  } catch (const transport::SlotMismatch& m) {
    C10D_THROW(InvalidArgument, "rank {}: its {} #{} does not match rank {}'s {} #{}: {}", rank,
               describe_call(ctx.call), ctx.tag & transport::kSequenceMask, m.peer,
               describe_call(m.check), m.tag & transport::kSequenceMask, kSameCallsRule);
  }
}

}  // namespace

// ---- Queueing ----

template <typename Run>
std::shared_ptr<Work> TransportProcessGroup::enqueue(std::string_view op, OpRecord&& record,
                                                     std::optional<Milliseconds> timeout,
                                                     Run&& run) {
  record.op = op;
  return push(record, timeout, [&](std::shared_ptr<Work> work, const OpRecord& r, Milliseconds t) {
    return std::make_shared<RunOp<std::decay_t<Run>>>(std::move(work), r, t,
                                                      std::forward<Run>(run));
  });
}

// ---- The collectives (caller's thread) ----

std::shared_ptr<Work> TransportProcessGroup::all_reduce(std::vector<Tensor> tensors,
                                                        const AllreduceOptions& opts) {
  constexpr std::string_view kOp = "all_reduce";
  checks_.tensors(tensors, kOp, /*same=*/true);
  algorithms::validate_reduction(tensors[0].dtype(), opts.reduce.op);
  // The record first: the closure takes the tensors (moved in and out, not copied: a small
  // all_reduce's every allocation shows in its latency).
  OpRecord record = OpRecord::of(kOp, tensors[0], opts.reduce.op, -1, total(tensors));
  return enqueue(kOp, std::move(record), opts.timeout,
                 [this, tensors = std::move(tensors), r = opts.reduce](const Context& ctx) mutable {
                   for (const auto& t : tensors) all_reduce_one(ctx, t, r);
                   return std::move(tensors);
                 });
}

std::shared_ptr<Work> TransportProcessGroup::broadcast(std::vector<Tensor> tensors,
                                                       const BroadcastOptions& opts) {
  constexpr std::string_view kOp = "broadcast";
  checks_.tensors(tensors, kOp, /*same=*/false);
  checks_.root(kOp, opts.root);
  return enqueue(kOp, OpRecord::of(kOp, tensors[0], std::nullopt, opts.root, total(tensors)),
                 opts.timeout, [this, tensors, root = opts.root](const Context& ctx) {
                   for (const auto& t : tensors) broadcast_one(ctx, bytes_of(t), root);
                   return tensors;
                 });
}

std::shared_ptr<Work> TransportProcessGroup::reduce(Tensor tensor, const ReduceOptions& opts) {
  constexpr std::string_view kOp = "reduce";
  checks_.defined(tensor, kOp, "the tensor");
  checks_.root(kOp, opts.root);
  algorithms::validate_reduction(tensor.dtype(), opts.reduce.op);
  return enqueue(kOp, OpRecord::of(kOp, tensor, opts.reduce.op, opts.root, tensor.numel()),
                 opts.timeout, [tensor, opts](const Context& ctx) {
                   algorithms::tree_reduce(ctx, tensor.dtype(), opts.reduce, tensor.raw_data(),
                                           tensor.numel(), opts.root);
                   return std::vector<Tensor>{tensor};
                 });
}

std::shared_ptr<Work> TransportProcessGroup::all_gather(std::vector<Tensor> outputs, Tensor input,
                                                        const AllgatherOptions& opts) {
  constexpr std::string_view kOp = "all_gather";
  checks_.defined(input, kOp, "the input");
  checks_.count(kOp, "outputs", outputs.size());
  for (const auto& t : outputs) checks_.like(t, input, kOp, "an output");
  return enqueue(kOp, OpRecord::of(kOp, input, std::nullopt, -1, input.numel()), opts.timeout,
                 [this, outputs, input](const Context& ctx) {
                   const std::size_t block = input.nbytes();
                   const algorithms::Scratch all(algorithms::ScratchSlot::kStaging,
                                                 block * outputs.size());
                   gather_all(ctx, bytes_of(input), all.span());
                   for (std::size_t r = 0; r < outputs.size(); ++r) {
                     core::copy_bytes(outputs[r].raw_data(), all.data() + r * block, block);
                   }
                   return outputs;
                 });
}

std::shared_ptr<Work> TransportProcessGroup::all_gather_into_tensor(Tensor output, Tensor input,
                                                                    const AllgatherOptions& opts) {
  constexpr std::string_view kOp = "all_gather_into_tensor";
  checks_.blocks(kOp, output, "output", input, "input");
  return enqueue(kOp, OpRecord::of(kOp, input, std::nullopt, -1, input.numel()), opts.timeout,
                 [this, output, input](const Context& ctx) {
                   gather_all(ctx, bytes_of(input), bytes_of(output));
                   return std::vector<Tensor>{output};
                 });
}

std::shared_ptr<Work> TransportProcessGroup::reduce_scatter(Tensor output,
                                                            std::vector<Tensor> inputs,
                                                            const ReduceScatterOptions& opts) {
  constexpr std::string_view kOp = "reduce_scatter";
  checks_.defined(output, kOp, "the output");
  checks_.count(kOp, "inputs", inputs.size());
  for (const auto& t : inputs) checks_.like(t, output, kOp, "an input");
  algorithms::validate_reduction(output.dtype(), opts.reduce.op);
  return enqueue(kOp, OpRecord::of(kOp, output, opts.reduce.op, -1, output.numel()), opts.timeout,
                 [this, output, inputs, r = opts.reduce](const Context& ctx) {
                   std::vector<const void*> blocks;  // each input where it is
                   for (const auto& t : inputs) blocks.push_back(t.raw_data());
                   scatter_reduced(ctx, output.dtype(), r, blocks, output.raw_data(),
                                   output.numel());
                   return std::vector<Tensor>{output};
                 });
}

std::shared_ptr<Work> TransportProcessGroup::reduce_scatter_tensor(
    Tensor output, Tensor input, const ReduceScatterOptions& opts) {
  constexpr std::string_view kOp = "reduce_scatter_tensor";
  checks_.blocks(kOp, input, "input", output, "output");
  algorithms::validate_reduction(output.dtype(), opts.reduce.op);
  return enqueue(kOp, OpRecord::of(kOp, output, opts.reduce.op, -1, output.numel()), opts.timeout,
                 [this, output, input, r = opts.reduce](const Context& ctx) {
                   scatter_reduced(
                       ctx, output.dtype(), r,
                       algorithms::block_pointers(input.raw_data(), size(), output.nbytes()),
                       output.raw_data(), output.numel());
                   return std::vector<Tensor>{output};
                 });
}

std::shared_ptr<Work> TransportProcessGroup::all_to_all(Tensor output, Tensor input,
                                                        const AllToAllOptions& opts) {
  constexpr std::string_view kOp = "all_to_all";
  const AllToAllLayout l = checks_.all_to_all(output, input, opts);
  return enqueue(kOp, OpRecord::of(kOp, input, std::nullopt, -1, l.even ? input.numel() : -1),
                 opts.timeout, [this, input, output, l](const Context& ctx) {
                   if (choose(CollectiveOp::kAllToAll,
                              static_cast<std::int64_t>(output.nbytes())) == Algorithm::kTorus &&
                       hooks_->all_to_allv(ctx, bytes_of(input), l.send_counts, l.send_offsets,
                                           bytes_of(output), l.recv_counts, l.recv_offsets)) {
                     return std::vector<Tensor>{output};
                   }
                   algorithms::all_to_allv(ctx, bytes_of(input), l.send_counts, l.send_offsets,
                                           bytes_of(output), l.recv_counts, l.recv_offsets);
                   return std::vector<Tensor>{output};
                 });
}

std::shared_ptr<Work> TransportProcessGroup::gather(std::vector<Tensor> outputs, Tensor input,
                                                    const GatherOptions& opts) {
  constexpr std::string_view kOp = "gather";
  checks_.defined(input, kOp, "the input");
  checks_.root_list(kOp, opts.root, outputs, input, "outputs");
  return enqueue(kOp, OpRecord::of(kOp, input, std::nullopt, opts.root, input.numel()),
                 opts.timeout, [outputs, input, root = opts.root](const Context& ctx) {
                   std::vector<std::span<std::byte>> spans;
                   for (const auto& t : outputs) spans.push_back(bytes_of(t));
                   algorithms::gather(ctx, bytes_of(input), spans, root);
                   return outputs;
                 });
}

std::shared_ptr<Work> TransportProcessGroup::scatter(Tensor output, std::vector<Tensor> inputs,
                                                     const ScatterOptions& opts) {
  constexpr std::string_view kOp = "scatter";
  checks_.defined(output, kOp, "the output");
  checks_.root_list(kOp, opts.root, inputs, output, "inputs");
  return enqueue(kOp, OpRecord::of(kOp, output, std::nullopt, opts.root, output.numel()),
                 opts.timeout, [output, inputs, root = opts.root](const Context& ctx) {
                   std::vector<std::span<const std::byte>> spans;
                   for (const auto& t : inputs) spans.emplace_back(bytes_of(t));
                   algorithms::scatter(ctx, spans, bytes_of(output), root);
                   return std::vector<Tensor>{output};
                 });
}

std::shared_ptr<Work> TransportProcessGroup::barrier(const BarrierOptions& opts) {
  return enqueue("barrier", OpRecord{}, opts.timeout, [this](const Context& ctx) {
    if (slots_ != nullptr) {  // a round of nothing: everyone has arrived once it completes
      in_slots(ctx, rank(), [&] { slots_->gather(ctx.tag, ctx.call, {}, ctx.deadline); });
    } else {
      algorithms::barrier(ctx);
    }
    return std::vector<Tensor>{};
  });
}

// ---- Algorithm choice (the thread that runs the op) ----

// The algorithm for `op` over this group (algorithms/choice.h). The torus's own plans
// (kTorus) are the hooks' to run; where they decline, the transport's choice runs instead.
Algorithm TransportProcessGroup::choose(CollectiveOp op, std::int64_t bytes) const {
  return algorithms::choose_algorithm(op, bytes, size(),
                                      hooks_ ? Fabric::kTorus : Fabric::kTransport, forced_,
                                      {layout_.hosts(), layout_.per_host()});
}

Algorithm TransportProcessGroup::choose_generic(CollectiveOp op, std::int64_t bytes) const {
  return algorithms::choose_algorithm(op, bytes, size(), Fabric::kTransport, forced_,
                                      {layout_.hosts(), layout_.per_host()});
}

// From this size a hierarchical all_reduce over 3 or more hosts may re-measure the links: every
// kShareProbeEvery-th such op, the first included, probes with 1/8 of its bytes (at most
// kShareProbeMaxBytes per host), so the probe costs a few percent of one op in that many.
constexpr std::int64_t kShareProbeMinBytes = 16 << 20;
constexpr std::uint64_t kShareProbeEvery = 32;
constexpr std::int64_t kShareProbeMaxBytes = 8 << 20;

const std::vector<std::int64_t>& TransportProcessGroup::host_shares(const Context& ctx,
                                                                    std::int64_t bytes) {
  if (host_shares_fixed_ || layout_.hosts() < 3 || bytes < kShareProbeMinBytes) {
    return host_shares_;
  }
  if (large_hier_ops_++ % kShareProbeEvery != 0) return host_shares_;
  const std::vector<double> rates =
      algorithms::probe_edge_rates(ctx, layout_, std::min(bytes / 8, kShareProbeMaxBytes));
  std::vector<std::int64_t> next = algorithms::next_shares(host_shares_, rates);
  if (next != host_shares_) {
    std::vector<double> mbps;
    for (double x : rates) mbps.push_back(x / 1e6);
    C10D_LOG_INFO("rank {}: cross-host edge rates {::.1f} MB/s: host shares {} (were {})", rank(),
                  mbps, next, host_shares_);
    host_shares_ = std::move(next);
  }
  return host_shares_;
}

void TransportProcessGroup::all_reduce_one(const Context& ctx, const Tensor& t,
                                           const Reduction& r) {
  const auto bytes = static_cast<std::int64_t>(t.nbytes());
  Algorithm algo = choose(CollectiveOp::kAllReduce, bytes);
  if (algo == Algorithm::kTorus) {
    if (hooks_->all_reduce(ctx, t.dtype(), r, t.raw_data(), t.numel())) return;
    algo = choose_generic(CollectiveOp::kAllReduce, bytes);
  }
  if (algo == Algorithm::kHierarchical) {
    algorithms::hier_all_reduce(ctx, layout_, t.dtype(), r, t.raw_data(), t.numel(),
                                host_shares(ctx, bytes), hier_pieces_);
  } else if (algo == Algorithm::kHalvingDoubling && !forced_.all_reduce && slots_ != nullptr &&
             static_cast<std::size_t>(bytes) <= slots_->max_bytes()) {
    in_slots(ctx, rank(), [&] {
      algorithms::slot_all_reduce(ctx, *slots_, ctx.call, t.dtype(), r, t.raw_data(), t.numel());
    });
  } else if (algo == Algorithm::kRing) {
    algorithms::ring_all_reduce(ctx, t.dtype(), r, t.raw_data(), t.numel(),
                                ring_for(ctx, "all_reduce", bytes));
  } else {
    algorithms::halving_doubling_all_reduce(ctx, t.dtype(), r, t.raw_data(), t.numel());
  }
}

const algorithms::RingOptions& TransportProcessGroup::ring_for(const Context& ctx,
                                                               std::string_view op,
                                                               std::int64_t bytes) const {
  if (slots_ == nullptr || size() != 2 || bytes < algorithms::kTwoRankRingMinBytes) return ring_;
  // Measured at every such op (a few microseconds against milliseconds): the host moves the
  // ranks' vCPUs every few seconds.
  std::chrono::nanoseconds round{};
  in_slots(ctx, rank(), [&] { round = algorithms::slot_round_time(ctx, *slots_, ctx.call); });
  const bool apart = algorithms::cores_apart(round);
  C10D_LOG_DEBUG("rank {}: {} #{} of {} bytes: a shared-slot round takes {} ns: {}", rank(), op,
                 ctx.tag & transport::kSequenceMask, bytes, round.count(),
                 apart ? "single-copy segments" : "ring segments through shared memory");
  return apart ? apart_ring_ : ring_;
}

void TransportProcessGroup::broadcast_one(const Context& ctx, std::span<std::byte> data,
                                          int root) const {
  const auto bytes = static_cast<std::int64_t>(data.size());
  Algorithm algo = choose(CollectiveOp::kBroadcast, bytes);
  if (algo == Algorithm::kTorus) {
    if (hooks_->broadcast(ctx, data, root)) return;
    algo = choose_generic(CollectiveOp::kBroadcast, bytes);
  }
  if (algo == Algorithm::kHierarchical) {
    algorithms::hier_broadcast(ctx, layout_, data, root);
  } else if (algo == Algorithm::kChain) {
    algorithms::pipelined_broadcast(ctx, data, root);
  } else {
    algorithms::tree_broadcast(ctx, data, root);
  }
}

void TransportProcessGroup::gather_all(const Context& ctx, std::span<const std::byte> in,
                                       std::span<std::byte> out) const {
  const Algorithm algo = choose(CollectiveOp::kAllGather, static_cast<std::int64_t>(out.size()));
  if (algo == Algorithm::kTorus && hooks_->all_gather(ctx, in, out)) return;
  if (algo == Algorithm::kHierarchical) {
    algorithms::hier_all_gather(ctx, layout_, in, out);
  } else {
    algorithms::all_gather(ctx, in, out,
                           ring_for(ctx, "all_gather", static_cast<std::int64_t>(out.size())));
  }
}

void TransportProcessGroup::scatter_reduced(const Context& ctx, DType dtype, const Reduction& r,
                                            std::span<const void* const> blocks, void* out,
                                            std::int64_t count) const {
  const auto bytes = count * static_cast<std::int64_t>(element_size(dtype)) * size();
  const Algorithm algo = choose(CollectiveOp::kReduceScatter, bytes);
  if (algo == Algorithm::kTorus && hooks_->reduce_scatter(ctx, dtype, r, blocks, out, count)) {
    return;
  }
  if (algo == Algorithm::kHierarchical) {
    algorithms::hier_reduce_scatter(ctx, layout_, dtype, r, blocks, out, count);
  } else {
    algorithms::reduce_scatter_blocks(ctx, dtype, r, blocks, out, count,
                                      ring_for(ctx, "reduce_scatter", bytes));
  }
}

}  // namespace c10d::inline v1::backends::tpg_detail
