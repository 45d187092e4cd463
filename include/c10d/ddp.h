// Data-parallel training: DistributedDataParallel (DDP), comm hooks, and optimizer_step.
//
// DistributedDataParallel wraps a module whose replicas, one per rank, train on different
// shards of the data. At construction it checks that every rank holds the same parameters
// (names, shapes and dtypes, in order; on a mismatch every rank throws InvalidArgument naming
// the first parameter that differs) and broadcasts parameters and buffers from rank 0.
//
// backward(loss) runs autograd and averages the gradients across ranks. Gradients are grouped
// into buckets (the first capped at first_bucket_cap_bytes, the others at bucket_cap_bytes;
// parameters in reverse order at first, as backward produces them). The moment a bucket's last
// gradient is final during backward, its gradients are copied into the bucket's flat buffer and
// the bucket's all_reduce starts, asynchronously, so communication overlaps the rest of
// backward; buckets start in index order on every rank. After the first iteration the buckets
// are rebuilt in the order the gradients actually became ready on rank 0, the same on every
// rank. When backward(loss) returns, every parameter's .grad holds the average over ranks.
// In lazy mode with the default hook, launching a bucket records its average as a collective IR
// node (as optimizer_step does) and sets each .grad to its pending result: backward computes
// nothing, and the reductions run with the optimizer's update in the next step's fused graph
// (after mark_step, last_stats() reports their time). With any other hook, or in eager mode,
// launching a bucket reads its gradients (in lazy mode that runs the graph recorded so far).
//
// Options: gradient_as_bucket_view (the .grad tensors are views into the bucket buffers, no
// copy back); find_unused_parameters (parameters that get no gradient in an iteration count as
// zero; without it such a parameter is an InvalidArgument naming it); a comm hook replaces the
// all_reduce of a bucket (fp16_compress_hook, bf16_compress_hook, or your own
// `(group, bucket) -> Future` whose value is the reduced, averaged flat buffer).
// no_sync() returns a guard: backward passes under it only accumulate local gradients, and the
// next backward outside it averages the accumulated ones.
//
// Thread-safety: none; one training loop per DDP object. All ranks must call backward()
// the same number of times, outside no_sync() alike. Errors from the group (a lost rank, a
// timeout) surface from backward() as the group reports them. Lifetime: a DDP object shares
// ownership of its module and group; destroying it removes the gradient hooks it put on the
// module's parameters.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "c10d/export.h"
#include "c10d/nn.h"
#include "c10d/optim.h"
#include "c10d/process_group.h"
#include "c10d/tensor.h"
#include "c10d/work.h"

namespace c10d::inline v1::ddp {

// One bucket as a comm hook sees it: the parameters' gradients concatenated in `buffer`.
struct GradBucket {
  int index = 0;
  Tensor buffer;                      // flat, the parameters' dtype
  std::vector<std::string> names;     // the parameters, in buffer order
  std::vector<std::int64_t> offsets;  // element offset of each in buffer
  std::vector<std::int64_t> numels;
  bool is_last = false;  // the last bucket of the iteration
};

// Starts the bucket's reduction; the future's value is {the averaged flat buffer}, of the
// bucket's dtype and size.
using CommHook = std::function<std::shared_ptr<Future>(ProcessGroup& group, GradBucket& bucket)>;
C10D_API CommHook allreduce_hook();      // AVG all_reduce of the buffer (the default)
C10D_API CommHook fp16_compress_hook();  // sent as float16 (half the bytes), averaged, cast back
C10D_API CommHook bf16_compress_hook();  // the same with bfloat16

struct DDPOptions {
  std::int64_t bucket_cap_bytes = 25 << 20;
  std::int64_t first_bucket_cap_bytes = 1 << 20;
  bool gradient_as_bucket_view = false;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // rank 0's buffers to every rank before each forward
  CommHook comm_hook;             // empty: allreduce_hook()
};

// What the last backward() cost, in seconds of wall time on this rank.
struct IterationStats {
  double backward_seconds = 0;  // from backward() being called to autograd's end
  // From the first bucket's launch to the last one's completion. Lazy mode with the default
  // hook: the collective nodes' time in the graph runs since backward() began (read it after
  // mark_step).
  double comm_seconds = 0;
  double wait_seconds = 0;  // after autograd (lazy: in the graph run), blocked on reductions
  double overlap = 0;       // share of comm_seconds hidden under backward: 1 - wait/comm
  int buckets = 0;
  std::int64_t bytes = 0;  // gradient bytes reduced
};

class C10D_API DistributedDataParallel {
 public:
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<ProcessGroup> group,
                          DDPOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }
  void backward(const Tensor& loss);

  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  void register_comm_hook(CommHook hook);
  nn::Module& module() { return *module_; }
  const IterationStats& last_stats() const;
  // The parameter names of each bucket, in launch order (identical on every rank).
  std::vector<std::vector<std::string>> bucket_layout() const;

  struct Impl;

 private:
  std::shared_ptr<nn::Module> module_;
  std::unique_ptr<Impl> impl_;
};

struct OptimizerStepOptions {
  std::int64_t bucket_cap_bytes = 25 << 20;
};

// PyTorch/XLA's optimizer_step: all_reduce every gradient (sum scaled by 1/world, bucketed, as
// lazy collective IR nodes), the optimizer's step, then lazy::mark_step(), so gradient
// averaging and the update run as one fused step.
C10D_API void optimizer_step(optim::Optimizer& optimizer, std::shared_ptr<ProcessGroup> group,
                             const OptimizerStepOptions& options = {});

// The buckets for parameters of `bytes` sizes taken in `order`: consecutive runs, the first up
// to `first_cap` bytes, the others up to `cap` (a parameter larger than the cap gets a bucket
// of its own). Parameters of different dtypes never share a bucket. Pure; exposed for tests.
C10D_API std::vector<std::vector<int>> assign_buckets(const std::vector<std::int64_t>& bytes,
                                                      const std::vector<DType>& dtypes,
                                                      const std::vector<int>& order,
                                                      std::int64_t first_cap, std::int64_t cap);

}  // namespace c10d::inline v1::ddp
