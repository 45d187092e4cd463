#include "lazy/context.h"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "c10d/lazy.h"
#include "core/check.h"
#include "core/host.h"
#include "lazy/cache.h"
#include "lazy/executor.h"
#include "lazy/graph.h"

namespace c10d::inline v1::lazy {
namespace {

// -1: not set; read C10D_LAZY on first use.
std::atomic<int> g_mode{-1};
std::atomic<int> g_overlap{-1};  // -1: not decided yet

struct ThreadState {
  std::vector<std::weak_ptr<TensorImpl>> pending;
  std::size_t pruned_size = 0;
  std::shared_ptr<Node> last_collective;
};
thread_local ThreadState t_state;

std::int64_t since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0)
      .count();
}

const LazyValue* lazy_value_of(const TensorImpl& impl) {
  return dynamic_cast<const LazyValue*>(impl.pending().get());
}

void count_run(const Program& p) {
  Counters& c = counters();
  c.ops_run += p.ops;
  c.kernels_run += p.kernels;
  c.fused_kernels += p.fused_kernels;
}

}  // namespace

Counters& counters() {
  static Counters c;
  return c;
}

void LazyValue::materialize(TensorImpl& impl) {
  ++counters().forced_syncs;
  run_step(&impl);
}

Value value_of(const Tensor& t) {
  C10D_CHECK(t.defined(), "lazy op on an undefined tensor");
  const auto& impl = t.impl();
  if (impl->is_pending()) {
    if (const LazyValue* lv = lazy_value_of(*impl)) {
      // Constants are inlined in either mode; other pending values are computed first in eager.
      if (is_lazy() || lv->value().node->op == OpKind::kConstant) return lv->value();
    }
    impl->materialize();
  }
  auto node = make_node(OpKind::kData, {}, {{impl->dtype(), impl->shape()}});
  node->storage = impl->storage();
  node->offset_bytes = impl->offset_bytes();
  return {std::move(node), 0};
}

void register_pending(const std::shared_ptr<TensorImpl>& impl) {
  ThreadState& s = t_state;
  s.pending.push_back(impl);
  if (s.pending.size() > 2 * s.pruned_size + 256) {
    std::erase_if(s.pending, [](const std::weak_ptr<TensorImpl>& w) {
      auto sp = w.lock();
      return !sp || !sp->is_pending();
    });
    s.pruned_size = s.pending.size();
  }
}

Tensor make_pending(Value v) {
  const ValueType& t = v.type();
  auto impl = std::make_shared<TensorImpl>(t.dtype, t.shape, std::make_shared<LazyValue>(v));
  // 0-d constants (operator scalars) are not computed by mark_step: they are inlined into the
  // kernels that read them, and a read of one computes it alone.
  if (!(v.node->op == OpKind::kConstant && t.shape.empty())) register_pending(impl);
  return Tensor(std::move(impl));
}

std::vector<Tensor> make_results(const std::shared_ptr<Node>& node) {
  std::vector<Value> values;
  for (std::size_t i = 0; i < node->outputs.size(); ++i)
    values.push_back({node, static_cast<int>(i)});
  std::vector<Tensor> out;
  if (is_lazy()) {
    for (Value& v : values) out.push_back(make_pending(std::move(v)));
    return out;
  }
  // Eager: the same planner and kernels, on a graph of this one op, without the cache.
  const auto t0 = std::chrono::steady_clock::now();
  Graph g = canonicalize(values);
  auto program = plan(g);
  std::vector<Buf> bufs = execute(*program, g, /*reuse=*/false);
  count_run(*program);
  counters().execute_ns += since(t0);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const ValueType& t = values[i].type();
    out.emplace_back(
        std::make_shared<TensorImpl>(t.dtype, t.shape, bufs[i].storage, bufs[i].offset));
  }
  return out;
}

Tensor make_result(Value v) {
  if (is_lazy()) return make_pending(std::move(v));
  return make_results(v.node)[static_cast<std::size_t>(v.index)];
}

std::shared_ptr<Node> last_collective() { return t_state.last_collective; }
void set_last_collective(std::shared_ptr<Node> node) { t_state.last_collective = std::move(node); }

void run_step(TensorImpl* requester) {
  ThreadState& s = t_state;
  std::vector<std::shared_ptr<TensorImpl>> keep;
  std::vector<TensorImpl*> targets;
  std::vector<Value> roots;
  for (const auto& w : s.pending) {
    auto sp = w.lock();
    if (!sp || sp.get() == requester) continue;
    if (const LazyValue* lv = lazy_value_of(*sp)) {
      roots.push_back(lv->value());
      targets.push_back(sp.get());
      keep.push_back(std::move(sp));
    }
  }
  if (requester != nullptr) {
    if (const LazyValue* lv = lazy_value_of(*requester)) {
      roots.push_back(lv->value());
      targets.push_back(requester);
    }
  }
  std::vector<std::weak_ptr<TensorImpl>> registered = std::move(s.pending);
  s.pending.clear();
  s.pruned_size = 0;
  s.last_collective.reset();
  if (roots.empty()) return;
  try {
    Counters& c = counters();
    auto t0 = std::chrono::steady_clock::now();
    Graph g = canonicalize(roots);
    std::shared_ptr<Program> program = program_cache().find(g);
    if (program) {
      ++c.cache_hits;
    } else {
      ++c.cache_misses;
      ++c.compiles;
      program = plan(g);
      c.cse_merged += program->cse_merged;
      program_cache().insert(g.hash, program);
    }
    c.compile_ns += since(t0);
    t0 = std::chrono::steady_clock::now();
    std::vector<Buf> bufs = execute(*program, g, /*reuse=*/true);
    ++c.steps;
    count_run(*program);
    for (std::size_t i = 0; i < targets.size(); ++i)
      targets[i]->set_storage(bufs[i].storage, bufs[i].offset);
    c.execute_ns += since(t0);
  } catch (...) {
    // The tensors stay pending; a later step may try again.
    for (auto& w : registered) s.pending.push_back(std::move(w));
    throw;
  }
}

// ---- Public API: mode, step, metrics ----

bool is_lazy() {
  int m = g_mode.load(std::memory_order_relaxed);
  if (m < 0) {
    const char* env = std::getenv("C10D_LAZY");
    m = (env != nullptr && std::strcmp(env, "0") == 0) ? 0 : 1;
    int expected = -1;
    g_mode.compare_exchange_strong(expected, m);
    m = g_mode.load();
  }
  return m == 1;
}

void set_lazy(bool lazy) { g_mode.store(lazy ? 1 : 0); }

bool overlap_collectives() {
  int m = g_overlap.load(std::memory_order_relaxed);
  if (m < 0) {
    const char* env = std::getenv("C10D_LAZY_OVERLAP");
    if (env != nullptr && (std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0)) {
      m = env[0] - '0';
    } else {
      m = core::cores_per_local_process() >= 2;
    }
    int expected = -1;
    g_overlap.compare_exchange_strong(expected, m);
    m = g_overlap.load();
  }
  return m == 1;
}

void set_overlap_collectives(bool overlap) { g_overlap.store(overlap ? 1 : 0); }

void mark_step() { run_step(nullptr); }

void set_cache_capacity(std::size_t programs) { program_cache().set_capacity(programs); }

}  // namespace c10d::inline v1::lazy
