// The c10d half of the torch backend (bridge.h): ops on a c10d ProcessGroup, and c10d's Store
// over the caller's key-value store. Includes c10d's public headers only, never torch's: both
// libraries name their C++ namespace c10d. Ours is the inline c10d::v1, so their symbols never
// meet, but a file that saw both would find c10d::ProcessGroup ambiguous.
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bridge/bridge.h"
#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/process_group.h"
#include "c10d/rendezvous.h"
#include "c10d/store.h"
#include "c10d/tensor.h"
#include "c10d/types.h"
#include "c10d/work.h"

namespace c10d_bridge {

class Group {
 public:
  Group(std::shared_ptr<c10d::ProcessGroup> group, std::string name)
      : pg(std::move(group)), backend(std::move(name)) {}
  std::shared_ptr<c10d::ProcessGroup> pg;
  std::string backend;
};

class Op {
 public:
  Op(std::string op_name, int op_rank) : name(std::move(op_name)), rank(op_rank) {}
  std::string name;
  int rank;
  std::vector<std::shared_ptr<c10d::Work>> works;
};

namespace {

using Clock = std::chrono::steady_clock;
using c10d::Milliseconds;

c10d::DType dtype_of(ElementType t) {
  switch (t) {
    case ElementType::kFloat32:
      return c10d::DType::kFloat32;
    case ElementType::kFloat64:
      return c10d::DType::kFloat64;
    case ElementType::kFloat16:
      return c10d::DType::kFloat16;
    case ElementType::kBFloat16:
      return c10d::DType::kBFloat16;
    case ElementType::kInt8:
      return c10d::DType::kInt8;
    case ElementType::kUInt8:
      return c10d::DType::kUInt8;
    case ElementType::kInt16:
      return c10d::DType::kInt16;
    case ElementType::kInt32:
      return c10d::DType::kInt32;
    case ElementType::kInt64:
      return c10d::DType::kInt64;
    case ElementType::kBool:
      return c10d::DType::kBool;
  }
  throw c10d::InvalidArgument(
      fmt::format("c10d backend: element type {} is not known", static_cast<int>(t)));
}

c10d::Reduction reduction_of(const OpOptions& o) {
  c10d::Reduction r;
  switch (o.reduce) {
    case Reduce::kSum:
      r.op = c10d::ReduceOp::kSum;
      break;
    case Reduce::kAvg:
      r.op = c10d::ReduceOp::kAvg;
      break;
    case Reduce::kProduct:
      r.op = c10d::ReduceOp::kProduct;
      break;
    case Reduce::kMin:
      r.op = c10d::ReduceOp::kMin;
      break;
    case Reduce::kMax:
      r.op = c10d::ReduceOp::kMax;
      break;
    case Reduce::kBand:
      r.op = c10d::ReduceOp::kBand;
      break;
    case Reduce::kBor:
      r.op = c10d::ReduceOp::kBor;
      break;
    case Reduce::kBxor:
      r.op = c10d::ReduceOp::kBxor;
      break;
    case Reduce::kPremulSum:
      r.op = c10d::ReduceOp::kPremulSum;
      r.premul_factor = o.premul_factor;
      break;
  }
  return r;
}

std::optional<Milliseconds> timeout_of(const OpOptions& o) {
  if (o.timeout_ms < 0) return std::nullopt;
  return Milliseconds(o.timeout_ms);
}

// The buffer as a c10d tensor over the same memory; the tensor's storage holds the owner.
c10d::Tensor tensor_of(const Buffer& b) {
  return c10d::Tensor::from_blob(b.data, b.shape, dtype_of(b.type), [owner = b.owner](void*) {});
}

std::vector<c10d::Tensor> tensors_of(const std::vector<Buffer>& bs) {
  std::vector<c10d::Tensor> out;
  out.reserve(bs.size());
  for (const auto& b : bs) out.push_back(tensor_of(b));
  return out;
}

std::shared_ptr<Op> single(Group& g, std::string name, std::shared_ptr<c10d::Work> work) {
  auto op = std::make_shared<Op>(std::move(name), g.pg->rank());
  op->works.push_back(std::move(work));
  return op;
}

// ---- c10d's Store over the caller's key-value store ----

std::vector<std::uint8_t> to_vector(std::span<const std::uint8_t> s) {
  return {s.begin(), s.end()};
}

std::vector<std::string> to_strings(std::span<const std::string> keys) {
  return {keys.begin(), keys.end()};
}

// Emulates what torch's Store lacks (append, multi_get, multi_set) with what it has. A failure
// of the caller's store becomes a StoreError naming the call and the key, so the TCP transport
// treats it as it treats its own store's.
class BridgeStore final : public c10d::Store {
 public:
  explicit BridgeStore(std::shared_ptr<KeyValueStore> kv)
      : c10d::Store(kv->timeout()), kv_(std::move(kv)) {}

  void set(std::string_view key, std::span<const std::uint8_t> value) override {
    guarded("set", key, [&] { kv_->set(std::string(key), to_vector(value)); });
  }
  c10d::Bytes get(std::string_view key) override {
    // torch's stores fail a get that waited too long with errors of their own kinds; waiting
    // first gives c10d's TimeoutError.
    const std::string k(key);
    wait(std::span<const std::string>(&k, 1), timeout());
    return guarded("get", key, [&] { return kv_->get(k); });
  }
  std::int64_t add(std::string_view key, std::int64_t delta) override {
    return guarded("add", key, [&] { return kv_->add(std::string(key), delta); });
  }
  c10d::Bytes compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                          std::span<const std::uint8_t> desired) override {
    return guarded("compare_set", key, [&] {
      return kv_->compare_set(std::string(key), to_vector(expected), to_vector(desired));
    });
  }
  bool check(std::span<const std::string> keys) override {
    return guarded("check", keys.empty() ? "" : keys[0],
                   [&] { return kv_->check(to_strings(keys)); });
  }
  void wait(std::span<const std::string> keys, Milliseconds timeout) override {
    const bool ready = guarded("wait", keys.empty() ? "" : keys[0],
                               [&] { return kv_->wait(to_strings(keys), timeout); });
    if (!ready) {
      throw c10d::TimeoutError(fmt::format("torch store: waited {} ms for keys [{}]; still missing",
                                           timeout.count(), fmt::join(keys, ", ")));
    }
  }
  bool delete_key(std::string_view key) override {
    return guarded("delete_key", key, [&] { return kv_->delete_key(std::string(key)); });
  }
  std::int64_t num_keys() override {
    return guarded("num_keys", "", [&] { return kv_->num_keys(); });
  }
  // torch's Store has no append: read, then compare_set the concatenation, until no other
  // writer came in between. (A writer that makes the value exactly the concatenation meanwhile
  // is taken for this one; nothing in c10d appends through this store.)
  void append(std::string_view key, std::span<const std::uint8_t> value) override {
    const std::string k(key);
    const auto deadline = Clock::now() + timeout();
    for (;;) {
      std::vector<std::uint8_t> current;
      if (check(std::span<const std::string>(&k, 1))) current = get(k);
      std::vector<std::uint8_t> desired = current;
      desired.insert(desired.end(), value.begin(), value.end());
      if (compare_set(k, current, desired) == desired) return;
      if (Clock::now() >= deadline) {
        throw c10d::TimeoutError(
            fmt::format("torch store: append to key '{}' kept losing to other writers for {} ms", k,
                        timeout().count()));
      }
    }
  }
  std::vector<c10d::Bytes> multi_get(std::span<const std::string> keys) override {
    wait(keys, timeout());
    std::vector<c10d::Bytes> out;
    out.reserve(keys.size());
    for (const auto& k : keys) out.push_back(guarded("get", k, [&] { return kv_->get(k); }));
    return out;
  }
  void multi_set(std::span<const std::string> keys, std::span<const c10d::Bytes> values) override {
    if (keys.size() != values.size()) {
      throw c10d::InvalidArgument(fmt::format("torch store: multi_set of {} keys with {} values",
                                              keys.size(), values.size()));
    }
    for (std::size_t i = 0; i < keys.size(); ++i) set(keys[i], values[i]);
  }
  using c10d::Store::set;
  using c10d::Store::wait;

 private:
  template <typename F>
  auto guarded(std::string_view call, std::string_view key, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const c10d::Error&) {
      throw;
    } catch (const std::exception& e) {
      throw c10d::StoreError(
          fmt::format("torch store: {} of key '{}' failed: {}", call, key, e.what()));
    }
  }

  std::shared_ptr<KeyValueStore> kv_;
};

// c10d's own store (a client of its TCP store server) as the caller's key-value store: what
// torch's env:// returns under c10drun. Errors pass as c10d's, with their messages.
class StoreClient final : public KeyValueStore {
 public:
  explicit StoreClient(std::shared_ptr<c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    store_->set(key, std::span<const std::uint8_t>(value));
  }
  std::vector<std::uint8_t> get(const std::string& key) override { return store_->get(key); }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return store_->add(key, delta);
  }
  std::vector<std::uint8_t> compare_set(const std::string& key,
                                        const std::vector<std::uint8_t>& expected,
                                        const std::vector<std::uint8_t>& desired) override {
    return store_->compare_set(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  // The server holds the WAIT until the keys exist or `timeout` passes; the connection serves
  // on after a timeout.
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    try {
      store_->wait(std::span<const std::string>(keys), timeout);
      return true;
    } catch (const c10d::TimeoutError&) {
      return false;
    }
  }
  bool delete_key(const std::string& key) override { return store_->delete_key(key); }
  std::int64_t num_keys() override { return store_->num_keys(); }
  std::chrono::milliseconds timeout() override { return store_->timeout(); }
  void set_timeout(std::chrono::milliseconds timeout) override { store_->set_timeout(timeout); }

 private:
  std::shared_ptr<c10d::Store> store_;
};

}  // namespace

ConnectedStore connect_env_store(int rank, int world_size, std::chrono::milliseconds timeout) {
  // ?external=1: the server runs already (the launcher's), so rank 0 connects like the others
  // whatever C10D_STORE_EXTERNAL says.
  c10d::RendezvousResult r = c10d::rendezvous("env://?external=1", rank, world_size, timeout);
  return {std::make_shared<StoreClient>(std::move(r.store)), std::move(r.store_host)};
}

std::shared_ptr<Group> make_group(std::shared_ptr<KeyValueStore> store, int rank, int size,
                                  const GroupOptions& options) {
  std::string backend = options.backend;
  if (backend.empty()) {
    const char* env = std::getenv("C10D_BACKEND");
    backend = env != nullptr && *env != '\0' ? env : "tcp";
  }
  auto c10d_store = std::make_shared<BridgeStore>(std::move(store));
  std::shared_ptr<c10d::ProcessGroup> pg;
  if (backend == "tcp") {
    c10d::ProcessGroupTCPOptions o;
    o.timeout = options.timeout;
    o.store_host = options.store_host;
    o.group_name = "torch";
    pg = c10d::make_process_group_tcp(std::move(c10d_store), rank, size, o);
  } else if (backend == "ici") {
    c10d::ProcessGroupICIOptions o;
    o.timeout = options.timeout;
    o.group_name = "torch";
    pg = c10d::make_process_group_ici(std::move(c10d_store), rank, size, o);
  } else if (backend == "mpi") {
    throw c10d::Unsupported(
        "c10d backend for torch: C10D_BACKEND=mpi is not supported inside torch.distributed "
        "(MPI would need to own the process's start-up); use tcp (the default) or ici");
  } else {
    throw c10d::InvalidArgument(
        fmt::format("c10d backend for torch: unknown C10D_BACKEND '{}' (tcp or ici)", backend));
  }
  return std::make_shared<Group>(std::move(pg), std::move(backend));
}

std::string group_backend(const Group& group) { return group.backend; }

void abort_group(Group& group) { group.pg->abort(); }

std::shared_ptr<Op> all_reduce(Group& g, std::vector<Buffer> tensors, const OpOptions& o) {
  // c10d's all_reduce takes tensors of one dtype and size; torch's coalesced form mixes sizes,
  // so each run of alike tensors is one c10d op.
  const c10d::AllreduceOptions opts{.reduce = reduction_of(o), .timeout = timeout_of(o)};
  auto op = std::make_shared<Op>("all_reduce", g.pg->rank());
  std::size_t i = 0;
  while (i < tensors.size()) {
    std::vector<c10d::Tensor> run{tensor_of(tensors[i])};
    std::size_t j = i + 1;
    while (j < tensors.size() && tensors[j].type == tensors[i].type) {
      c10d::Tensor t = tensor_of(tensors[j]);
      if (t.numel() != run.front().numel()) break;
      run.push_back(std::move(t));
      ++j;
    }
    op->works.push_back(g.pg->all_reduce(std::move(run), opts));
    i = j;
  }
  if (op->works.empty()) op->works.push_back(g.pg->all_reduce({}, opts));  // c10d's error
  return op;
}

std::shared_ptr<Op> broadcast(Group& g, std::vector<Buffer> tensors, const OpOptions& o) {
  return single(g, "broadcast",
                g.pg->broadcast(tensors_of(tensors), {.root = o.root, .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> reduce(Group& g, Buffer tensor, const OpOptions& o) {
  return single(
      g, "reduce",
      g.pg->reduce(tensor_of(tensor),
                   {.reduce = reduction_of(o), .root = o.root, .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> all_gather(Group& g, std::vector<Buffer> outputs, Buffer input,
                               const OpOptions& o) {
  return single(g, "all_gather",
                g.pg->all_gather(tensors_of(outputs), tensor_of(input), {timeout_of(o)}));
}

std::shared_ptr<Op> all_gather_each(Group& g, std::vector<std::vector<Buffer>> outputs,
                                    std::vector<Buffer> inputs, const OpOptions& o) {
  if (outputs.size() != inputs.size()) {
    throw c10d::InvalidArgument(
        fmt::format("all_gather: {} output lists for {} inputs", outputs.size(), inputs.size()));
  }
  auto op = std::make_shared<Op>("all_gather", g.pg->rank());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    op->works.push_back(
        g.pg->all_gather(tensors_of(outputs[i]), tensor_of(inputs[i]), {timeout_of(o)}));
  }
  return op;
}

std::shared_ptr<Op> all_gather_into_tensor(Group& g, Buffer output, Buffer input,
                                           const OpOptions& o) {
  return single(g, "all_gather_into_tensor",
                g.pg->all_gather_into_tensor(tensor_of(output), tensor_of(input), {timeout_of(o)}));
}

std::shared_ptr<Op> reduce_scatter(Group& g, Buffer output, std::vector<Buffer> inputs,
                                   const OpOptions& o) {
  return single(g, "reduce_scatter",
                g.pg->reduce_scatter(tensor_of(output), tensors_of(inputs),
                                     {.reduce = reduction_of(o), .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> reduce_scatter_tensor(Group& g, Buffer output, Buffer input,
                                          const OpOptions& o) {
  return single(g, "reduce_scatter_tensor",
                g.pg->reduce_scatter_tensor(tensor_of(output), tensor_of(input),
                                            {.reduce = reduction_of(o), .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> all_to_all(Group& g, Buffer output, Buffer input, const OpOptions& o) {
  return single(g, "all_to_all",
                g.pg->all_to_all(tensor_of(output), tensor_of(input),
                                 {.input_split_sizes = o.input_splits,
                                  .output_split_sizes = o.output_splits,
                                  .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> gather(Group& g, std::vector<Buffer> outputs, Buffer input,
                           const OpOptions& o) {
  return single(g, "gather",
                g.pg->gather(tensors_of(outputs), tensor_of(input),
                             {.root = o.root, .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> scatter(Group& g, Buffer output, std::vector<Buffer> inputs,
                            const OpOptions& o) {
  return single(g, "scatter",
                g.pg->scatter(tensor_of(output), tensors_of(inputs),
                              {.root = o.root, .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> barrier(Group& g, const OpOptions& o) {
  return single(g, "barrier", g.pg->barrier({timeout_of(o)}));
}

std::shared_ptr<Op> send(Group& g, std::vector<Buffer> tensors, int dst, const OpOptions& o) {
  return single(g, "send",
                g.pg->send(tensors_of(tensors), dst, {.tag = o.tag, .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> recv(Group& g, std::vector<Buffer> tensors, int src, const OpOptions& o) {
  return single(g, "recv",
                g.pg->recv(tensors_of(tensors), src, {.tag = o.tag, .timeout = timeout_of(o)}));
}

std::shared_ptr<Op> recv_any_source(Group& g, std::vector<Buffer> tensors, const OpOptions& o) {
  return single(
      g, "recv_any_source",
      g.pg->recv_any_source(tensors_of(tensors), {.tag = o.tag, .timeout = timeout_of(o)}));
}

int op_source_rank(const Op& op) {
  if (op.works.size() != 1) {
    throw c10d::InvalidArgument(
        fmt::format("rank {}: {}: source_rank() names the sender of a recv or recv_any_source",
                    op.rank, op_describe(op)));
  }
  return op.works.front()->source_rank();
}

std::string op_describe(const Op& op) {
  if (op.works.empty()) return op.name;
  return fmt::format("{} #{}", op.name, op.works.front()->sequence());
}

bool op_completed(const Op& op) {
  return std::all_of(op.works.begin(), op.works.end(),
                     [](const auto& w) { return w->is_completed(); });
}

bool op_succeeded(const Op& op) {
  return std::all_of(op.works.begin(), op.works.end(),
                     [](const auto& w) { return w->is_success(); });
}

std::exception_ptr op_error(const Op& op) {
  for (const auto& w : op.works) {
    if (w->is_completed() && !w->is_success()) return w->exception();
  }
  return nullptr;
}

void op_wait(Op& op, std::chrono::milliseconds timeout) {
  // Work::wait, so that the group's wait hook can run a collective that is next to start on this
  // thread instead of waking the group's worker (backends/common/inline_schedule.h).
  const auto deadline = Clock::now() + timeout;
  for (const auto& w : op.works) {
    const auto left =
        std::max(Milliseconds(0), std::chrono::ceil<Milliseconds>(deadline - Clock::now()));
    try {
      w->wait(left);
    } catch (const c10d::TimeoutError&) {
      if (w->is_completed()) {
        // The op's own error (its deadline passed) as it is, or it completed just after the
        // wait gave up.
        if (const std::exception_ptr error = w->exception()) std::rethrow_exception(error);
        continue;
      }
      throw c10d::TimeoutError(fmt::format(
          "rank {}: {} did not complete within the wait's {} ms (it goes on until its own "
          "deadline)",
          op.rank, op_describe(op), timeout.count()));
    }
  }
}

void op_on_done(Op& op, std::function<void(std::exception_ptr)> fn) {
  if (op.works.empty()) {
    fn(nullptr);
    return;
  }
  struct State {
    std::atomic<std::size_t> left;
    std::mutex mu;
    std::exception_ptr error;  // GUARDED_BY(mu): the first part's error
    std::function<void(std::exception_ptr)> fn;
  };
  auto state = std::make_shared<State>();
  state->left.store(op.works.size());
  state->fn = std::move(fn);
  for (const auto& w : op.works) {
    w->future()->add_callback([state](c10d::Future& f) {
      if (f.has_error()) {
        std::lock_guard lock(state->mu);
        if (!state->error) state->error = f.exception();
      }
      if (state->left.fetch_sub(1) == 1) {
        std::exception_ptr error;
        {
          std::lock_guard lock(state->mu);
          error = state->error;
        }
        state->fn(error);
        state->fn = nullptr;  // releases what it holds (tensors, torch's future) at once
      }
    });
  }
}

}  // namespace c10d_bridge
