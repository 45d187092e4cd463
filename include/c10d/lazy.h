// Lazy tensors: ops on c10d::Tensor that are recorded as an IR graph and run, compiled and
// fused, at a step boundary (PyTorch/XLA's model).
//
// Every op below returns at once with a Tensor whose value is pending: its TensorImpl holds an
// IR value (a node and an output index) instead of storage. Nothing is computed until
//   - mark_step() runs the graph of every live pending tensor, or
//   - something reads a pending tensor's bytes (Tensor::data(), a collective, a copy out):
//     that also runs the whole pending graph, and counts as a forced sync in metrics().
// A run looks the graph up by its structural hash in an LRU cache of compiled programs; on a
// miss it plans one (dead code removed, common subexpressions merged, chains of elementwise ops
// and a chain feeding a reduction fused into one tiled pass over memory) and caches it. Input
// data enters a graph by shape and dtype only, so a training step that repeats with new values
// compiles nothing after its first run. Scalars passed as doubles are part of the graph (they
// hash by value): a value that changes every step (a learning-rate schedule) belongs in a 0-d
// tensor, or every step compiles anew.
//
// Eager mode (C10D_LAZY=0 in the environment, or set_lazy(false)) runs every op at once
// through the same kernels; both modes give the same values.
//
// Shapes broadcast as numpy does. Dtypes: float32 and float64 for arithmetic and math, int32
// and int64 for arithmetic and comparisons, bool from comparisons (and into where()); cast()
// converts between any two dtypes of include/c10d/types.h. A bad shape, axis or dtype throws
// InvalidArgument when the op is recorded, naming the op and the operands' types.
//
// Autograd is reverse mode over the same ops: the gradients are lazy tensors too, so a
// backward pass and an optimizer update fuse into the step that follows them.
//
// Thread-safety: pending tensors belong to the thread that recorded them: mark_step() runs the
// calling thread's live pending tensors (so ranks run as threads each have their own step, and
// their collectives run on their own thread). A read of a pending tensor on any thread computes
// it. The program cache and the metrics are process-wide (a mutex, atomics). Lifetime: IR nodes own
// their operands (never their users), so a graph lives exactly as long as some tensor refers into
// it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "c10d/export.h"
#include "c10d/tensor.h"
#include "c10d/types.h"

namespace c10d::inline v1 {

class ProcessGroup;

namespace lazy {

using Shape = std::vector<std::int64_t>;

// ---- Mode and step ----

C10D_API bool is_lazy();            // C10D_LAZY (default 1) unless set_lazy was called
C10D_API void set_lazy(bool lazy);  // for tests and benchmarks; affects ops recorded afterwards
C10D_API void mark_step();          // runs every live pending tensor's graph
// Whether a graph run overlaps its collectives with its other steps: a collective node is
// issued where the plan places it and waited for by the first step that reads its results (so
// DDP's reduction of the early buckets runs under the rest of backward). That needs a spare
// core per process for the backend's thread; without one it only slows the step, so the
// collective is then waited for where it is issued (on the waiting thread, inline). Default:
// C10D_LAZY_OVERLAP=1 or 0, else on when this host has at least two cores per process of the
// job (LOCAL_WORLD_SIZE, or mpirun's OMPI_COMM_WORLD_LOCAL_SIZE; 1 if neither is set).
C10D_API bool overlap_collectives();
C10D_API void set_overlap_collectives(bool overlap);  // for tests and benchmarks
// The LRU size (default 64, or C10D_LAZY_CACHE).
C10D_API void set_cache_capacity(std::size_t programs);

// ---- Creation ----

C10D_API Tensor zeros(const Shape& shape, DType dtype = DType::kFloat32);
C10D_API Tensor ones(const Shape& shape, DType dtype = DType::kFloat32);
C10D_API Tensor full(const Shape& shape, double value, DType dtype = DType::kFloat32);
C10D_API Tensor arange(double start, double end, double step = 1.0, DType dtype = DType::kFloat32);
C10D_API Tensor scalar(double value, DType dtype = DType::kFloat32);  // shape []

// A seeded random stream (Philox-style counter-based, so results are the same in lazy and
// eager mode and on every machine). Each call draws fresh numbers and advances the stream.
class C10D_API Generator {
 public:
  explicit Generator(std::uint64_t seed) : seed_(seed) {}
  std::uint64_t seed() const { return seed_; }
  // Reserves `n` numbers of the stream; returns the offset of the first.
  std::uint64_t advance(std::uint64_t n) {
    const std::uint64_t at = offset_;
    offset_ += n;
    return at;
  }

 private:
  std::uint64_t seed_;
  std::uint64_t offset_ = 0;
};
C10D_API Tensor uniform(const Shape& shape, Generator& gen, double low = 0.0, double high = 1.0,
                        DType dtype = DType::kFloat32);
C10D_API Tensor normal(const Shape& shape, Generator& gen, double mean = 0.0, double stddev = 1.0,
                       DType dtype = DType::kFloat32);

// ---- Elementwise ----

C10D_API Tensor add(const Tensor& a, const Tensor& b);
C10D_API Tensor sub(const Tensor& a, const Tensor& b);
C10D_API Tensor mul(const Tensor& a, const Tensor& b);
C10D_API Tensor div(const Tensor& a, const Tensor& b);
C10D_API Tensor maximum(const Tensor& a, const Tensor& b);
C10D_API Tensor minimum(const Tensor& a, const Tensor& b);
C10D_API Tensor neg(const Tensor& a);
C10D_API Tensor abs(const Tensor& a);
C10D_API Tensor exp(const Tensor& a);
C10D_API Tensor log(const Tensor& a);
C10D_API Tensor sqrt(const Tensor& a);
C10D_API Tensor tanh(const Tensor& a);
C10D_API Tensor sigmoid(const Tensor& a);
C10D_API Tensor relu(const Tensor& a);
C10D_API Tensor pow(const Tensor& a, double exponent);
C10D_API Tensor eq(const Tensor& a, const Tensor& b);  // comparisons give bool
C10D_API Tensor ne(const Tensor& a, const Tensor& b);
C10D_API Tensor lt(const Tensor& a, const Tensor& b);
C10D_API Tensor le(const Tensor& a, const Tensor& b);
C10D_API Tensor gt(const Tensor& a, const Tensor& b);
C10D_API Tensor ge(const Tensor& a, const Tensor& b);
C10D_API Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
C10D_API Tensor cast(const Tensor& a, DType dtype);

// ---- Reductions (axes may be negative; empty axes = all) ----

C10D_API Tensor sum(const Tensor& a, std::vector<std::int64_t> axes = {}, bool keepdim = false);
C10D_API Tensor mean(const Tensor& a, std::vector<std::int64_t> axes = {}, bool keepdim = false);
C10D_API Tensor max(const Tensor& a, std::vector<std::int64_t> axes = {}, bool keepdim = false);
C10D_API Tensor argmax(const Tensor& a, std::int64_t axis, bool keepdim = false);  // int64

// ---- Linear algebra and shape ----

C10D_API Tensor matmul(const Tensor& a, const Tensor& b);  // [m,k]x[k,n]; batched [..,m,k]x[..,k,n]
C10D_API Tensor transpose(const Tensor& a, std::int64_t dim0 = -2, std::int64_t dim1 = -1);
C10D_API Tensor reshape(const Tensor& a, Shape shape);  // one dimension may be -1
C10D_API Tensor slice_rows(const Tensor& a, std::int64_t begin, std::int64_t end);  // first axis
C10D_API Tensor concat(const std::vector<Tensor>& tensors, std::int64_t axis = 0);
C10D_API Tensor broadcast_to(const Tensor& a, const Shape& shape);

// ---- Neural-network functions ----

C10D_API Tensor softmax(const Tensor& a, std::int64_t axis = -1);
C10D_API Tensor log_softmax(const Tensor& a, std::int64_t axis = -1);
// Mean over the batch of -log_softmax(logits)[i, labels[i]]; logits [N, C], labels int64 [N].
C10D_API Tensor cross_entropy(const Tensor& logits, const Tensor& labels);
C10D_API Tensor one_hot(const Tensor& labels, std::int64_t classes, DType dtype = DType::kFloat32);

// ---- Collective ----

// An IR node that all-reduces `tensors` through `group` when the step runs, in program order
// with the other collectives of the step, scaled by `scale` (1/world for an average): a kSum or
// kAvg scales each rank's tensor before the sum (as PREMUL_SUM does), any other op scales its
// result. Returns the reduced tensors (pending). In eager mode it runs at once. The tensors
// may differ in shape and dtype: those of one dtype travel as one ProcessGroup::all_reduce of
// a flat buffer, all issued in order before the first is waited on.
C10D_API std::vector<Tensor> all_reduce(const std::vector<Tensor>& tensors, ReduceOp op,
                                        double scale, std::shared_ptr<ProcessGroup> group);

// ---- In place ----

// `dst` (every handle sharing its impl) now holds `value`, which must have dst's shape and
// dtype. Optimizers and DDP write parameters and gradients this way; the old value stays alive
// for as long as the pending graph reads it.
C10D_API void assign(const Tensor& dst, const Tensor& value);
// A new handle on the same value, cut from the autograd graph.
C10D_API Tensor detach(const Tensor& a);

// ---- Autograd ----
//
// Reverse mode over the ops above (src/lazy/autograd.h has the details). An op with an input
// that requires grad records a node, unless NoGradGuard is alive on the thread; its floating
// outputs then require grad. Comparisons, argmax, one_hot, random and creation ops are not
// differentiable. Gradients are lazy tensors built from the same ops, so backward() itself
// computes nothing: the gradients run, fused, with the next step.

// Only leaves (tensors not made by a recorded op) can be switched; floating dtypes only.
C10D_API void set_requires_grad(const Tensor& t, bool requires_grad = true);
C10D_API bool requires_grad(const Tensor& t);
// True unless `t` is the result of a recorded op (torch's is_leaf).
C10D_API bool is_leaf(const Tensor& t);
// The accumulated gradient of a leaf (undefined Tensor when none yet).
C10D_API Tensor grad(const Tensor& t);
// Replaces the gradient (every later backward() adds into this handle's impl); an undefined
// `grad` clears it. The shape and dtype must match the tensor's.
C10D_API void set_grad(const Tensor& t, const Tensor& grad);
// Reverse mode from `root` (a one-element tensor when `grad_output` is undefined), adding into
// the .grad of every leaf that requires grad. Gradients of broadcast inputs are summed back to
// their shape. Unless `retain_graph`, the values the graph saved are freed, and a second
// backward() through the same ops throws InvalidArgument.
C10D_API void backward(const Tensor& root, const Tensor& grad_output = {},
                       bool retain_graph = false);
// A leaf's hook runs once per backward() that reaches the leaf, the moment its gradient for
// that pass is final (every path from the root to the leaf processed), so the hooks of
// different leaves run in the order their gradients become final: roughly the reverse of
// their use in the forward pass. It gets the leaf and its gradient from this pass; grad(leaf)
// already includes it, and the hook may replace it with set_grad (DDP writes the all-reduced
// gradient this way). Hooks run on the thread that called backward(), with grad mode off.
// Returns an id for remove_grad_hook.
using GradHook = std::function<void(const Tensor& leaf, const Tensor& grad)>;
C10D_API int add_grad_hook(const Tensor& leaf, GradHook hook);
C10D_API void remove_grad_hook(const Tensor& leaf, int id);

// While alive, ops record no autograd history on this thread.
class C10D_API NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
C10D_API bool grad_enabled();

// ---- Introspection ----

// The pending graph that computes `outputs`, as text in the style of torch.jit graphs:
//   graph(%0 : f32[64, 784], %1 : f32[784, 10]) {
//     %2 = matmul(%0, %1) : f32[64, 10]
//     return (%2)
//   }
C10D_API std::string dump_graph(const std::vector<Tensor>& outputs);

struct Metrics {
  std::int64_t compiles = 0;  // programs planned (cache misses)
  std::int64_t cache_hits = 0;
  std::int64_t cache_misses = 0;
  std::int64_t fused_kernels = 0;  // fused kernels executed
  std::int64_t ops_run = 0;        // IR nodes executed (a fused kernel counts each node)
  std::int64_t kernels_run = 0;    // kernels executed (fused ones count once)
  std::int64_t forced_syncs = 0;   // graph runs caused by reading a pending value
  std::int64_t steps = 0;          // graph runs in all
  std::int64_t cse_merged = 0;     // nodes merged into an equal one when planning
  double compile_seconds = 0;
  double execute_seconds = 0;
};
C10D_API Metrics metrics();
C10D_API void reset_metrics();

// The collective nodes run by the calling thread's graph runs (and eager collectives), summed
// since the thread began: how many, the seconds from each one's issue to its completion, and
// the seconds the run spent blocked on them (the rest overlapped the run's other steps).
// Subtract two readings to time the collectives of a step.
struct CollectiveTime {
  std::int64_t collectives = 0;
  double seconds = 0;
  double wait_seconds = 0;
};
C10D_API CollectiveTime collective_time();
C10D_API std::string metrics_report();  // one "name: value" line each

}  // namespace lazy

// Operators on tensors, recorded like the functions above.
C10D_API Tensor operator+(const Tensor& a, const Tensor& b);
C10D_API Tensor operator-(const Tensor& a, const Tensor& b);
C10D_API Tensor operator*(const Tensor& a, const Tensor& b);
C10D_API Tensor operator/(const Tensor& a, const Tensor& b);
C10D_API Tensor operator-(const Tensor& a);
C10D_API Tensor operator+(const Tensor& a, double b);
C10D_API Tensor operator-(const Tensor& a, double b);
C10D_API Tensor operator*(const Tensor& a, double b);
C10D_API Tensor operator/(const Tensor& a, double b);
C10D_API Tensor operator+(double a, const Tensor& b);
C10D_API Tensor operator-(double a, const Tensor& b);
C10D_API Tensor operator*(double a, const Tensor& b);
C10D_API Tensor operator/(double a, const Tensor& b);

}  // namespace c10d::inline v1
