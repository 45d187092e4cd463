// Backward rules of reductions, matmul, shape ops and the neural-network functions.
// Conventions as in autograd_rules.cc.
#include <numeric>

#include "core/check.h"
#include "lazy/autograd.h"
#include "lazy/autograd_rules.h"

namespace c10d::inline v1::lazy::autograd {
namespace {

using Grads = std::vector<Tensor>;

// The reduced axes of a sum/mean/max over an input of `rank` dims, normalized and flagged.
std::vector<bool> reduced_axes(const SavedOp& op, std::size_t rank) {
  std::vector<bool> reduced(rank, op.axes.empty());
  for (std::int64_t a : op.axes) {
    const std::int64_t n = a < 0 ? a + static_cast<std::int64_t>(rank) : a;
    C10D_CHECK(n >= 0 && n < static_cast<std::int64_t>(rank), "backward of '{}': axis {} of {}",
               op.name, a, rank);
    reduced[static_cast<std::size_t>(n)] = true;
  }
  return reduced;
}

// The result's shape with the reduced axes kept as 1s.
Shape keepdim_shape(const Shape& in, const std::vector<bool>& reduced) {
  Shape s = in;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (reduced[i]) s[i] = 1;
  }
  return s;
}

// g (the reduction's result gradient) broadcast back over the reduced axes.
Tensor expand_reduced(const SavedOp& op, const Tensor& g, const std::vector<bool>& reduced) {
  const Shape& in = op.input_shapes[0];
  return broadcast_to(reshape(g, keepdim_shape(in, reduced)), in);
}

Grads sum_rule(const SavedOp& op, const Tensor& g) {
  return {expand_reduced(op, g, reduced_axes(op, op.input_shapes[0].size()))};
}

Grads mean_rule(const SavedOp& op, const Tensor& g) {
  const Shape& in = op.input_shapes[0];
  const auto reduced = reduced_axes(op, in.size());
  std::int64_t count = 1;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (reduced[i]) count *= in[i];
  }
  return {expand_reduced(op, g * (1.0 / static_cast<double>(count)), reduced)};
}

// The gradient is shared evenly by the elements equal to the maximum (torch's amax).
Grads max_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& a = op.inputs[0];
  const Shape& in = op.input_shapes[0];
  const auto reduced = reduced_axes(op, in.size());
  std::vector<std::int64_t> axes;
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (reduced[i]) axes.push_back(static_cast<std::int64_t>(i));
  }
  const Shape kept = keepdim_shape(in, reduced);
  Tensor is_max = eq(a, reshape(op.outputs[0], kept));
  Tensor ties = sum(cast(is_max, g.dtype()), axes, /*keepdim=*/true);
  Tensor share = div(reshape(g, kept), ties);
  return {where(is_max, share, scalar(0.0, g.dtype()))};
}

// out = a b over the last two axes (both operands have at least 2): da = g b^T, db = a^T g;
// the engine sums broadcast batch axes.
Grads matmul_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& a = op.inputs[0];
  const Tensor& b = op.inputs[1];
  return {op.needs_grad[0] ? matmul(g, transpose(b, -2, -1)) : Tensor(),
          op.needs_grad[1] ? matmul(transpose(a, -2, -1), g) : Tensor()};
}

Grads transpose_rule(const SavedOp& op, const Tensor& g) {
  return {transpose(g, op.dim0, op.dim1)};
}

Grads reshape_rule(const SavedOp& op, const Tensor& g) { return {reshape(g, op.input_shapes[0])}; }

// The engine sums g over the broadcast axes.
Grads broadcast_to_rule(const SavedOp& op, const Tensor& g) {
  (void)op;
  return {g};
}

// Rows [begin, end) get g; the others get zeros.
Grads slice_rows_rule(const SavedOp& op, const Tensor& g) {
  const Shape& in = op.input_shapes[0];
  const std::int64_t rows = in[0];
  const std::int64_t begin = op.begin;  // the op checked 0 <= begin <= end <= rows
  const std::int64_t taken = g.shape()[0];
  const std::int64_t after = rows - begin - taken;
  std::vector<Tensor> parts;
  auto zero_rows = [&](std::int64_t n) {
    Shape s = in;
    s[0] = n;
    return zeros(s, g.dtype());
  };
  if (begin > 0) parts.push_back(zero_rows(begin));
  parts.push_back(g);
  if (after > 0) parts.push_back(zero_rows(after));
  return {parts.size() == 1 ? g : concat(parts, 0)};
}

// Each input gets its own range of g along the axis. slice_rows cuts the first axis only, so
// another axis is swapped to the front and back.
Grads concat_rule(const SavedOp& op, const Tensor& g) {
  const std::int64_t axis = op.axis;
  const Tensor front = axis == 0 ? g : transpose(g, 0, axis);
  Grads grads(op.input_shapes.size());
  std::int64_t at = 0;
  for (std::size_t i = 0; i < op.input_shapes.size(); ++i) {
    const std::int64_t len = op.input_shapes[i][static_cast<std::size_t>(axis)];
    if (op.needs_grad[i]) {
      Tensor part = slice_rows(front, at, at + len);
      grads[i] = axis == 0 ? part : transpose(part, 0, axis);
    }
    at += len;
  }
  return grads;
}

// y = softmax(a): da = y (g - sum(g y)).
Grads softmax_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& y = op.outputs[0];
  return {mul(y, sub(g, sum(mul(g, y), {op.axis}, /*keepdim=*/true)))};
}

// y = log_softmax(a): da = g - exp(y) sum(g).
Grads log_softmax_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& y = op.outputs[0];
  return {sub(g, mul(exp(y), sum(g, {op.axis}, /*keepdim=*/true)))};
}

// loss = mean_i -log_softmax(x)[i, label_i]: dx = (softmax(x) - one_hot(labels)) g / N.
Grads cross_entropy_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& logits = op.inputs[0];
  const Tensor& labels = op.inputs[1];
  const std::int64_t n = logits.shape()[0];
  const std::int64_t classes = logits.shape()[1];
  Tensor p = sub(softmax(logits, 1), one_hot(labels, classes, logits.dtype()));
  return {mul(p, g * (1.0 / static_cast<double>(n))), Tensor()};
}

Rule rule(RuleFn fn, bool inputs, bool outputs) { return Rule{fn, inputs, outputs}; }

}  // namespace

void add_shape_rules(RuleTable& table) {
  table["sum"] = rule(sum_rule, false, false);
  table["mean"] = rule(mean_rule, false, false);
  table["max"] = rule(max_rule, true, true);
  table["matmul"] = rule(matmul_rule, true, false);
  table["transpose"] = rule(transpose_rule, false, false);
  table["reshape"] = rule(reshape_rule, false, false);
  table["broadcast_to"] = rule(broadcast_to_rule, false, false);
  table["slice_rows"] = rule(slice_rows_rule, false, false);
  table["concat"] = rule(concat_rule, false, false);
  table["softmax"] = rule(softmax_rule, false, true);
  table["log_softmax"] = rule(log_softmax_rule, false, true);
  table["cross_entropy"] = rule(cross_entropy_rule, true, false);
}

}  // namespace c10d::inline v1::lazy::autograd
