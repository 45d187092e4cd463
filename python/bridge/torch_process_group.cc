// The torch half of the c10d backend, for torch 1.13: a subclass of torch's c10d::ProcessGroup
// whose ops run on a c10d group through bridge.h, its Work, torch's store as the group's
// key-value store, and the Python module c10d_torch._C. Includes torch headers only; every
// torch-version-specific line of the backend is in this file (torch 2.x would subclass
// c10d::Backend here instead), but for _wrap_env_handler in c10d_torch/__init__.py.
//
// Tensors cross without a copy: each CPU tensor's memory becomes a c10d tensor (from_blob)
// that holds the torch tensor until the op completes. alltoall with lists is the exception: it
// packs the inputs into one tensor and unpacks the output (docs/torch.md).
#include <ATen/ATen.h>
#include <ATen/core/ivalue.h>
#include <pybind11/chrono.h>
#include <torch/csrc/utils/pybind.h>

#include <algorithm>
#include <chrono>
#include <exception>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Types.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>
#include <utility>
#include <vector>

#include "bridge/bridge.h"

namespace {

namespace py = pybind11;
namespace bridge = c10d_bridge;
using ::c10d::OpType;

constexpr const char* kBackendName = "c10d";

// c10d's errors reach Python as RuntimeError with their message: rethrown as what torch's
// bindings translate to RuntimeError (c10::Error, or std::runtime_error), never as a type of the
// c10d library (its TimeoutError shares a name with torch's, which Python sees as TimeoutError).
std::exception_ptr to_torch_error(std::exception_ptr e) {
  if (!e) return e;
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error&) {
    return e;
  } catch (const std::exception& ex) {
    return std::make_exception_ptr(std::runtime_error(ex.what()));
  } catch (...) {
    return e;
  }
}

template <typename F>
auto translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    throw std::runtime_error(e.what());
  }
}

bridge::ElementType element_type(at::ScalarType t, const char* op) {
  switch (t) {
    case at::kFloat:
    case at::kComplexFloat:  // as its (real, imaginary) float pairs
      return bridge::ElementType::kFloat32;
    case at::kDouble:
    case at::kComplexDouble:
      return bridge::ElementType::kFloat64;
    case at::kHalf:
      return bridge::ElementType::kFloat16;
    case at::kBFloat16:
      return bridge::ElementType::kBFloat16;
    case at::kChar:
      return bridge::ElementType::kInt8;
    case at::kByte:
      return bridge::ElementType::kUInt8;
    case at::kShort:
      return bridge::ElementType::kInt16;
    case at::kInt:
      return bridge::ElementType::kInt32;
    case at::kLong:
      return bridge::ElementType::kInt64;
    case at::kBool:
      return bridge::ElementType::kBool;
    default:
      break;
  }
  throw std::runtime_error(c10::str("ProcessGroup ", kBackendName, ": ", op, ": dtype ",
                                    c10::toString(t),
                                    " is not supported (float32, float64, float16, bfloat16, "
                                    "int8, uint8, int16, int32, int64, bool, complex64, "
                                    "complex128)"));
}

// The tensor's memory, used in place. Dense CPU tensors only: a copy in and out would hide
// from the caller that the op writes elsewhere.
bridge::Buffer buffer_of(const at::Tensor& t, const char* op, const char* what) {
  TORCH_CHECK(t.defined(), "ProcessGroup ", kBackendName, ": ", op, ": ", what,
              " is an undefined tensor");
  TORCH_CHECK(t.device().is_cpu(), "ProcessGroup ", kBackendName, ": ", op, ": ", what, " is on ",
              t.device(), "; the c10d backend takes CPU tensors only");
  TORCH_CHECK(t.layout() == c10::kStrided, "ProcessGroup ", kBackendName, ": ", op, ": ", what,
              " has layout ", t.layout(), "; the c10d backend takes dense (strided) tensors only");
  TORCH_CHECK(t.is_contiguous(), "ProcessGroup ", kBackendName, ": ", op, ": ", what,
              " is not contiguous (sizes ", t.sizes(), ", strides ", t.strides(),
              "); pass tensor.contiguous() and copy the result back");
  bridge::Buffer b;
  b.data = t.data_ptr();
  b.shape = t.sizes().vec();
  b.type = element_type(t.scalar_type(), op);
  if (t.is_complex()) b.shape.push_back(2);
  b.owner = std::make_shared<at::Tensor>(t);
  return b;
}

std::vector<bridge::Buffer> buffers_of(const std::vector<at::Tensor>& ts, const char* op,
                                       const char* what) {
  std::vector<bridge::Buffer> out;
  out.reserve(ts.size());
  for (const auto& t : ts) out.push_back(buffer_of(t, op, what));
  return out;
}

std::int64_t timeout_ms(std::chrono::milliseconds t) {
  return t == ::c10d::kUnsetTimeout ? -1 : t.count();
}

// torch's ReduceOp, with PREMUL_SUM's factor from its supplement (a double, or a one-element
// tensor).
void set_reduce(bridge::OpOptions& o, const ::c10d::ReduceOp& op, const char* name,
                const std::vector<at::Tensor>& tensors) {
  bool complex = false;
  for (const auto& t : tensors) complex = complex || t.is_complex();
  switch (op.op_) {
    case ::c10d::ReduceOp::SUM:
      o.reduce = bridge::Reduce::kSum;
      return;
    case ::c10d::ReduceOp::AVG:
      o.reduce = bridge::Reduce::kAvg;
      return;
    case ::c10d::ReduceOp::PREMUL_SUM: {
      o.reduce = bridge::Reduce::kPremulSum;
      const auto* s = dynamic_cast<const ::c10d::NCCLPreMulSumSupplement*>(op.supplement_.get());
      TORCH_CHECK(s != nullptr, "ProcessGroup ", kBackendName, ": ", name,
                  ": PREMUL_SUM without its factor (make it with "
                  "torch.distributed._make_nccl_premul_sum)");
      if (s->tensor_factors.empty()) {
        o.premul_factor = s->double_factor;
      } else {
        const at::Tensor& f = s->tensor_factors.front();
        TORCH_CHECK(f.numel() == 1, "ProcessGroup ", kBackendName, ": ", name,
                    ": PREMUL_SUM's factor tensor has ", f.numel(), " elements, not 1");
        o.premul_factor = f.item<double>();
      }
      return;
    }
    default:
      break;
  }
  TORCH_CHECK(!complex, "ProcessGroup ", kBackendName, ": ", name, ": reduce op ",
              static_cast<int>(op.op_),
              " is not defined for complex tensors (SUM, AVG and PREMUL_SUM are)");
  switch (op.op_) {
    case ::c10d::ReduceOp::PRODUCT:
      o.reduce = bridge::Reduce::kProduct;
      return;
    case ::c10d::ReduceOp::MIN:
      o.reduce = bridge::Reduce::kMin;
      return;
    case ::c10d::ReduceOp::MAX:
      o.reduce = bridge::Reduce::kMax;
      return;
    case ::c10d::ReduceOp::BAND:
      o.reduce = bridge::Reduce::kBand;
      return;
    case ::c10d::ReduceOp::BOR:
      o.reduce = bridge::Reduce::kBor;
      return;
    case ::c10d::ReduceOp::BXOR:
      o.reduce = bridge::Reduce::kBxor;
      return;
    default:
      TORCH_CHECK(false, "ProcessGroup ", kBackendName, ": ", name, ": reduce op ",
                  static_cast<int>(op.op_), " is not supported");
  }
}

// torch's Work over a bridge Op. Completion is published by the torch Future, completed (with
// the output tensors) from the Op's completion callback after `finish` ran, so isCompleted()
// and wait() never show an op whose outputs are not yet final.
class WorkC10d final : public ::c10d::Work {
 public:
  WorkC10d(int rank, OpType type, std::shared_ptr<bridge::Op> op, std::vector<at::Tensor> outputs,
           std::function<void()> finish)
      : ::c10d::Work(rank, type),
        op_(std::move(op)),
        outputs_(std::move(outputs)),
        future_(c10::make_intrusive<c10::ivalue::Future>(
            c10::ListType::create(c10::TensorType::get()))) {
    bridge::op_on_done(*op_, [future = future_, outputs = outputs_,
                              finish = std::move(finish)](std::exception_ptr error) {
      if (!error && finish) {
        try {
          finish();
        } catch (...) {
          error = std::current_exception();
        }
      }
      if (error) {
        future->setError(to_torch_error(error));
      } else {
        future->markCompleted(c10::IValue(outputs));
      }
    });
  }

  bool isCompleted() override { return future_->completed(); }
  bool isSuccess() const override { return future_->completed() && !future_->hasError(); }
  std::exception_ptr exception() const override {
    return future_->completed() ? future_->exception_ptr() : nullptr;
  }
  std::vector<at::Tensor> result() override { return outputs_; }

  // timeout 0 (kNoTimeout): until the op completes, which its own deadline bounds.
  bool wait(std::chrono::milliseconds timeout) override {
    const auto limit = timeout == kNoTimeout ? std::chrono::hours(24 * 365) : timeout;
    translated([&] { bridge::op_wait(*op_, limit); });
    future_->wait();  // the outputs are final (the alltoall copy-out has run); rethrows
    return true;
  }

  c10::intrusive_ptr<c10::ivalue::Future> getFuture() override { return future_; }

  // recv's and recvAnysource's sender (torch's recv without src returns it). Other ops throw,
  // as torch's own Works do.
  int sourceRank() const override {
    return translated([&] { return bridge::op_source_rank(*op_); });
  }

 private:
  std::shared_ptr<bridge::Op> op_;
  std::vector<at::Tensor> outputs_;
  c10::intrusive_ptr<c10::ivalue::Future> future_;
};

class ProcessGroupC10d final : public ::c10d::ProcessGroup {
 public:
  ProcessGroupC10d(std::shared_ptr<bridge::Group> group, int rank, int size)
      : ::c10d::ProcessGroup(rank, size), group_(std::move(group)) {
    init();
  }

  // The group's threads may drop the last reference to a tensor whose Python object torch
  // keeps alive, which takes the GIL: joining them (c10d's group's destructor) while holding it
  // would deadlock, and Python destroys groups holding it.
  ~ProcessGroupC10d() override {
    if (Py_IsInitialized() != 0 && PyGILState_Check() != 0) {
      py::gil_scoped_release no_gil;
      group_.reset();
    } else {
      group_.reset();
    }
  }

  const std::string getBackendName() const override { return kBackendName; }
  bridge::Group& group() { return *group_; }

  c10::intrusive_ptr<::c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                             const ::c10d::BroadcastOptions& opts) override {
    one_tensor(tensors, "broadcast");
    TORCH_CHECK(opts.rootTensor == 0, "ProcessGroup ", kBackendName,
                ": broadcast: rootTensor must be 0 (one tensor per process)");
    bridge::OpOptions o = options(opts.timeout);
    o.root = root(opts.rootRank, "broadcast");
    return launch(OpType::BROADCAST, tensors, [&] {
      return bridge::broadcast(*group_, buffers_of(tensors, "broadcast", "the tensor"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                             const ::c10d::AllreduceOptions& opts) override {
    one_tensor(tensors, "allreduce");
    bridge::OpOptions o = options(opts.timeout);
    set_reduce(o, opts.reduceOp, "allreduce", tensors);
    return launch(OpType::ALLREDUCE, tensors, [&] {
      return bridge::all_reduce(*group_, buffers_of(tensors, "allreduce", "the tensor"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) override {
    TORCH_CHECK(!tensors.empty(), "ProcessGroup ", kBackendName,
                ": allreduce_coalesced: no tensors");
    bridge::OpOptions o = options(opts.timeout);
    set_reduce(o, opts.reduceOp, "allreduce_coalesced", tensors);
    return launch(OpType::ALLREDUCE_COALESCED, tensors, [&] {
      return bridge::all_reduce(*group_, buffers_of(tensors, "allreduce_coalesced", "a tensor"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                          const ::c10d::ReduceOptions& opts) override {
    one_tensor(tensors, "reduce");
    TORCH_CHECK(opts.rootTensor == 0, "ProcessGroup ", kBackendName,
                ": reduce: rootTensor must be 0 (one tensor per process)");
    bridge::OpOptions o = options(opts.timeout);
    o.root = root(opts.rootRank, "reduce");
    set_reduce(o, opts.reduceOp, "reduce", tensors);
    return launch(OpType::REDUCE, tensors, [&] {
      return bridge::reduce(*group_, buffer_of(tensors[0], "reduce", "the tensor"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                             std::vector<at::Tensor>& inputs,
                                             const ::c10d::AllgatherOptions& opts) override {
    one_tensor(inputs, "allgather");
    TORCH_CHECK(outputs.size() == 1, "ProcessGroup ", kBackendName,
                ": allgather: takes one output list per process, got ", outputs.size());
    const bridge::OpOptions o = options(opts.timeout);
    return launch(OpType::ALLGATHER, outputs[0], [&] {
      return bridge::all_gather(*group_, buffers_of(outputs[0], "allgather", "an output"),
                                buffer_of(inputs[0], "allgather", "the input"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                   const ::c10d::AllgatherOptions& opts) override {
    const bridge::OpOptions o = options(opts.timeout);
    return launch(OpType::_ALLGATHER_BASE, {output}, [&] {
      return bridge::all_gather_into_tensor(*group_,
                                            buffer_of(output, "_allgather_base", "the output"),
                                            buffer_of(input, "_allgather_base", "the input"), o);
    });
  }

  // output_lists[r][i] receives rank r's inputs[i]: one c10d all_gather per input.
  c10::intrusive_ptr<::c10d::Work> allgather_coalesced(
      std::vector<std::vector<at::Tensor>>& output_lists, std::vector<at::Tensor>& inputs,
      const ::c10d::AllgatherOptions& opts) override {
    const char* kOp = "allgather_coalesced";
    TORCH_CHECK(static_cast<int>(output_lists.size()) == getSize(), "ProcessGroup ", kBackendName,
                ": ", kOp, ": ", output_lists.size(), " output lists for a group of ", getSize());
    std::vector<std::vector<bridge::Buffer>> per_input(inputs.size());
    std::vector<at::Tensor> flat;
    for (const auto& list : output_lists) {
      TORCH_CHECK(list.size() == inputs.size(), "ProcessGroup ", kBackendName, ": ", kOp,
                  ": an output list has ", list.size(), " tensors for ", inputs.size(), " inputs");
      for (std::size_t i = 0; i < list.size(); ++i) {
        per_input[i].push_back(buffer_of(list[i], kOp, "an output"));
        flat.push_back(list[i]);
      }
    }
    const bridge::OpOptions o = options(opts.timeout);
    return launch(OpType::ALLGATHER_COALESCED, flat, [&] {
      return bridge::all_gather_each(*group_, std::move(per_input),
                                     buffers_of(inputs, kOp, "an input"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const ::c10d::GatherOptions& opts) override {
    one_tensor(inputs, "gather");
    bridge::OpOptions o = options(opts.timeout);
    o.root = root(opts.rootRank, "gather");
    TORCH_CHECK(outputs.size() <= 1, "ProcessGroup ", kBackendName,
                ": gather: takes at most one output list per process, got ", outputs.size());
    std::vector<at::Tensor> list = outputs.empty() ? std::vector<at::Tensor>{} : outputs[0];
    return launch(OpType::GATHER, list, [&] {
      return bridge::gather(*group_, buffers_of(list, "gather", "an output"),
                            buffer_of(inputs[0], "gather", "the input"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                           std::vector<std::vector<at::Tensor>>& inputs,
                                           const ::c10d::ScatterOptions& opts) override {
    one_tensor(outputs, "scatter");
    bridge::OpOptions o = options(opts.timeout);
    o.root = root(opts.rootRank, "scatter");
    TORCH_CHECK(inputs.size() <= 1, "ProcessGroup ", kBackendName,
                ": scatter: takes at most one input list per process, got ", inputs.size());
    std::vector<at::Tensor> list = inputs.empty() ? std::vector<at::Tensor>{} : inputs[0];
    return launch(OpType::SCATTER, outputs, [&] {
      return bridge::scatter(*group_, buffer_of(outputs[0], "scatter", "the output"),
                             buffers_of(list, "scatter", "an input"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> reduce_scatter(
      std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
      const ::c10d::ReduceScatterOptions& opts) override {
    one_tensor(outputs, "reduce_scatter");
    TORCH_CHECK(inputs.size() == 1, "ProcessGroup ", kBackendName,
                ": reduce_scatter: takes one input list per process, got ", inputs.size());
    bridge::OpOptions o = options(opts.timeout);
    set_reduce(o, opts.reduceOp, "reduce_scatter", outputs);
    return launch(OpType::REDUCE_SCATTER, outputs, [&] {
      return bridge::reduce_scatter(*group_, buffer_of(outputs[0], "reduce_scatter", "the output"),
                                    buffers_of(inputs[0], "reduce_scatter", "an input"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) override {
    bridge::OpOptions o = options(opts.timeout);
    set_reduce(o, opts.reduceOp, "_reduce_scatter_base", {input});
    return launch(OpType::_REDUCE_SCATTER_BASE, {output}, [&] {
      return bridge::reduce_scatter_tensor(
          *group_, buffer_of(output, "_reduce_scatter_base", "the output"),
          buffer_of(input, "_reduce_scatter_base", "the input"), o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                                 std::vector<int64_t>& output_splits,
                                                 std::vector<int64_t>& input_splits,
                                                 const ::c10d::AllToAllOptions& opts) override {
    bridge::OpOptions o = options(opts.timeout);
    o.output_splits = output_splits;
    o.input_splits = input_splits;
    return launch(OpType::ALLTOALL_BASE, {output}, [&] {
      return bridge::all_to_all(*group_, buffer_of(output, "alltoall_base", "the output"),
                                buffer_of(input, "alltoall_base", "the input"), o);
    });
  }

  // outputs[r] receives rank r's inputs[this rank], of any size: one c10d all_to_all over the
  // inputs packed into one tensor, whose output is unpacked into `outputs` once it completed
  // (two copies; docs/torch.md).
  c10::intrusive_ptr<::c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                            std::vector<at::Tensor>& inputs,
                                            const ::c10d::AllToAllOptions& opts) override {
    const char* kOp = "alltoall";
    TORCH_CHECK(static_cast<int>(inputs.size()) == getSize() &&
                    static_cast<int>(outputs.size()) == getSize(),
                "ProcessGroup ", kBackendName, ": ", kOp, ": ", inputs.size(), " inputs and ",
                outputs.size(), " outputs for a group of ", getSize());
    for (const auto& t : inputs) buffer_of(t, kOp, "an input");  // the same checks as elsewhere
    for (const auto& t : outputs) buffer_of(t, kOp, "an output");
    const auto dtype = inputs[0].scalar_type();
    bridge::OpOptions o = options(opts.timeout);
    std::vector<at::Tensor> flat_inputs;
    std::int64_t out_total = 0;
    for (std::size_t r = 0; r < inputs.size(); ++r) {
      TORCH_CHECK(inputs[r].scalar_type() == dtype && outputs[r].scalar_type() == dtype,
                  "ProcessGroup ", kBackendName, ": ", kOp, ": every tensor must have dtype ",
                  dtype);
      flat_inputs.push_back(inputs[r].reshape({-1}));
      o.input_splits.push_back(inputs[r].numel());
      o.output_splits.push_back(outputs[r].numel());
      out_total += outputs[r].numel();
    }
    at::Tensor packed_in = at::cat(flat_inputs);
    at::Tensor packed_out = at::empty({out_total}, packed_in.options());
    std::vector<at::Tensor> outs = outputs;
    auto unpack = [packed_out, outs] {
      std::int64_t offset = 0;
      for (const auto& t : outs) {
        t.view({-1}).copy_(packed_out.narrow(0, offset, t.numel()));
        offset += t.numel();
      }
    };
    return launch(
        OpType::ALLTOALL, outputs,
        [&] {
          return bridge::all_to_all(*group_, buffer_of(packed_out, kOp, "the packed output"),
                                    buffer_of(packed_in, kOp, "the packed input"), o);
        },
        std::move(unpack));
  }

  c10::intrusive_ptr<::c10d::Work> barrier(const ::c10d::BarrierOptions& opts) override {
    const bridge::OpOptions o = options(opts.timeout);
    return launch(OpType::BARRIER, {}, [&] { return bridge::barrier(*group_, o); });
  }

  c10::intrusive_ptr<::c10d::Work> send(std::vector<at::Tensor>& tensors, int dst,
                                        int tag) override {
    bridge::OpOptions o = options(::c10d::kUnsetTimeout);
    o.tag = tag;
    return launch(OpType::SEND, tensors, [&] {
      return bridge::send(*group_, buffers_of(tensors, "send", "a tensor"), dst, o);
    });
  }

  c10::intrusive_ptr<::c10d::Work> recv(std::vector<at::Tensor>& tensors, int src,
                                        int tag) override {
    bridge::OpOptions o = options(::c10d::kUnsetTimeout);
    o.tag = tag;
    return launch(OpType::RECV, tensors, [&] {
      return bridge::recv(*group_, buffers_of(tensors, "recv", "a tensor"), src, o);
    });
  }

  // recv without src: c10d's recv_any_source, whose Work names the sender (sourceRank).
  c10::intrusive_ptr<::c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors,
                                                 int tag) override {
    one_tensor(tensors, "recvAnysource");
    bridge::OpOptions o = options(::c10d::kUnsetTimeout);
    o.tag = tag;
    return launch(OpType::RECVANYSOURCE, tensors, [&] {
      return bridge::recv_any_source(*group_, buffers_of(tensors, "recvAnysource", "the tensor"),
                                     o);
    });
  }

 private:
  void one_tensor(const std::vector<at::Tensor>& tensors, const char* op) const {
    TORCH_CHECK(tensors.size() == 1, "ProcessGroup ", kBackendName, ": ", op,
                ": takes one tensor per process (CPU), got ", tensors.size());
  }

  int root(std::int64_t r, const char* op) const {
    TORCH_CHECK(r >= 0 && r < getSize(), "ProcessGroup ", kBackendName, ": ", op, ": root ", r,
                " is outside the group of size ", getSize());
    return static_cast<int>(r);
  }

  static bridge::OpOptions options(std::chrono::milliseconds timeout) {
    bridge::OpOptions o;
    o.timeout_ms = timeout_ms(timeout);
    return o;
  }

  template <typename Issue>
  c10::intrusive_ptr<::c10d::Work> launch(OpType type, std::vector<at::Tensor> outputs,
                                          Issue&& issue, std::function<void()> finish = {}) {
    std::shared_ptr<bridge::Op> op = translated(issue);
    return c10::make_intrusive<WorkC10d>(getRank(), type, std::move(op), std::move(outputs),
                                         std::move(finish));
  }

  std::shared_ptr<bridge::Group> group_;
};

// torch's store as the group's key-value store.
class TorchStore final : public bridge::KeyValueStore {
 public:
  explicit TorchStore(c10::intrusive_ptr<::c10d::Store> store) : store_(std::move(store)) {}

  void set(const std::string& key, const std::vector<std::uint8_t>& value) override {
    store_->set(key, value);
  }
  std::vector<std::uint8_t> get(const std::string& key) override { return store_->get(key); }
  std::int64_t add(const std::string& key, std::int64_t delta) override {
    return store_->add(key, delta);
  }
  std::vector<std::uint8_t> compare_set(const std::string& key,
                                        const std::vector<std::uint8_t>& expected,
                                        const std::vector<std::uint8_t>& desired) override {
    return store_->compareSet(key, expected, desired);
  }
  bool check(const std::vector<std::string>& keys) override { return store_->check(keys); }
  // Polled with check(), never with torch's wait(): torch 1.13's TCPStore loses its
  // connection's framing when a wait times out as the key arrives ("Stop_waiting response is
  // expected"), and our set-up waits in short slices to watch for failed peers.
  bool wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    auto pause = std::chrono::milliseconds(1);
    for (;;) {
      if (store_->check(keys)) return true;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) return false;
      std::this_thread::sleep_for(
          std::min<std::chrono::steady_clock::duration>(pause, deadline - now));
      pause = std::min(pause * 2, std::chrono::milliseconds(20));
    }
  }
  bool delete_key(const std::string& key) override { return store_->deleteKey(key); }
  std::int64_t num_keys() override { return store_->getNumKeys(); }
  std::chrono::milliseconds timeout() override { return store_->getTimeout(); }
  void set_timeout(std::chrono::milliseconds timeout) override { store_->setTimeout(timeout); }

 private:
  c10::intrusive_ptr<::c10d::Store> store_;
};

// c10d's own store as a torch Store: what env:// gives under c10drun (c10d_torch wraps torch's
// env:// handler), a client of the launcher's store server, which speaks c10d's protocol and
// wants the job's token; torch's TCPStore cannot. Serves torch's users of a store alike: torch's
// barrier and PrefixStore, gloo, and c10d's own group (through TorchStore above). Every wait has
// a deadline: torch's kNoTimeout ("wait for ever") waits this store's timeout instead, and a get
// waits for its key that long first, as torch's TCPStore does.
class C10dStore final : public ::c10d::Store {
 public:
  C10dStore(std::shared_ptr<bridge::KeyValueStore> kv, std::string host, std::string address,
            std::chrono::milliseconds timeout)
      : ::c10d::Store(timeout),
        kv_(std::move(kv)),
        host_(std::move(host)),
        address_(std::move(address)) {}

  const std::string& host() const { return host_; }

  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    translated([&] { kv_->set(key, value); });
  }
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& expected,
                                  const std::vector<uint8_t>& desired) override {
    return translated([&] { return kv_->compare_set(key, expected, desired); });
  }
  // c10d's get waits for the key, up to the timeout setTimeout() gave it.
  std::vector<uint8_t> get(const std::string& key) override {
    return translated([&] { return kv_->get(key); });
  }
  int64_t add(const std::string& key, int64_t value) override {
    return translated([&] { return kv_->add(key, value); });
  }
  bool deleteKey(const std::string& key) override {
    return translated([&] { return kv_->delete_key(key); });
  }
  bool check(const std::vector<std::string>& keys) override {
    return translated([&] { return kv_->check(keys); });
  }
  int64_t getNumKeys() override {
    return translated([&] { return kv_->num_keys(); });
  }
  void setTimeout(const std::chrono::milliseconds& timeout) override {
    ::c10d::Store::setTimeout(timeout);
    translated([&] { kv_->set_timeout(timeout); });
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override {
    const std::chrono::milliseconds limit = timeout == kNoTimeout ? timeout_ : timeout;
    if (!translated([&] { return kv_->wait(keys, limit); })) {
      throw std::runtime_error(c10::str("c10d store ", address_, ": waited ", limit.count(),
                                        " ms for keys [", c10::Join(", ", keys),
                                        "]; still missing"));
    }
  }

 private:
  std::shared_ptr<bridge::KeyValueStore> kv_;
  std::string host_;
  std::string address_;
};

c10::intrusive_ptr<::c10d::ProcessGroup> create_process_group(
    const c10::intrusive_ptr<::c10d::Store>& store, int rank, int world_size,
    std::chrono::milliseconds timeout, const std::string& backend, const std::string& store_host) {
  TORCH_CHECK(store, "ProcessGroup ", kBackendName, ": no store");
  bridge::GroupOptions options;
  options.backend = backend;
  options.timeout = timeout;
  options.store_host = store_host;
  auto group = translated([&] {
    return bridge::make_group(std::make_shared<TorchStore>(store), rank, world_size, options);
  });
  return c10::make_intrusive<ProcessGroupC10d>(std::move(group), rank, world_size);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "c10d as a torch.distributed backend (see c10d_torch)";
  py::module_::import("torch.distributed");
  m.def("create_process_group", &create_process_group, py::arg("store"), py::arg("rank"),
        py::arg("world_size"), py::arg("timeout"), py::arg("backend") = std::string(),
        py::arg("store_host") = std::string(), py::call_guard<py::gil_scoped_release>(),
        "Makes the c10d process group (the function registered with "
        "torch.distributed.Backend.register_backend).");
  m.def(
      "connect_store",
      [](int rank, int world_size, std::chrono::milliseconds timeout,
         const std::string& address) -> c10::intrusive_ptr<::c10d::Store> {
        bridge::ConnectedStore connected =
            translated([&] { return bridge::connect_env_store(rank, world_size, timeout); });
        return c10::make_intrusive<C10dStore>(std::move(connected.store), std::move(connected.host),
                                              address, timeout);
      },
      py::arg("rank"), py::arg("world_size"), py::arg("timeout"), py::arg("address"),
      py::call_guard<py::gil_scoped_release>(),
      "A torch Store that is a client of c10d's store server at MASTER_ADDR:MASTER_PORT "
      "(c10drun's), proving C10D_STORE_TOKEN; `address` names it in messages.");
  m.def(
      "store_host",
      [](const c10::intrusive_ptr<::c10d::Store>& store) -> py::object {
        auto* ours = dynamic_cast<C10dStore*>(store.get());
        if (ours == nullptr) return py::none();
        return py::str(ours->host());
      },
      py::arg("store"), "The host of a store connect_store made, else None.");
  m.def(
      "group_backend",
      [](const c10::intrusive_ptr<::c10d::ProcessGroup>& pg) -> py::object {
        auto* ours = dynamic_cast<ProcessGroupC10d*>(pg.get());
        if (ours == nullptr) return py::none();
        return py::str(bridge::group_backend(ours->group()));
      },
      py::arg("group"), "The c10d backend under a c10d group ('tcp' or 'ici'), else None.");
  m.def(
      "abort",
      [](const c10::intrusive_ptr<::c10d::ProcessGroup>& pg) {
        auto* ours = dynamic_cast<ProcessGroupC10d*>(pg.get());
        TORCH_CHECK(ours != nullptr, "c10d_torch.abort: not a c10d group");
        bridge::abort_group(ours->group());
      },
      py::arg("group"), "Fails every pending and later op of a c10d group.");
}
