// Linear, Dropout and Sequential. See include/c10d/nn.h.
#include <cmath>

#include "c10d/nn.h"
#include "core/check.h"

namespace c10d::inline v1::nn {

Linear::Linear(std::int64_t in_features, std::int64_t out_features, lazy::Generator& gen, bool bias,
               DType dtype)
    : Module("Linear") {
  C10D_CHECK(in_features > 0 && out_features > 0, "Linear({}, {}): sizes must be positive",
             in_features, out_features);
  // torch: kaiming_uniform_(w, a=sqrt(5)) gives bound gain*sqrt(3/fan_in) with
  // gain = sqrt(2/(1+5)), i.e. 1/sqrt(fan_in); the bias uses the same bound.
  const double bound = 1.0 / std::sqrt(static_cast<double>(in_features));
  weight_ = register_parameter(
      "weight", lazy::uniform({out_features, in_features}, gen, -bound, bound, dtype));
  if (bias) {
    bias_ = register_parameter("bias", lazy::uniform({out_features}, gen, -bound, bound, dtype));
  }
}

Tensor Linear::forward(const Tensor& input) {
  Tensor y = lazy::matmul(input, lazy::transpose(weight_));
  return bias_.defined() ? lazy::add(y, bias_) : y;
}

Dropout::Dropout(double p, std::shared_ptr<lazy::Generator> gen)
    : Module("Dropout"), p_(p), gen_(std::move(gen)) {
  C10D_CHECK(p >= 0.0 && p < 1.0, "Dropout: p = {} is outside [0, 1)", p);
  C10D_CHECK(gen_ != nullptr, "Dropout: the generator is null");
}

Tensor Dropout::forward(const Tensor& input) {
  if (!is_training() || p_ == 0.0) return input;
  // keep = (u >= p) with u uniform in [0, 1); the mask is data, not history.
  Tensor u = lazy::uniform(input.shape(), *gen_, 0.0, 1.0, input.dtype());
  Tensor keep = lazy::cast(lazy::ge(u, lazy::scalar(p_, input.dtype())), input.dtype());
  return lazy::mul(input, lazy::mul(keep, lazy::scalar(1.0 / (1.0 - p_), input.dtype())));
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (const auto& [name, child] : named_children()) x = child->forward(x);
  return x;
}

}  // namespace c10d::inline v1::nn
