// Optimizers over lazy tensors, with torch.optim's update rules.
//
// An optimizer holds handles to its parameters (the same TensorImpls the module holds) and its
// own state (momentum buffers, Adam moments, the step count). step() reads each parameter's
// gradient (lazy::grad), skips parameters without one, and writes the new values with
// lazy::assign. The update is written as lazy ops and never reads a value, so in lazy mode the
// whole update joins the pending graph and runs, fused, at the next mark_step() together with
// the forward and backward that produced the gradients. Per-step scalars (the learning rate,
// Adam's bias corrections) enter the graph as data, so every step after the second reuses one
// compiled program. step() records no autograd history.
//
// Thread-safety: none of its own; one training loop at a time. Lifetime: the optimizer keeps
// its parameters' values alive, not the module.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "c10d/export.h"
#include "c10d/nn.h"
#include "c10d/tensor.h"

namespace c10d::inline v1::optim {

class C10D_API Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  virtual void step() = 0;
  // Drops every parameter's gradient (torch's set_to_none=True).
  void zero_grad();
  const std::vector<Tensor>& params() const { return params_; }

  double lr() const { return lr_; }
  void set_lr(double lr);
  std::int64_t steps() const { return steps_; }

  // The state as named tensors ("step", then "<param index>.<buffer>", e.g. "0.exp_avg"),
  // ready for nn::save_state_dict; load_state_dict takes what state_dict gave (same kind of
  // optimizer over parameters of the same shapes) and throws InvalidArgument otherwise.
  nn::NamedTensors state_dict() const;
  void load_state_dict(const nn::NamedTensors& state);

 protected:
  // Every parameter must be a leaf that requires grad; the same tensor twice is an error
  // (InvalidArgument).
  Optimizer(std::vector<Tensor> params, double lr);
  // Sizes buffers_ on the first step (buffer_names() is virtual, so not in the constructor).
  void ensure_buffers();
  // Per parameter, the names of the state buffers this optimizer keeps.
  virtual std::vector<std::string> buffer_names() const = 0;
  // buffers_[param index][buffer index]; undefined until the first step that creates it.
  std::vector<std::vector<Tensor>> buffers_;
  std::int64_t steps_ = 0;

 private:
  std::vector<Tensor> params_;
  double lr_;
};

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;  // needs momentum > 0 and dampening == 0, as torch
  double weight_decay = 0.0;
};

// torch.optim.SGD: g += wd * p; buf = g on the first step, else momentum * buf +
// (1 - dampening) * g; g = nesterov ? g + momentum * buf : buf; p -= lr * g.
class C10D_API SGD : public Optimizer {
 public:
  SGD(std::vector<Tensor> params, SGDOptions options);
  void step() override;
  const SGDOptions& options() const { return options_; }

 protected:
  std::vector<std::string> buffer_names() const override;

 private:
  SGDOptions options_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;  // Adam: L2 added to the gradient; AdamW: decoupled
};

// torch.optim.Adam (amsgrad off): t += 1; g += wd * p; m = b1 m + (1 - b1) g;
// v = b2 v + (1 - b2) g^2; p -= lr / (1 - b1^t) * m / (sqrt(v) / sqrt(1 - b2^t) + eps).
class C10D_API Adam : public Optimizer {
 public:
  Adam(std::vector<Tensor> params, AdamOptions options);
  void step() override;
  const AdamOptions& options() const { return options_; }

 protected:
  Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled);
  std::vector<std::string> buffer_names() const override;

 private:
  AdamOptions options_;
  bool decoupled_;
};

// AdamW's options: Adam's, with torch's default weight_decay of 0.01.
struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.01;
};

// torch.optim.AdamW: as Adam, but p *= 1 - lr * wd before the update instead of adding wd * p
// to the gradient.
class C10D_API AdamW : public Adam {
 public:
  AdamW(std::vector<Tensor> params, AdamWOptions options);
};

}  // namespace c10d::inline v1::optim
