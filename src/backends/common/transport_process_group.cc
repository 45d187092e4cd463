// TransportProcessGroup: argument checks on the caller's thread, collectives run in issue order
// by the worker thread or by the thread that waits for them (run_inline), and one completer
// thread for point-to-point ops. The queue, the worker, who runs what and the failure latch are
// OpRunner's (op_runner.h); this group is its driver.
//
// Words used here:
//  - op: one call of the ProcessGroup API, queued as a PendingOp with its Work, its record
//    (sequence number and what the fingerprint compares) and a closure that runs it against a
//    Context.
//  - failure: the first error any op meets once it has started. The runner keeps it, the
//    transport is aborted with it (so the peers' connections close and they fail too), and every
//    pending and later op of this group fails with it.
//  - point-to-point (p2p): send, recv and recv_any_source. The worker posts their requests in
//    issue order (that fixes the matching order) and hands them to the completer, which tests
//    them until done: a recv waiting for a peer never blocks the collectives queued behind it.
#include "backends/common/transport_process_group.h"

#include <algorithm>
#include <array>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string_view>
#include <thread>

#include "algorithms/all_gather.h"
#include "algorithms/all_to_all.h"
#include "algorithms/barrier.h"
#include "algorithms/choice.h"
#include "algorithms/context.h"
#include "algorithms/gather_scatter.h"
#include "algorithms/halving_doubling_all_reduce.h"
#include "algorithms/reduce_kernels.h"
#include "algorithms/reduce_scatter.h"
#include "algorithms/ring_all_reduce.h"
#include "algorithms/scratch.h"
#include "algorithms/tree.h"
#include "backends/common/fingerprint.h"
#include "backends/common/inline_schedule.h"
#include "backends/common/op_checks.h"
#include "backends/common/op_runner.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "core/host.h"
#include "core/logging.h"
#include "core/parse.h"
#include "core/spin_wait.h"
#include "core/work_control.h"
#include "transport/sub_transport.h"

namespace c10d::inline v1::backends {
namespace {

using algorithms::Algorithm;
using algorithms::CollectiveOp;
using algorithms::Context;
using algorithms::Fabric;
using transport::Clock;

std::string env_or(const char* name, const std::string& fallback) {
  if (!fallback.empty()) return fallback;
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// ---- Tensor helpers ----

std::span<std::byte> bytes_of(const Tensor& t) {
  return {static_cast<std::byte*>(t.raw_data()), t.nbytes()};
}

// ---- The group ----

// A queued op: its Work (the backend hooks' type, when given), its record, and the closure that
// runs it (RunOp, PostOp).
struct PendingOp : RunnerOp {
  PendingOp(std::shared_ptr<Work> w, const OpRecord& record, Milliseconds timeout)
      : RunnerOp(*w, record, timeout), work(std::move(w)) {}
  // Collectives: runs the op; returns its outputs.
  virtual std::vector<Tensor> run(const Context&) { return {}; }
  // Point-to-point: posts the op's requests.
  virtual std::vector<std::unique_ptr<transport::Request>> post(transport::Transport&,
                                                                transport::Tag) {
    return {};
  }

  const std::shared_ptr<Work> work;
  std::uint32_t user_tag = 0;
  int peer = -1;                // p2p: the rank sent to or received from; kAnySource: any
  std::vector<Tensor> outputs;  // p2p result
};

template <typename Run>
struct RunOp final : PendingOp {
  RunOp(std::shared_ptr<Work> w, const OpRecord& record, Milliseconds timeout, Run r)
      : PendingOp(std::move(w), record, timeout), body(std::move(r)) {}
  std::vector<Tensor> run(const Context& ctx) override { return body(ctx); }
  Run body;
};

template <typename Post>
struct PostOp final : PendingOp {
  PostOp(std::shared_ptr<Work> w, const OpRecord& record, Milliseconds timeout, Post p)
      : PendingOp(std::move(w), record, timeout), body(std::move(p)) {}
  std::vector<std::unique_ptr<transport::Request>> post(transport::Transport& t,
                                                        transport::Tag tag) override {
    return body(t, tag);
  }
  Post body;
};

struct PostedP2P {
  std::shared_ptr<PendingOp> op;
  std::shared_ptr<Work> work;
  std::vector<std::unique_ptr<transport::Request>> requests;
  std::vector<Tensor> outputs;
  Clock::time_point deadline;
  // For the error of one that times out, and a receive's source_rank (kAnySource: the
  // request's source()).
  int peer = -1;
  std::uint32_t user_tag = 0;
  Clock::duration timeout{};
};

std::uint32_t child_group_id(std::uint32_t parent, std::uint32_t index) {
  // splitmix64 of (parent, index), folded into 1..kMaxGroups-1: the same on every rank.
  std::uint64_t z = (static_cast<std::uint64_t>(parent) << 32 | index) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return 1 + static_cast<std::uint32_t>(z % (transport::kMaxGroups - 1));
}

class TransportProcessGroup final : public ProcessGroup,
                                    public std::enable_shared_from_this<TransportProcessGroup>,
                                    private OpRunner::Driver {
 public:
  TransportProcessGroup(std::shared_ptr<transport::Transport> transport,
                        TransportProcessGroupOptions options)
      : ProcessGroup(transport->rank(), transport->size()),
        transport_(std::move(transport)),
        options_(std::move(options)),
        checks_(rank(), size()),
        detail_(options_.detail < 0 ? detail_from_env() : options_.detail > 0),
        runner_(*this, {.name = fmt::format("group {}", options_.group_id),
                        .rank = rank(),
                        .inline_ops = !options_.hooks && inline_from_env(),
                        .serial = true,
                        .waiter_waits_long = true,
                        .poll_queue = true}) {
    const std::string algo = env_or("C10D_ALGO", options_.algo);
    forced_ = algorithms::parse_algo_override(
        algo, options_.algo.empty() ? "C10D_ALGO" : "the algo option");
    C10D_CHECK(options_.group_id < transport::kMaxGroups, "group id {} is not below {}",
               options_.group_id, transport::kMaxGroups);
    core::check_timeout(options_.timeout, "the group");
    core::spin_window();   // a malformed C10D_SPIN_US fails the group's creation, not a wait
    core::has_own_core();  // and a malformed LOCAL_WORLD_SIZE too
    if (!options_.ring_order.empty()) {
      C10D_CHECK(static_cast<int>(options_.ring_order.size()) == size(),
                 "ring order lists {} ranks for a group of {}", options_.ring_order.size(), size());
    }
    ring_.order = options_.ring_order;
    hooks_ = options_.hooks;
    runner_.start_worker();
  }

  ~TransportProcessGroup() override {
    const auto reason = std::make_exception_ptr(Error(fmt::format(
        "rank {}: group {} was destroyed with this op pending", rank(), options_.group_id)));
    runner_.stop(reason);  // fails what is queued, joins the worker
    p2p_cv_.notify_all();
    if (completer_.joinable()) completer_.join();
    for (auto& p : posted_) p.op->fail(reason);
  }

  std::string backend_name() const override { return options_.backend_name; }
  const std::shared_ptr<transport::Transport>& transport() const { return transport_; }

  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors,
                                   const AllreduceOptions& opts) override {
    constexpr std::string_view kOp = "all_reduce";
    checks_.tensors(tensors, kOp, /*same=*/true);
    algorithms::validate_reduction(tensors[0].dtype(), opts.reduce.op);
    return enqueue(kOp, OpRecord::of(kOp, tensors[0], opts.reduce.op, -1, total(tensors)),
                   opts.timeout, [this, tensors, r = opts.reduce](const Context& ctx) {
                     for (const auto& t : tensors) all_reduce_one(ctx, t, r);
                     return tensors;
                   });
  }

  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors,
                                  const BroadcastOptions& opts) override {
    constexpr std::string_view kOp = "broadcast";
    checks_.tensors(tensors, kOp, /*same=*/false);
    checks_.root(kOp, opts.root);
    return enqueue(kOp, OpRecord::of(kOp, tensors[0], std::nullopt, opts.root, total(tensors)),
                   opts.timeout, [this, tensors, root = opts.root](const Context& ctx) {
                     for (const auto& t : tensors) broadcast_one(ctx, bytes_of(t), root);
                     return tensors;
                   });
  }

  std::shared_ptr<Work> reduce(Tensor tensor, const ReduceOptions& opts) override {
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

  std::shared_ptr<Work> all_gather(std::vector<Tensor> outputs, Tensor input,
                                   const AllgatherOptions& opts) override {
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
                       if (block > 0)
                         std::memcpy(outputs[r].raw_data(), all.data() + r * block, block);
                     }
                     return outputs;
                   });
  }

  std::shared_ptr<Work> all_gather_into_tensor(Tensor output, Tensor input,
                                               const AllgatherOptions& opts) override {
    constexpr std::string_view kOp = "all_gather_into_tensor";
    checks_.blocks(kOp, output, "output", input, "input");
    return enqueue(kOp, OpRecord::of(kOp, input, std::nullopt, -1, input.numel()), opts.timeout,
                   [this, output, input](const Context& ctx) {
                     gather_all(ctx, bytes_of(input), bytes_of(output));
                     return std::vector<Tensor>{output};
                   });
  }

  std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                       const ReduceScatterOptions& opts) override {
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

  std::shared_ptr<Work> reduce_scatter_tensor(Tensor output, Tensor input,
                                              const ReduceScatterOptions& opts) override {
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

  std::shared_ptr<Work> all_to_all(Tensor output, Tensor input,
                                   const AllToAllOptions& opts) override {
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

  std::shared_ptr<Work> gather(std::vector<Tensor> outputs, Tensor input,
                               const GatherOptions& opts) override {
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

  std::shared_ptr<Work> scatter(Tensor output, std::vector<Tensor> inputs,
                                const ScatterOptions& opts) override {
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

  std::shared_ptr<Work> barrier(const BarrierOptions& opts) override {
    return enqueue("barrier", OpRecord{}, opts.timeout, [](const Context& ctx) {
      algorithms::barrier(ctx);
      return std::vector<Tensor>{};
    });
  }

  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst_rank,
                             const SendRecvOptions& opts) override {
    return point_to_point("send", std::move(tensors), dst_rank, opts);
  }

  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src_rank,
                             const SendRecvOptions& opts) override {
    return point_to_point("recv", std::move(tensors), src_rank, opts);
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    const bool member = checks_.new_group(ranks);
    std::uint32_t index;
    {
      std::lock_guard lock(mu_);
      index = next_child_++;
    }
    if (!member) return nullptr;
    TransportProcessGroupOptions child = options_;
    child.group_id = child_group_id(options_.group_id, index);
    child.ring_order.clear();
    child.detail = detail_ ? 1 : 0;
    child.algo = options_.algo;
    child.hooks = hooks_ ? hooks_->for_subgroup(ranks) : nullptr;
    return std::make_shared<TransportProcessGroup>(
        std::make_shared<transport::SubTransport>(transport_, ranks), std::move(child));
  }

  void abort() override {
    fail(std::make_exception_ptr(
        Error(fmt::format("rank {}: group {} was aborted", rank(), options_.group_id))));
  }

 private:
  // ---- Checks and fingerprints (caller's thread) ----

  static std::int64_t total(const std::vector<Tensor>& tensors) {
    std::int64_t n = 0;
    for (const auto& t : tensors) n += t.numel();
    return n;
  }
  // ---- Queueing ----

  template <typename Run>
  std::shared_ptr<Work> enqueue(std::string_view op, OpRecord record,
                                std::optional<Milliseconds> timeout, Run&& run) {
    record.op = op;
    return push(record, timeout,
                [&](std::shared_ptr<Work> work, const OpRecord& r, Milliseconds t) {
                  return std::make_shared<RunOp<std::decay_t<Run>>>(std::move(work), r, t,
                                                                    std::forward<Run>(run));
                });
  }

  // Queues the op `make(work, record, timeout)` makes (under the runner's mutex).
  template <typename Make>
  std::shared_ptr<Work> push(const OpRecord& record, std::optional<Milliseconds> timeout,
                             Make&& make) {
    const std::string_view op = record.op;
    const Milliseconds t = timeout.value_or(options_.timeout);
    core::check_timeout(t, op);
    // Collectives and point-to-point ops count apart (OpRunner): only collectives must agree
    // across ranks (their tag is the sequence); p2p ops are matched by their user tag.
    const auto queued = runner_.submit(record, [&](const OpRecord& r) {
      if (r.collective) {
        op_names_[r.sequence % op_names_.size()] = op;  // a literal: see frame_name
        next_sequence_ = r.sequence + 1;
      }
      return make(hooks_ ? hooks_->make_work(std::string(op), r.sequence)
                         : std::make_shared<Work>(std::string(op), r.sequence),
                  r, t);
    });
    return static_cast<PendingOp&>(*queued).work;
  }

  std::shared_ptr<Work> point_to_point(std::string_view op, std::vector<Tensor> tensors, int peer,
                                       const SendRecvOptions& opts) {
    checks_.point_to_point(op, tensors, peer, opts.tag);
    const bool is_send = op == "send";
    auto post = [tensors, peer, is_send](transport::Transport& t, transport::Tag tag) {
      std::vector<std::unique_ptr<transport::Request>> requests;
      for (const auto& tensor : tensors) {
        requests.push_back(is_send ? t.isend(peer, tag, bytes_of(tensor))
                                   : t.irecv(peer, tag, bytes_of(tensor)));
      }
      return requests;
    };
    const auto record = OpRecord::point_to_point(op, tensors[0], peer, total(tensors));
    return push_p2p(record, opts, std::move(tensors), std::move(post));
  }

  std::shared_ptr<Work> recv_any_source(std::vector<Tensor> tensors,
                                        const SendRecvOptions& opts) override {
    checks_.recv_any_source(tensors, opts.tag);
    auto post = [tensor = tensors.front()](transport::Transport& t, transport::Tag tag) {
      std::vector<std::unique_ptr<transport::Request>> requests;
      requests.push_back(t.irecv_any(tag, bytes_of(tensor)));
      return requests;
    };
    const auto record = OpRecord::point_to_point("recv_any_source", tensors[0],
                                                 transport::kAnySource, tensors[0].numel());
    return push_p2p(record, opts, std::move(tensors), std::move(post));
  }

  template <typename Post>
  std::shared_ptr<Work> push_p2p(const OpRecord& record, const SendRecvOptions& opts,
                                 std::vector<Tensor> outputs, Post&& post) {
    return push(record, opts.timeout,
                [&](std::shared_ptr<Work> work, const OpRecord& r, Milliseconds t) {
                  auto p = std::make_shared<PostOp<std::decay_t<Post>>>(std::move(work), r, t,
                                                                        std::forward<Post>(post));
                  p->user_tag = static_cast<std::uint32_t>(opts.tag);
                  p->peer = r.rank;
                  p->outputs = std::move(outputs);
                  return p;
                });
  }

  // ---- Running (OpRunner's driver: the worker thread, and waiters) ----

  std::shared_ptr<const core::WaitHook> make_wait_hook() override {
    return backends::shared_wait_hook(weak_from_this(), &TransportProcessGroup::run_inline);
  }

  // The worker runs every op it takes to its end (a send/recv: until posted).
  std::exception_ptr start(OpRunner::OpPtr op, Clock::time_point deadline) override {
    auto p = std::static_pointer_cast<PendingOp>(std::move(op));
    finish_op(*p, run_op(p, deadline));
    return nullptr;
  }

  // The group's first failure: the transport is aborted so the peers fail too.
  void on_failure(const std::exception_ptr& e) override {
    transport_->abort(e);
    p2p_cv_.notify_all();
  }

  // An op still running holds its thread in a transport wait: only an abort releases it.
  void on_stop_locked(const std::exception_ptr& reason, bool running) override {
    if (running) transport_->abort(reason);
  }

  void fail(std::exception_ptr e) { runner_.fail(std::move(e)); }

  // Work::wait's hook for collectives: when `w` is next to start, nothing runs ahead of it and
  // its waiter waits about as long as the op's own timeout, the waiter runs the op on its own
  // thread (no thread hand-off; see inline_schedule.h) with the earlier of the two deadlines.
  // Otherwise the worker runs it, now. A waiter with a much shorter wait leaves the op to the
  // worker, so that its wait can time out while the op goes on.
  void run_inline(Work& w, core::WaitClock& clock) {
    auto op = std::static_pointer_cast<PendingOp>(runner_.take_for_waiter(w, clock.timeout()));
    if (!op) return;
    const auto deadline = clock.start() + std::min<Clock::duration>(op->timeout(), clock.timeout());
    finish_op(*op, run_op(op, deadline));
  }

  struct Outcome {
    std::vector<Tensor> outputs;
    std::exception_ptr error;
    bool handed_off = false;  // a send/recv posted and given to the completer (not running)
  };

  // Completes `op` after run_op, on the thread that ran it.
  void finish_op(PendingOp& op, Outcome outcome) {
    // Released before the Work completes: a caller that destroys the group as soon as its last
    // op is done must find nothing running (else the destructor aborts the transport). A
    // handed-off op was released already (and another may run since).
    runner_.finished(!outcome.handed_off);
    if (hooks_ && (op.collective() || outcome.error)) hooks_->op_finished(*op.work);
    if (outcome.error) {
      op.fail(outcome.error);
    } else if (op.collective()) {
      op.succeed(std::move(outcome.outputs));
    }
  }

  Outcome run_op(const std::shared_ptr<PendingOp>& p, Clock::time_point deadline) {
    PendingOp& op = *p;
    const std::uint64_t seq = op.record().sequence;
    if (hooks_) hooks_->op_started(*op.work);
    try {
      if (op.collective()) {
        const Context ctx{*transport_, transport::make_tag(options_.group_id, seq), deadline};
        if (detail_) {
          // Every rank sees the same fingerprints and fails this op alike, so the sequence
          // numbers stay in step and the group stays usable.
          if (auto mismatch = check_fingerprints(Fingerprint::of(op.record()), deadline)) {
            return {{}, mismatch};
          }
        }
        return {op.run(ctx), nullptr};
      }
      PostedP2P posted{p,
                       op.work,
                       op.post(*transport_, transport::user_tag(options_.group_id, op.user_tag)),
                       std::move(op.outputs),
                       deadline,
                       op.peer,
                       op.user_tag,
                       op.timeout()};
      {
        std::lock_guard lock(runner_.mutex());
        posted_.push_back(std::move(posted));
        // From here the completer may complete the op's Work, and its caller destroy the group
        // at once: nothing may count as running then (the destructor would abort the transport,
        // which a subgroup shares with its parent).
        runner_.release_locked();
        if (!completer_.joinable()) completer_ = std::thread([this] { run_completer(); });
      }
      p2p_cv_.notify_all();
      return {.handed_off = true};
    } catch (const transport::PeerTimeout& t) {
      fail(explain_timeout(op, t));
    } catch (...) {
      fail(std::current_exception());
    }
    // The group's first failure is the cause: report it, whichever op met it first.
    return {{}, runner_.failure()};
  }

  // "all_reduce #11" for a tag of one of this group's recent collectives; else tag_string.
  std::string frame_name(transport::Tag tag) {
    std::lock_guard lock(mu_);
    return frame_name_locked(tag);
  }
  std::string frame_name_locked(transport::Tag tag) const {
    const auto seq = tag & ((transport::Tag{1} << 40) - 1);
    if (tag == transport::make_tag(options_.group_id, seq)) {
      const std::string_view name = op_names_[seq % op_names_.size()];
      if (seq < next_sequence_ && seq + op_names_.size() >= next_sequence_ && !name.empty()) {
        return fmt::format("{} #{}", name, seq);
      }
    }
    return transport::tag_string(tag);
  }

  // The error of collective `op`, whose request timed out waiting for `t.peer()`: names that
  // peer, what this rank last heard from it, and the rank the ranks' waits lead to in the end
  // (Transport::find_stalled), which the abort then names to the other ranks as the cause.
  std::exception_ptr explain_timeout(const PendingOp& op, const transport::PeerTimeout& t) {
    const std::string doing = fmt::format("{} #{}", op.work->op_name(), op.record().sequence);
    // The group failed meanwhile: that is the cause.
    if (auto failure = runner_.failure()) return failure;
    // Ranks in step time out within moments of each other; a quarter of the timeout (0.2-2 s)
    // is long enough for their records to come, and short beside the timeout itself.
    const auto window =
        std::clamp(std::chrono::duration_cast<std::chrono::milliseconds>(op.timeout() / 4),
                   std::chrono::milliseconds(200), std::chrono::milliseconds(2000));
    const transport::StallReport stall = transport_->find_stalled(t.peer(), doing, window);
    const auto& heard = t.heard();
    std::string text = fmt::format(
        "rank {}: {} (group {}) timed out after {} ms waiting for rank {} ({})", rank(), doing,
        options_.group_id,
        std::chrono::duration_cast<std::chrono::milliseconds>(op.timeout()).count(), t.peer(),
        transport::heard_string(heard, heard.known ? frame_name(heard.tag) : std::string()));
    for (const auto& hop : stall.chain) {
      text += fmt::format("; rank {} waits for rank {} ({})", hop.rank, hop.awaits, hop.doing);
    }
    if (stall.suspect < 0) {
      text +=
          "; the ranks wait for each other (do they all call the same collectives in the "
          "same order? C10D_DEBUG=DETAIL checks)";
    } else {
      text += fmt::format(
          "; rank {} made no progress (no op of it timed out waiting for another "
          "rank)",
          stall.suspect);
    }
    return std::make_exception_ptr(transport::PeerTimeout(
        core::with_location(__FILE__, __LINE__, text), stall.suspect, heard));
  }

  // All-gathers the fingerprints on the control tag and compares them with rank 0's; the
  // InvalidArgument that names the ranks that differ, or null.
  std::exception_ptr check_fingerprints(const Fingerprint& fp, Clock::time_point deadline) {
    const Context ctx{*transport_, transport::control_tag(options_.group_id, fp.sequence),
                      deadline};
    const auto mine = fp.encode();
    std::vector<std::byte> all(Fingerprint::kBytes * static_cast<std::size_t>(size()));
    algorithms::all_gather(ctx, mine, all);
    return fingerprint_mismatch(all, size(), std::to_string(options_.group_id));
  }

  // The algorithm for `op` over this group (algorithms/choice.h). The torus's own plans
  // (kTorus) are the hooks' to run; where they decline, the transport's choice runs instead.
  Algorithm choose(CollectiveOp op, std::int64_t bytes) const {
    return algorithms::choose_algorithm(op, bytes, size(),
                                        hooks_ ? Fabric::kTorus : Fabric::kTransport, forced_);
  }
  Algorithm choose_generic(CollectiveOp op, std::int64_t bytes) const {
    return algorithms::choose_algorithm(op, bytes, size(), Fabric::kTransport, forced_);
  }

  void all_reduce_one(const Context& ctx, const Tensor& t, const Reduction& r) const {
    const auto bytes = static_cast<std::int64_t>(t.nbytes());
    Algorithm algo = choose(CollectiveOp::kAllReduce, bytes);
    if (algo == Algorithm::kTorus) {
      if (hooks_->all_reduce(ctx, t.dtype(), r, t.raw_data(), t.numel())) return;
      algo = choose_generic(CollectiveOp::kAllReduce, bytes);
    }
    if (algo == Algorithm::kRing) {
      algorithms::ring_all_reduce(ctx, t.dtype(), r, t.raw_data(), t.numel(), ring_);
    } else {
      algorithms::halving_doubling_all_reduce(ctx, t.dtype(), r, t.raw_data(), t.numel());
    }
  }

  void broadcast_one(const Context& ctx, std::span<std::byte> data, int root) const {
    const auto bytes = static_cast<std::int64_t>(data.size());
    Algorithm algo = choose(CollectiveOp::kBroadcast, bytes);
    if (algo == Algorithm::kTorus) {
      if (hooks_->broadcast(ctx, data, root)) return;
      algo = choose_generic(CollectiveOp::kBroadcast, bytes);
    }
    if (algo == Algorithm::kChain) {
      algorithms::pipelined_broadcast(ctx, data, root);
    } else {
      algorithms::tree_broadcast(ctx, data, root);
    }
  }

  void gather_all(const Context& ctx, std::span<const std::byte> in,
                  std::span<std::byte> out) const {
    if (choose(CollectiveOp::kAllGather, static_cast<std::int64_t>(out.size())) ==
            Algorithm::kTorus &&
        hooks_->all_gather(ctx, in, out)) {
      return;
    }
    algorithms::all_gather(ctx, in, out, ring_);
  }

  void scatter_reduced(const Context& ctx, DType dtype, const Reduction& r,
                       std::span<const void* const> blocks, void* out, std::int64_t count) const {
    const auto bytes = count * static_cast<std::int64_t>(element_size(dtype)) * size();
    if (choose(CollectiveOp::kReduceScatter, bytes) == Algorithm::kTorus &&
        hooks_->reduce_scatter(ctx, dtype, r, blocks, out, count)) {
      return;
    }
    algorithms::reduce_scatter_blocks(ctx, dtype, r, blocks, out, count, ring_);
  }

  // ---- Point-to-point completion (completer thread) ----

  // The completer's body. Ops catch their own errors; anything that still escapes (a Work
  // callback that throws, say) fails the group and the completer's ops (nobody tests them now),
  // and the thread ends, instead of std::terminate ending the process.
  void run_completer() {
    try {
      complete_loop();
    } catch (...) {
      const auto escaped = std::current_exception();
      std::list<PostedP2P> orphans;
      {
        std::lock_guard lock(mu_);
        orphans.swap(posted_);
      }
      try {
        const auto error = runner_.escape("completer", escaped);
        for (auto& p : orphans) p.op->fail(error);
      } catch (...) {  // a callback threw again: the group has failed all the same
        C10D_LOG_ERROR("rank {}: while failing group {}: {}", rank(), options_.group_id,
                       what_of(std::current_exception()));
      }
    }
  }

  void complete_loop() {
    auto nap = std::chrono::microseconds(20);
    std::unique_lock lock(mu_);
    const auto stopping = [&] { return runner_.stopping_locked(); };
    for (;;) {
      if (posted_.empty()) {
        if (stopping()) return;
        p2p_cv_.wait(lock, [&] { return stopping() || !posted_.empty(); });
        continue;
      }
      bool progressed = false;
      for (auto it = posted_.begin(); it != posted_.end();) {
        std::exception_ptr error = runner_.failure_locked();
        bool done = error != nullptr;
        if (!done) {
          try {
            transport::Request* pending = nullptr;
            for (const auto& r : it->requests) {
              if (!r->test()) {
                pending = r.get();
                break;
              }
            }
            done = pending == nullptr;
            if (!done && Clock::now() >= it->deadline) {
              error = p2p_timeout(*it, *pending);
              done = true;
            }
          } catch (...) {
            error = std::current_exception();
            done = true;
          }
        }
        if (!done) {
          ++it;
          continue;
        }
        PostedP2P finished = std::move(*it);
        it = posted_.erase(it);
        progressed = true;
        lock.unlock();
        if (hooks_) hooks_->op_finished(*finished.work);
        if (error) {
          fail(error);
          finished.op->fail(error);
        } else {
          if (finished.work->op_name() != "send") {
            core::WorkControl::set_source_rank(*finished.work,
                                               finished.peer != transport::kAnySource
                                                   ? finished.peer
                                                   : finished.requests.front()->source());
          }
          finished.op->succeed(std::move(finished.outputs));
        }
        finished.requests.clear();
        lock.lock();
      }
      if (stopping()) {
        // The destructor fails what is left after joining.
        return;
      }
      nap = progressed ? std::chrono::microseconds(20)
                       : std::min(nap * 2, std::chrono::microseconds(1000));
      if (!posted_.empty()) p2p_cv_.wait_for(lock, nap);
    }
  }

  // Under mu_ (the completer's loop). The error of send/recv `p`, past its deadline with
  // `pending` not done: a PeerTimeout naming the peer, the tag and what this rank last heard from
  // the peer (pending.heard(), which only reads: asking moves no bytes and fails nothing).
  std::exception_ptr p2p_timeout(const PostedP2P& p, const transport::Request& pending) {
    if (p.peer == transport::kAnySource) {
      return std::make_exception_ptr(transport::PeerTimeout(
          core::with_location(
              __FILE__, __LINE__,
              fmt::format(
                  "rank {}: {} #{} (user tag {}, group {}) timed out after {} ms: no rank "
                  "sent a message with that tag",
                  rank(), p.work->op_name(), p.work->sequence(), p.user_tag, options_.group_id,
                  std::chrono::duration_cast<std::chrono::milliseconds>(p.timeout).count())),
          transport::kAnySource));
    }
    const bool is_send = p.work->op_name() == "send";
    const transport::PeerActivity heard = pending.heard();
    return std::make_exception_ptr(transport::PeerTimeout(
        core::with_location(
            __FILE__, __LINE__,
            fmt::format(
                "rank {}: {} #{} {} rank {} (user tag {}, group {}) timed out after {} ms ({})",
                rank(), p.work->op_name(), p.work->sequence(), is_send ? "to" : "from", p.peer,
                p.user_tag, options_.group_id,
                std::chrono::duration_cast<std::chrono::milliseconds>(p.timeout).count(),
                transport::heard_string(
                    heard, heard.known ? frame_name_locked(heard.tag) : std::string()))),
        p.peer, heard));
  }

  const std::shared_ptr<transport::Transport> transport_;
  const TransportProcessGroupOptions options_;
  const OpChecks checks_;
  const bool detail_;
  algorithms::AlgoOverride forced_;  // C10D_ALGO or the algo option
  algorithms::RingOptions ring_;
  std::shared_ptr<BackendHooks> hooks_;  // immutable after construction

  // The queue, the worker, the failure latch; its mutex guards this group's state below too.
  OpRunner runner_;
  std::mutex& mu_ = runner_.mutex();
  std::condition_variable p2p_cv_;   // posted_ or stopping changed; waits on mu_
  std::list<PostedP2P> posted_;      // GUARDED_BY(mu_)
  std::uint64_t next_sequence_ = 0;  // GUARDED_BY(mu_); the collective after the last queued
  std::uint32_t next_child_ = 0;     // GUARDED_BY(mu_)
  // The names of the last collectives by sequence number (frame_name); GUARDED_BY(mu_).
  std::array<std::string_view, 64> op_names_{};
  std::thread completer_;  // started by the worker at the first p2p op; GUARDED_BY(mu_)
};

}  // namespace

std::shared_ptr<ProcessGroup> make_transport_process_group(
    std::shared_ptr<transport::Transport> transport, TransportProcessGroupOptions options) {
  C10D_CHECK(transport != nullptr, "make_transport_process_group: no transport");
  return std::make_shared<TransportProcessGroup>(std::move(transport), std::move(options));
}

std::shared_ptr<transport::Transport> transport_of(const ProcessGroup& group) {
  const auto* pg = dynamic_cast<const TransportProcessGroup*>(&group);
  return pg == nullptr ? nullptr : pg->transport();
}

}  // namespace c10d::inline v1::backends
