// Optimizer base, SGD, Adam and AdamW. See include/c10d/optim.h.
//
// Every update below is lazy ops plus lazy::assign under NoGradGuard: nothing here reads a
// value, so the update joins the pending graph. Values that change from step to step (the
// learning rate, Adam's bias corrections) enter as 0-d data tensors rather than constants, so
// they are inputs of the compiled program, not part of its hash.
#include <cmath>
#include <set>

#include "c10d/optim.h"
#include "core/check.h"
#include "core/parse.h"

namespace c10d::inline v1::optim {
namespace {

// A 0-d tensor holding `v` as data, of a floating dtype.
Tensor data_scalar(double v, DType dtype) {
  if (dtype == DType::kFloat64) {
    Tensor t = Tensor::empty({}, DType::kFloat64);
    *t.data<double>() = v;
    return t;
  }
  Tensor t = Tensor::empty({}, DType::kFloat32);
  *t.data<float>() = static_cast<float>(v);
  return dtype == DType::kFloat32 ? t : lazy::cast(t, dtype);
}

// The scalars of one step, made once per dtype that occurs among the parameters.
class StepScalars {
 public:
  explicit StepScalars(std::vector<double> values) : values_(std::move(values)) {}
  const Tensor& get(std::size_t which, DType dtype) {
    auto& slot = made_[static_cast<std::size_t>(dtype)];
    if (slot.empty()) {
      for (double v : values_) slot.push_back(data_scalar(v, dtype));
    }
    return slot[which];
  }

 private:
  std::vector<double> values_;
  std::vector<Tensor> made_[kNumDTypes];
};

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> params, double lr) : params_(std::move(params)) {
  set_lr(lr);
  std::set<const TensorImpl*> seen;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    const Tensor& p = params_[i];
    C10D_CHECK(p.defined() && lazy::requires_grad(p) && lazy::is_leaf(p),
               "optimizer: parameter {} is undefined, not a leaf, or does not require grad", i);
    C10D_CHECK(seen.insert(p.impl().get()).second, "optimizer: parameter {} appears twice", i);
  }
}

void Optimizer::set_lr(double lr) {
  C10D_CHECK(lr >= 0.0 && std::isfinite(lr), "optimizer: learning rate {} is invalid", lr);
  lr_ = lr;
}

void Optimizer::zero_grad() {
  for (const Tensor& p : params_) lazy::set_grad(p, Tensor());
}

void Optimizer::ensure_buffers() {
  if (buffers_.size() != params_.size()) {
    buffers_.assign(params_.size(), std::vector<Tensor>(buffer_names().size()));
  }
}

nn::NamedTensors Optimizer::state_dict() const {
  nn::NamedTensors out;
  Tensor step = Tensor::empty({}, DType::kInt64);
  *step.data<std::int64_t>() = steps_;
  out.emplace_back("step", step);
  const auto names = buffer_names();
  for (std::size_t i = 0; i < buffers_.size(); ++i) {
    for (std::size_t b = 0; b < names.size(); ++b) {
      if (buffers_[i][b].defined()) {
        out.emplace_back(std::to_string(i) + "." + names[b], buffers_[i][b]);
      }
    }
  }
  return out;
}

void Optimizer::load_state_dict(const nn::NamedTensors& state) {
  const auto names = buffer_names();
  std::vector<std::vector<Tensor>> loaded(params_.size(), std::vector<Tensor>(names.size()));
  std::int64_t steps = -1;
  for (const auto& [name, t] : state) {
    C10D_CHECK(t.defined(), "optimizer load_state_dict: entry '{}' is undefined", name);
    if (name == "step") {
      C10D_CHECK(t.dtype() == DType::kInt64 && t.numel() == 1,
                 "optimizer load_state_dict: 'step' must be one int64, not {}", t.to_string());
      steps = *t.data<std::int64_t>();
      continue;
    }
    const auto dot = name.find('.');
    C10D_CHECK(dot != std::string::npos && !params_.empty(),
               "optimizer load_state_dict: unexpected entry '{}'", name);
    // "<parameter index>.<buffer>", from a file: the index is the whole text before the dot
    // (std::stoul took " 3", "+3" and "3x", and wrapped "-1"), and names a parameter.
    const auto parsed =
        core::parse_uint(std::string_view(name).substr(0, dot), 0, params_.size() - 1);
    C10D_CHECK(parsed.value,
               "optimizer load_state_dict: unexpected entry '{}' (parameter index {})", name,
               parsed.error);
    const auto index = static_cast<std::size_t>(*parsed.value);
    std::size_t b = 0;
    while (b < names.size() && names[b] != name.substr(dot + 1)) ++b;
    C10D_CHECK(b < names.size(), "optimizer load_state_dict: unexpected entry '{}'", name);
    const Tensor& p = params_[index];
    C10D_CHECK(t.shape() == p.shape() && t.dtype() == p.dtype(),
               "optimizer load_state_dict: entry '{}' is {} but parameter {} is {}", name,
               t.to_string(), index, p.to_string());
    loaded[index][b] = t.clone();
  }
  C10D_CHECK(steps >= 0, "optimizer load_state_dict: no 'step' entry");
  steps_ = steps;
  buffers_ = std::move(loaded);
}

SGD::SGD(std::vector<Tensor> params, SGDOptions options)
    : Optimizer(std::move(params), options.lr), options_(options) {
  C10D_CHECK(options.momentum >= 0 && options.dampening >= 0 && options.weight_decay >= 0,
             "SGD: momentum {}, dampening {} and weight_decay {} must not be negative",
             options.momentum, options.dampening, options.weight_decay);
  C10D_CHECK(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
             "SGD: nesterov needs momentum > 0 and dampening 0 (momentum {}, dampening {})",
             options.momentum, options.dampening);
}

std::vector<std::string> SGD::buffer_names() const { return {"momentum_buffer"}; }

void SGD::step() {
  lazy::NoGradGuard no_grad;
  ensure_buffers();
  ++steps_;
  StepScalars scalars({lr()});
  const SGDOptions& o = options_;
  for (std::size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    Tensor d = lazy::grad(p);
    if (!d.defined()) continue;
    if (o.weight_decay != 0) d = lazy::add(d, p * o.weight_decay);
    if (o.momentum != 0) {
      Tensor& buf = buffers_[i][0];
      if (!buf.defined()) {
        buf = lazy::detach(d);  // torch: the first buffer is the gradient itself
      } else {
        buf = lazy::add(buf * o.momentum, o.dampening == 0 ? d : d * (1.0 - o.dampening));
      }
      d = o.nesterov ? lazy::add(d, buf * o.momentum) : buf;
    }
    lazy::assign(p, lazy::sub(p, lazy::mul(d, scalars.get(0, p.dtype()))));
  }
}

Adam::Adam(std::vector<Tensor> params, AdamOptions options)
    : Adam(std::move(params), options, /*decoupled=*/false) {}

Adam::Adam(std::vector<Tensor> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params), options.lr), options_(options), decoupled_(decoupled) {
  C10D_CHECK(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1,
             "{}: betas ({}, {}) must be in [0, 1)", decoupled ? "AdamW" : "Adam", options.beta1,
             options.beta2);
  C10D_CHECK(options.eps >= 0 && options.weight_decay >= 0,
             "{}: eps {} and weight_decay {} must not be negative", decoupled ? "AdamW" : "Adam",
             options.eps, options.weight_decay);
}

std::vector<std::string> Adam::buffer_names() const { return {"exp_avg", "exp_avg_sq"}; }

void Adam::step() {
  lazy::NoGradGuard no_grad;
  ensure_buffers();
  ++steps_;
  const AdamOptions& o = options_;
  const double t = static_cast<double>(steps_);
  const double bc1 = 1.0 - std::pow(o.beta1, t);
  const double bc2 = 1.0 - std::pow(o.beta2, t);
  enum { kStepSize, kSqrtBc2, kDecay };
  StepScalars scalars({lr() / bc1, std::sqrt(bc2), 1.0 - lr() * o.weight_decay});
  for (std::size_t i = 0; i < params().size(); ++i) {
    const Tensor& p = params()[i];
    Tensor g = lazy::grad(p);
    if (!g.defined()) continue;
    const DType dt = p.dtype();
    Tensor base = p;
    if (o.weight_decay != 0) {
      if (decoupled_) {
        base = lazy::mul(p, scalars.get(kDecay, dt));
      } else {
        g = lazy::add(g, p * o.weight_decay);
      }
    }
    Tensor& m = buffers_[i][0];
    Tensor& v = buffers_[i][1];
    // The moments start at zero, so the first step's are just the scaled gradient terms.
    m = m.defined() ? lazy::add(m * o.beta1, g * (1.0 - o.beta1)) : g * (1.0 - o.beta1);
    Tensor g2 = lazy::mul(g, g) * (1.0 - o.beta2);
    v = v.defined() ? lazy::add(v * o.beta2, g2) : g2;
    Tensor denom = lazy::div(lazy::sqrt(v), scalars.get(kSqrtBc2, dt)) + o.eps;
    Tensor update = lazy::mul(lazy::div(m, denom), scalars.get(kStepSize, dt));
    lazy::assign(p, lazy::sub(base, update));
  }
}

AdamW::AdamW(std::vector<Tensor> params, AdamWOptions o)
    : Adam(std::move(params),
           AdamOptions{.lr = o.lr,
                       .beta1 = o.beta1,
                       .beta2 = o.beta2,
                       .eps = o.eps,
                       .weight_decay = o.weight_decay},
           /*decoupled=*/true) {}

}  // namespace c10d::inline v1::optim
