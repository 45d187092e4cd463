// DistributedDataParallel (include/c10d/ddp.h): the construction checks, the reducer (buckets
// filled from autograd's per-parameter hooks and launched in order), and the rebuild of the
// buckets after the first iteration.
//
// Vocabulary: a parameter is "ready" in a pass when its hook fired (its .grad is final); a
// bucket is ready when all its parameters are; buckets are "launched" (gradients copied into
// the flat buffer, the comm hook started) strictly in index order, so every rank issues the
// same collectives in the same order whatever the timing of its hooks.
//
// Two ways to launch a bucket. In lazy mode with the default hook, the bucket's reduction is
// recorded as a collective IR node (sum scaled by 1/world, as optimizer_step does) and each
// parameter's .grad set to its pending result, so backward, the reduction and the optimizer's
// update become one graph that the next step boundary runs, fused; the executor times the
// node for last_stats(). Otherwise (eager mode, or any other hook) the gradients are copied
// into the bucket's flat buffer and the hook starts on it at once.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstring>

#include "c10d/ddp.h"
#include "c10d/lazy.h"
#include "core/check.h"
#include "core/logging.h"
#include "ddp/comm_hooks.h"

namespace c10d::inline v1::ddp {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

std::string shape_text(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// Broadcasts a string from `root` (its length, then its bytes).
std::string broadcast_string(ProcessGroup& group, const std::string& mine, int root) {
  Tensor len = Tensor::from_vector(
      std::vector<std::int64_t>{static_cast<std::int64_t>(mine.size())}, DType::kInt64);
  BroadcastOptions o;
  o.root = root;
  group.broadcast({len}, o)->wait();
  const std::int64_t n = len.data<std::int64_t>()[0];
  Tensor bytes = Tensor::empty({n}, DType::kUInt8);
  if (group.rank() == root && n > 0) std::memcpy(bytes.raw_data(), mine.data(), mine.size());
  group.broadcast({bytes}, o)->wait();
  return std::string(static_cast<const char*>(bytes.raw_data()), static_cast<std::size_t>(n));
}

std::vector<std::string> split_lines(const std::string& s) {
  std::vector<std::string> out;
  std::size_t at = 0;
  while (at < s.size()) {
    const auto nl = s.find('\n', at);
    out.push_back(s.substr(at, nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return out;
}

}  // namespace

struct DistributedDataParallel::Impl {
  struct Param {
    std::string name;
    Tensor tensor;
    int hook_id = -1;
  };
  struct Bucket {
    std::vector<int> params;
    std::vector<std::int64_t> offsets;
    std::int64_t numel = 0;
    Tensor buffer;    // the hook path's flat buffer, allocated at its first launch
    int pending = 0;  // parameters not yet ready in this pass
    std::shared_ptr<Future> future;
  };

  std::shared_ptr<ProcessGroup> group;
  DDPOptions options;
  std::vector<Param> params;
  std::vector<Tensor> buffers;
  std::vector<Bucket> buckets;
  std::vector<int> bucket_of;  // by parameter

  // The current pass.
  bool syncing = false;  // inside backward(), outside no_sync
  bool no_sync = false;
  std::vector<char> ready;
  std::vector<int> ready_order;
  std::size_t next_launch = 0;
  Clock::time_point first_launch{};
  bool rebuilt = false;
  bool as_graph = false;                 // this pass records its reductions as IR nodes
  lazy::CollectiveTime graph_comm_base;  // as_graph: this thread's collective time at the start
  IterationStats stats;

  void check_same_parameters() {
    std::string mine;
    for (const auto& p : params) {
      mine += fmt::format("{} {} {}\n", p.name, dtype_name(p.tensor.dtype()),
                          shape_text(p.tensor.shape()));
    }
    const auto theirs = split_lines(broadcast_string(*group, mine, 0));
    const auto own = split_lines(mine);
    std::int64_t first = LLONG_MAX;
    const std::size_t n = std::max(own.size(), theirs.size());
    for (std::size_t i = 0; i < n; ++i) {
      if (i >= own.size() || i >= theirs.size() || own[i] != theirs[i]) {
        first = static_cast<std::int64_t>(i) * group->size() + group->rank();
        break;
      }
    }
    Tensor code = Tensor::from_vector(std::vector<std::int64_t>{first}, DType::kInt64);
    AllreduceOptions o;
    o.reduce.op = ReduceOp::kMin;
    group->all_reduce({code}, o)->wait();
    const std::int64_t agreed = code.data<std::int64_t>()[0];
    if (agreed == LLONG_MAX) return;
    const auto index = static_cast<std::size_t>(agreed / group->size());
    const int who = static_cast<int>(agreed % group->size());
    const auto describe = [&](const std::vector<std::string>& list, int rank) {
      return index < list.size()
                 ? fmt::format("'{}'", list[index])
                 : fmt::format("no such parameter (rank {} has {})", rank, list.size());
    };
    // Every rank learns the differing rank's view, so all raise the same message.
    const std::string other =
        broadcast_string(*group, group->rank() == who ? describe(own, who) : std::string(), who);
    C10D_THROW(InvalidArgument,
               "DistributedDataParallel: the ranks hold different models: parameter #{} is {} "
               "on rank 0 but {} on rank {}",
               index, describe(theirs, 0), other, who);
  }

  void broadcast_from_rank0(const std::vector<Tensor>& tensors) {
    std::vector<std::shared_ptr<Work>> works;
    for (const auto& t : tensors) works.push_back(group->broadcast({t}));
    for (auto& w : works) w->wait();
  }

  void build_buckets(const std::vector<int>& order) {
    std::vector<std::int64_t> bytes;
    std::vector<DType> dtypes;
    for (const auto& p : params) {
      bytes.push_back(static_cast<std::int64_t>(p.tensor.nbytes()));
      dtypes.push_back(p.tensor.dtype());
    }
    const auto groups = assign_buckets(bytes, dtypes, order, options.first_bucket_cap_bytes,
                                       options.bucket_cap_bytes);
    buckets.clear();
    bucket_of.assign(params.size(), -1);
    for (const auto& members : groups) {
      Bucket b;
      b.params = members;
      std::int64_t n = 0;
      for (int p : members) {
        b.offsets.push_back(n);
        n += params[static_cast<std::size_t>(p)].tensor.numel();
        bucket_of[static_cast<std::size_t>(p)] = static_cast<int>(buckets.size());
      }
      b.numel = n;
      buckets.push_back(std::move(b));
    }
  }

  void start_pass() {
    ready.assign(params.size(), 0);
    ready_order.clear();
    next_launch = 0;
    for (auto& b : buckets) {
      b.pending = static_cast<int>(b.params.size());
      b.future.reset();
    }
    stats = {};
    as_graph = !no_sync && lazy::is_lazy() && options.comm_hook.target<AllreduceHook>() != nullptr;
    if (as_graph) graph_comm_base = lazy::collective_time();
  }

  void on_ready(int p) {
    if (!syncing || ready[static_cast<std::size_t>(p)]) return;
    ready[static_cast<std::size_t>(p)] = 1;
    ready_order.push_back(p);
    --buckets[static_cast<std::size_t>(bucket_of[static_cast<std::size_t>(p)])].pending;
    launch_ready();
  }

  void launch_ready() {
    while (next_launch < buckets.size() && buckets[next_launch].pending == 0) {
      launch(next_launch++);
    }
  }

  void launch(std::size_t index) {
    Bucket& b = buckets[index];
    if (as_graph) {
      record_reduction(b);
      return;
    }
    if (index == 0) first_launch = Clock::now();
    if (!b.buffer.defined()) {
      b.buffer = Tensor::empty({b.numel},
                               params[static_cast<std::size_t>(b.params.front())].tensor.dtype());
    }
    const std::size_t elem = element_size(b.buffer.dtype());
    auto* flat = static_cast<std::byte*>(b.buffer.raw_data());
    GradBucket view;
    view.index = static_cast<int>(index);
    view.buffer = b.buffer;
    view.is_last = index + 1 == buckets.size();
    for (std::size_t i = 0; i < b.params.size(); ++i) {
      const Param& p = params[static_cast<std::size_t>(b.params[i])];
      const std::size_t bytes = p.tensor.nbytes();
      std::byte* at = flat + static_cast<std::size_t>(b.offsets[i]) * elem;
      const Tensor g = lazy::grad(p.tensor);
      if (g.defined()) {
        std::memmove(at, g.raw_data(), bytes);  // a bucket view may be its own source
      } else {
        std::memset(at, 0, bytes);  // unused in this pass (find_unused_parameters)
      }
      view.names.push_back(p.name);
      view.offsets.push_back(b.offsets[i]);
      view.numels.push_back(p.tensor.numel());
    }
    stats.bytes += static_cast<std::int64_t>(b.buffer.nbytes());
    b.future = options.comm_hook(*group, view);
    C10D_CHECK(b.future != nullptr, "DistributedDataParallel: the comm hook returned no future");
  }

  // The bucket's average as a pending collective node; a parameter unused in this pass
  // contributes zeros. Over one rank the average is the gradient itself: nothing is recorded.
  void record_reduction(const Bucket& b) {
    std::vector<Tensor> grads;
    for (int p : b.params) {
      const Tensor& param = params[static_cast<std::size_t>(p)].tensor;
      const Tensor g = lazy::grad(param);
      grads.push_back(g.defined() ? g : lazy::zeros(param.shape(), param.dtype()));
      stats.bytes += static_cast<std::int64_t>(param.nbytes());
    }
    const std::vector<Tensor> averaged =
        group->size() == 1 ? grads
                           : lazy::all_reduce(grads, ReduceOp::kSum, 1.0 / group->size(), group);
    for (std::size_t k = 0; k < averaged.size(); ++k)
      lazy::set_grad(params[static_cast<std::size_t>(b.params[k])].tensor, averaged[k]);
  }

  // As a graph pass: the reductions run with the graph, so the stats of the executor's
  // collectives on this thread since the pass began stand for its communication.
  void update_graph_stats() {
    if (!as_graph) return;
    const lazy::CollectiveTime now = lazy::collective_time();
    stats.comm_seconds = now.seconds - graph_comm_base.seconds;
    stats.wait_seconds = now.wait_seconds - graph_comm_base.wait_seconds;
    stats.overlap =
        stats.comm_seconds > 0 ? std::max(0.0, 1.0 - stats.wait_seconds / stats.comm_seconds) : 0;
  }

  // After autograd: launch what is left, wait, and write the averaged gradients back.
  void finish_pass(Clock::time_point autograd_end) {
    for (std::size_t p = 0; p < params.size(); ++p) {
      if (ready[p]) continue;
      C10D_CHECK(options.find_unused_parameters,
                 "DistributedDataParallel: parameter '{}' got no gradient in this iteration; "
                 "pass find_unused_parameters = true if the model leaves parameters unused",
                 params[p].name);
      on_ready(static_cast<int>(p));
    }
    launch_ready();
    stats.buckets = static_cast<int>(buckets.size());
    if (as_graph) return;
    for (std::size_t i = 0; i < buckets.size(); ++i) {
      Bucket& b = buckets[i];
      b.future->wait();
      const auto& value = b.future->value();
      C10D_CHECK(value.size() == 1 && value[0].numel() == b.buffer.numel() &&
                     value[0].dtype() == b.buffer.dtype(),
                 "DistributedDataParallel: the comm hook's result for bucket {} is not one "
                 "{} tensor of {} elements",
                 i, dtype_name(b.buffer.dtype()), b.buffer.numel());
      const Tensor& flat = value[0];
      for (std::size_t k = 0; k < b.params.size(); ++k) {
        const Tensor& param = params[static_cast<std::size_t>(b.params[k])].tensor;
        Tensor g = flat.narrow_rows(b.offsets[k], b.offsets[k] + param.numel()).view(param.shape());
        lazy::set_grad(param, options.gradient_as_bucket_view ? g : g.clone());
      }
    }
    const auto done = Clock::now();
    stats.wait_seconds = seconds(done - autograd_end);
    stats.comm_seconds = buckets.empty() ? 0 : seconds(done - first_launch);
    stats.overlap =
        stats.comm_seconds > 0 ? std::max(0.0, 1.0 - stats.wait_seconds / stats.comm_seconds) : 0;
  }

  // After the first iteration: buckets in the order gradients became ready on rank 0.
  void rebuild() {
    Tensor order = Tensor::empty({static_cast<std::int64_t>(params.size())}, DType::kInt64);
    for (std::size_t i = 0; i < ready_order.size(); ++i) {
      order.data<std::int64_t>()[i] = ready_order[i];
    }
    group->broadcast({order})->wait();
    std::vector<int> o;
    for (std::size_t i = 0; i < params.size(); ++i) {
      o.push_back(static_cast<int>(order.data<std::int64_t>()[i]));
    }
    build_buckets(o);
    rebuilt = true;
  }
};

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<ProcessGroup> group,
                                                 DDPOptions options)
    : module_(std::move(module)), impl_(std::make_unique<Impl>()) {
  C10D_CHECK(module_ != nullptr, "DistributedDataParallel: no module");
  C10D_CHECK(group != nullptr, "DistributedDataParallel: no process group");
  C10D_CHECK(options.bucket_cap_bytes > 0 && options.first_bucket_cap_bytes > 0,
             "DistributedDataParallel: bucket caps must be positive ({} and {} bytes)",
             options.first_bucket_cap_bytes, options.bucket_cap_bytes);
  if (!options.comm_hook) options.comm_hook = allreduce_hook();
  Impl& m = *impl_;
  m.group = std::move(group);
  m.options = std::move(options);
  for (auto& [name, t] : module_->named_parameters()) m.params.push_back({name, t, -1});
  for (auto& [name, t] : module_->named_buffers()) m.buffers.push_back(t);
  m.check_same_parameters();
  std::vector<Tensor> state;
  for (const auto& p : m.params) state.push_back(p.tensor);
  state.insert(state.end(), m.buffers.begin(), m.buffers.end());
  m.broadcast_from_rank0(state);
  std::vector<int> reverse;
  for (int i = static_cast<int>(m.params.size()) - 1; i >= 0; --i) reverse.push_back(i);
  m.build_buckets(reverse);
  for (std::size_t i = 0; i < m.params.size(); ++i) {
    m.params[i].hook_id = lazy::add_grad_hook(
        m.params[i].tensor, [impl = impl_.get(), i](const Tensor&, const Tensor&) {
          impl->on_ready(static_cast<int>(i));
        });
  }
}

DistributedDataParallel::~DistributedDataParallel() {
  for (const auto& p : impl_->params) {
    try {
      lazy::remove_grad_hook(p.tensor, p.hook_id);
    } catch (const std::exception& e) {
      C10D_LOG_WARN("DistributedDataParallel: could not remove the hook of '{}': {}", p.name,
                    e.what());
    }
  }
}

Tensor DistributedDataParallel::forward(const Tensor& input) {
  if (impl_->options.broadcast_buffers && !impl_->buffers.empty() && impl_->group->size() > 1) {
    impl_->broadcast_from_rank0(impl_->buffers);
  }
  return module_->forward(input);
}

void DistributedDataParallel::backward(const Tensor& loss) {
  Impl& m = *impl_;
  const auto start = Clock::now();
  m.start_pass();
  m.syncing = !m.no_sync;
  try {
    lazy::backward(loss);
    const auto autograd_end = Clock::now();
    m.stats.backward_seconds = seconds(autograd_end - start);
    if (m.syncing) m.finish_pass(autograd_end);
  } catch (...) {
    m.syncing = false;
    throw;
  }
  const bool synced = m.syncing;
  m.syncing = false;
  if (synced && !m.rebuilt) m.rebuild();
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp)
    : ddp_(ddp), previous_(ddp.impl_->no_sync) {
  ddp_.impl_->no_sync = true;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.impl_->no_sync = previous_; }

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  C10D_CHECK(static_cast<bool>(hook), "register_comm_hook: the hook is empty");
  impl_->options.comm_hook = std::move(hook);
}

const IterationStats& DistributedDataParallel::last_stats() const {
  impl_->update_graph_stats();
  return impl_->stats;
}

std::vector<std::vector<std::string>> DistributedDataParallel::bucket_layout() const {
  std::vector<std::vector<std::string>> out;
  for (const auto& b : impl_->buckets) {
    out.emplace_back();
    for (int p : b.params) out.back().push_back(impl_->params[static_cast<std::size_t>(p)].name);
  }
  return out;
}

}  // namespace c10d::inline v1::ddp
