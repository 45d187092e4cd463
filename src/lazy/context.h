// The lazy core's per-process and per-thread state, and the bridge between tensors and IR.
//
// Mode: is_lazy() (C10D_LAZY, default on; set_lazy overrides). Pending tensors: a TensorImpl
// whose PendingValue is a LazyValue (an IR Value). Each thread keeps the list of the pending
// impls it made (weak references) and the last collective node it recorded; mark_step() on a
// thread runs that thread's pending tensors, so ranks run as threads of one process each have
// their own step. The program cache and the counters are process-wide.
#pragma once

#include <atomic>
#include <memory>
#include <vector>

#include "c10d/tensor.h"
#include "lazy/ir.h"

namespace c10d::inline v1::lazy {

class LazyValue final : public PendingValue {
 public:
  explicit LazyValue(Value v) : value_(std::move(v)) {}
  void materialize(TensorImpl& impl) override;
  const Value& value() const { return value_; }

 private:
  Value value_;
};

struct Counters {
  std::atomic<std::int64_t> compiles{0}, cache_hits{0}, cache_misses{0}, fused_kernels{0},
      ops_run{0}, kernels_run{0}, forced_syncs{0}, steps{0}, cse_merged{0};
  std::atomic<std::int64_t> compile_ns{0}, execute_ns{0};
};
Counters& counters();

// The value a tensor holds as IR: its pending value, or a data leaf over its bytes.
Value value_of(const Tensor& t);
// A tensor holding `v`: pending in lazy mode, computed at once in eager mode.
Tensor make_result(Value v);
std::vector<Tensor> make_results(const std::shared_ptr<Node>& node);
// A new pending impl on `v`, registered with this thread's step.
Tensor make_pending(Value v);
void register_pending(const std::shared_ptr<TensorImpl>& impl);

// This thread's last recorded collective (the control edge of the next one).
std::shared_ptr<Node> last_collective();
void set_last_collective(std::shared_ptr<Node> node);

// Runs every live pending tensor of this thread, plus `requester` (a read of its value) if set.
void run_step(TensorImpl* requester);

}  // namespace c10d::inline v1::lazy
