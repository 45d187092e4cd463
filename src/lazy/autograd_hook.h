// The seam between the forward ops (src/lazy/ops_*.cc) and autograd (src/lazy/autograd*.cc).
//
// Every public op of include/c10d/lazy.h (and the operators on Tensor) calls record_op() once,
// after it has made its output tensor(s). record_op() calls the installed hook only when one is
// installed and some input's TensorImpl has an autograd_meta(); the hook decides the rest (grad
// mode, which inputs require grad). Composite ops (softmax, log_softmax, cross_entropy) record
// only themselves: the ops they are built of do not call the hook. Ops with a Tensor-and-double
// signature (`a * 0.5`, `2.0 - a`) record as the binary op on a 0-d constant tensor of the
// computed dtype (that constant never has autograd_meta).
//
// What each op fills (inputs in signature order; fields not listed keep their defaults):
//   add sub mul div maximum minimum eq ne lt le gt ge : inputs {a, b}
//   neg abs exp log sqrt tanh sigmoid relu            : inputs {a}
//   pow         : inputs {a}; exponent
//   where       : inputs {cond, a, b}
//   cast        : inputs {a}; dtype (the target)
//   sum mean max: inputs {a}; axes (as the caller gave them, possibly negative or empty = all),
//                 keepdim
//   argmax      : inputs {a}; axis, keepdim
//   matmul      : inputs {a, b}
//   transpose   : inputs {a}; dim0, dim1 (as given, possibly negative)
//   reshape     : inputs {a}; shape (resolved: no -1)
//   slice_rows  : inputs {a}; begin, end
//   concat      : inputs = the tensors; axis (normalized, >= 0)
//   broadcast_to: inputs {a}; shape
//   softmax log_softmax : inputs {a}; axis (normalized, >= 0)
//   cross_entropy       : inputs {logits, labels}
//   one_hot     : inputs {labels}; classes, dtype
//   all_reduce  : inputs = the tensors; outputs = the reduced tensors; scalar = scale,
//                 reduce_op, group
//   detach and assign do not record; creation and random ops have no inputs and do not record.
// Outputs: the op's result(s); outputs[0] for single-result ops.
//
// Thread-safety: set_record_hook is meant to be called once, before ops run (an atomic store).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "c10d/tensor.h"
#include "c10d/types.h"

namespace c10d::inline v1 {
class ProcessGroup;
}

namespace c10d::inline v1::lazy {

struct OpRecord {
  std::string_view name;  // the public op's name: "add", "sum", "softmax", ...
  std::vector<Tensor> inputs;
  std::vector<Tensor> outputs;
  std::vector<std::int64_t> axes;       // sum, mean, max
  bool keepdim = false;                 // sum, mean, max, argmax
  double exponent = 0;                  // pow
  std::vector<std::int64_t> shape;      // reshape, broadcast_to
  std::int64_t dim0 = 0;                // transpose
  std::int64_t dim1 = 0;                // transpose
  std::int64_t begin = 0;               // slice_rows
  std::int64_t end = 0;                 // slice_rows
  std::int64_t axis = 0;                // argmax, concat, softmax, log_softmax
  std::int64_t classes = 0;             // one_hot
  DType dtype = DType::kFloat32;        // cast, one_hot
  double scalar = 0;                    // all_reduce: scale
  ReduceOp reduce_op = ReduceOp::kSum;  // all_reduce
  std::shared_ptr<ProcessGroup> group;  // all_reduce
};

using RecordFn = void (*)(const OpRecord&);

// Installs (or, with nullptr, removes) the hook.
void set_record_hook(RecordFn hook);

// True when a hook is installed and some input has autograd metadata: ops build an OpRecord
// only then, so recording costs nothing when autograd is unused.
bool should_record(std::span<const Tensor> inputs);
// Calls the hook (no-op when none). Ops call it through should_record() first.
void record_op(const OpRecord& record);

// While alive, ops on this thread do not call the hook (composite ops use it around the ops
// they are built of).
class RecordSuspendGuard {
 public:
  RecordSuspendGuard();
  ~RecordSuspendGuard();
  RecordSuspendGuard(const RecordSuspendGuard&) = delete;
  RecordSuspendGuard& operator=(const RecordSuspendGuard&) = delete;

 private:
  bool previous_;
};

}  // namespace c10d::inline v1::lazy
