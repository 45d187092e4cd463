// Modules: named, ordered parameters and buffers over lazy tensors, as torch.nn.Module.
//
// A Module owns its parameters and buffers as Tensor handles (they share their TensorImpl with
// every copy, so an optimizer, DDP or a user holding a parameter sees lazy::assign() writes),
// and its children as shared_ptr<Module>. Order is registration order, everywhere:
// named_parameters() lists a module's own parameters, then each child's recursively with the
// child's name and a dot in front ("0.weight", "0.bias", "2.weight"), exactly as torch does;
// state_dict() lists, per module, parameters then buffers, then the children. DDP relies on
// this order being the same on every rank for the same model code.
//
// Parameters are leaves that require grad (lazy::set_requires_grad); buffers do not. Modules
// build their forward pass from lazy ops, so a forward, its backward and the optimizer step
// fuse into one step.
//
// Thread-safety: none of its own; a module is used by one training loop at a time.
// Lifetime: a parent keeps its children alive; handles returned by parameters() stay valid
// (and keep their values) after the module is gone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "c10d/export.h"
#include "c10d/lazy.h"
#include "c10d/tensor.h"

namespace c10d::inline v1::nn {

// Named tensors in a fixed order: what state_dict() returns and load_state_dict() takes.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class C10D_API Module {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The single-tensor forward pass used by Sequential. Modules with other signatures may leave
  // it; calling it then throws Unsupported.
  virtual Tensor forward(const Tensor& input);
  Tensor operator()(const Tensor& input) { return forward(input); }

  const std::string& type_name() const { return type_name_; }

  // Recursive, in registration order, with dotted names.
  NamedTensors named_parameters() const;
  std::vector<Tensor> parameters() const;
  NamedTensors named_buffers() const;
  // The direct children, in registration order.
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }

  // Training mode (the default) or evaluation mode, for this module and all below it.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Drops every parameter's gradient (torch's set_to_none=True, the default since 2.0).
  void zero_grad();

  // Parameters then buffers per module, then the children (torch's order and names).
  NamedTensors state_dict() const;
  // Assigns each entry to the tensor of the same name. With `strict`, missing and unexpected
  // names are errors. A shape or dtype mismatch is always an InvalidArgument naming the entry.
  void load_state_dict(const NamedTensors& state, bool strict = true);

 protected:
  // Registration: `name` must be non-empty, contain no '.', and be new in this module.
  // A parameter must have a floating dtype; it is made a leaf that requires grad (the result
  // of an op is detached first; a leaf keeps its impl, so modules may share one). Returns the
  // registered handle.
  Tensor register_parameter(const std::string& name, Tensor value);
  Tensor register_buffer(const std::string& name, Tensor value);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  // Called by train() on each module; modules with mode-dependent state override it.
  virtual void on_train(bool on) { (void)on; }

 private:
  void check_new_name(const std::string& name) const;
  void add_child(const std::string& name, std::shared_ptr<Module> module);
  void collect(const std::string& prefix, bool parameters, bool buffers, NamedTensors& out) const;

  std::string type_name_;
  bool training_ = true;
  NamedTensors parameters_;
  NamedTensors buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// y = x W^T + b, with W [out, in] and b [out] initialized as torch does: Kaiming-uniform with
// a = sqrt(5), i.e. both uniform in [-1/sqrt(in), 1/sqrt(in)], drawn from `gen` (weight first).
class C10D_API Linear : public Module {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, lazy::Generator& gen,
         bool bias = true, DType dtype = DType::kFloat32);
  Tensor forward(const Tensor& input) override;
  const Tensor& weight() const { return weight_; }
  const Tensor& bias() const { return bias_; }  // undefined without a bias

 private:
  Tensor weight_;
  Tensor bias_;
};

class C10D_API ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& input) override { return lazy::relu(input); }
};

class C10D_API Tanh : public Module {
 public:
  Tanh() : Module("Tanh") {}
  Tensor forward(const Tensor& input) override { return lazy::tanh(input); }
};

// Zeroes each element with probability p in training mode and scales the rest by 1/(1-p);
// the identity in evaluation mode. Draws from its own generator (shared with the caller).
class C10D_API Dropout : public Module {
 public:
  Dropout(double p, std::shared_ptr<lazy::Generator> gen);
  Tensor forward(const Tensor& input) override;
  double p() const { return p_; }

 private:
  double p_;
  std::shared_ptr<lazy::Generator> gen_;
};

// Runs its children in order; they are named "0", "1", ...
class C10D_API Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  template <typename M>
  std::shared_ptr<M> push_back(std::shared_ptr<M> module) {
    return register_module(std::to_string(named_children().size()), std::move(module));
  }
  std::size_t size() const { return named_children().size(); }
  Tensor forward(const Tensor& input) override;
};

// Saves `module.state_dict()` to `path` in the format drawn in src/nn/state_dict_format.h
// (magic "C10DSDCT", version, then per entry: name, dtype, shape, little-endian bytes).
// The file is written whole or not at all: `<path>.tmp`, flushed to disk, renamed onto `path`.
// Throws InvalidArgument naming the file when it cannot be written (or `path` is a directory
// or device).
C10D_API void save_state_dict(const Module& module, const std::string& path);
C10D_API void save_state_dict(const NamedTensors& state, const std::string& path);
// Reads such a file. A missing, truncated or corrupt file, or one that is not a regular file
// (a device, FIFO or directory), is an InvalidArgument naming the file and what is wrong with
// it; reading costs at most the file's size. The loaded values then go through
// Module::load_state_dict.
C10D_API NamedTensors read_state_dict(const std::string& path);
C10D_API void load_state_dict(Module& module, const std::string& path, bool strict = true);

}  // namespace c10d::inline v1::nn
