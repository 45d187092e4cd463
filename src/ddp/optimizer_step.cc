// optimizer_step (include/c10d/ddp.h): PyTorch/XLA's recipe on the lazy core. The gradients'
// all_reduce are collective IR nodes (sum, scaled by 1/world), bucketed by dtype and size in
// parameter order, so the reduction, the optimizer's update and the next forward's inputs are
// one pending graph that mark_step() runs, fused. In eager mode the same calls run at once.
#include "c10d/ddp.h"
#include "c10d/lazy.h"
#include "core/check.h"

namespace c10d::inline v1::ddp {

void optimizer_step(optim::Optimizer& optimizer, std::shared_ptr<ProcessGroup> group,
                    const OptimizerStepOptions& options) {
  C10D_CHECK(group != nullptr, "optimizer_step: no process group");
  C10D_CHECK(options.bucket_cap_bytes > 0, "optimizer_step: bucket cap {} is not positive",
             options.bucket_cap_bytes);
  if (group->size() > 1) {
    std::vector<Tensor> params;
    std::vector<std::int64_t> bytes;
    std::vector<DType> dtypes;
    for (const Tensor& p : optimizer.params()) {
      if (!lazy::grad(p).defined()) continue;  // no gradient: the optimizer skips it too
      params.push_back(p);
      bytes.push_back(static_cast<std::int64_t>(p.nbytes()));
      dtypes.push_back(p.dtype());
    }
    std::vector<int> order(params.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    const double scale = 1.0 / group->size();
    for (const auto& bucket :
         assign_buckets(bytes, dtypes, order, options.bucket_cap_bytes, options.bucket_cap_bytes)) {
      std::vector<Tensor> grads;
      for (int i : bucket) grads.push_back(lazy::grad(params[static_cast<std::size_t>(i)]));
      const auto reduced = lazy::all_reduce(grads, ReduceOp::kSum, scale, group);
      for (std::size_t k = 0; k < bucket.size(); ++k) {
        lazy::set_grad(params[static_cast<std::size_t>(bucket[k])], reduced[k]);
      }
    }
  }
  optimizer.step();
  lazy::mark_step();
}

}  // namespace c10d::inline v1::ddp
