// Backward rules of the elementwise ops, and the table of all rules (find_rule).
//
// A rule turns the gradient of an op's output, g, into one gradient per input, written with the
// public lazy ops so gradients are lazy tensors that fuse with the rest of the step. Rules may
// give the broadcast shape and the promoted dtype; the engine sums and casts back to each
// input's (autograd.h). Each computes only the gradients whose needs_grad is set, so eager mode
// does no wasted work. Where torch defines a value at a kink (abs at 0, relu at 0, maximum at a
// tie), these follow torch.
#include "lazy/autograd_rules.h"

#include <unordered_map>

#include "core/check.h"
#include "lazy/autograd.h"

namespace c10d::inline v1::lazy::autograd {
namespace {

using Grads = std::vector<Tensor>;

Tensor zero_like_dtype(const Tensor& g) { return scalar(0.0, g.dtype()); }

Grads add_rule(const SavedOp& op, const Tensor& g) {
  (void)op;
  return {g, g};
}

Grads sub_rule(const SavedOp& op, const Tensor& g) {
  return {g, op.needs_grad[1] ? neg(g) : Tensor()};
}

Grads mul_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& a = op.inputs[0];
  const Tensor& b = op.inputs[1];
  return {op.needs_grad[0] ? mul(g, b) : Tensor(), op.needs_grad[1] ? mul(g, a) : Tensor()};
}

// d(a/b) = g/b, -g*a/b^2.
Grads div_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& a = op.inputs[0];
  const Tensor& b = op.inputs[1];
  return {op.needs_grad[0] ? div(g, b) : Tensor(),
          op.needs_grad[1] ? neg(div(mul(g, a), mul(b, b))) : Tensor()};
}

// torch: the winner takes g, a tie splits it in half.
Tensor extremum_grad(const Tensor& g, const Tensor& mine, const Tensor& other, bool is_max) {
  Tensor wins = is_max ? gt(mine, other) : lt(mine, other);
  return where(eq(mine, other), g * 0.5, where(wins, g, zero_like_dtype(g)));
}

Grads maximum_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& a = op.inputs[0];
  const Tensor& b = op.inputs[1];
  return {op.needs_grad[0] ? extremum_grad(g, a, b, true) : Tensor(),
          op.needs_grad[1] ? extremum_grad(g, b, a, true) : Tensor()};
}

Grads minimum_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& a = op.inputs[0];
  const Tensor& b = op.inputs[1];
  return {op.needs_grad[0] ? extremum_grad(g, a, b, false) : Tensor(),
          op.needs_grad[1] ? extremum_grad(g, b, a, false) : Tensor()};
}

Grads neg_rule(const SavedOp& op, const Tensor& g) {
  (void)op;
  return {neg(g)};
}

// sign(a) * g, with sign(0) = 0.
Grads abs_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& a = op.inputs[0];
  const Tensor zero = zero_like_dtype(g);
  return {where(gt(a, zero), g, where(lt(a, zero), neg(g), zero))};
}

Grads exp_rule(const SavedOp& op, const Tensor& g) { return {mul(g, op.outputs[0])}; }

Grads log_rule(const SavedOp& op, const Tensor& g) { return {div(g, op.inputs[0])}; }

// d sqrt(a) = g / (2 sqrt(a)).
Grads sqrt_rule(const SavedOp& op, const Tensor& g) { return {div(g * 0.5, op.outputs[0])}; }

// d tanh = g (1 - y^2).
Grads tanh_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& y = op.outputs[0];
  return {mul(g, 1.0 - mul(y, y))};
}

// d sigmoid = g y (1 - y).
Grads sigmoid_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& y = op.outputs[0];
  return {mul(g, mul(y, 1.0 - y))};
}

// torch: the gradient passes where the result is positive.
Grads relu_rule(const SavedOp& op, const Tensor& g) {
  const Tensor zero = zero_like_dtype(g);
  return {where(gt(op.outputs[0], zero), g, zero)};
}

// d a^e = g e a^(e-1); e = 0 gives zero (torch).
Grads pow_rule(const SavedOp& op, const Tensor& g) {
  const double e = op.exponent;
  if (e == 0.0) return {g * 0.0};
  if (e == 1.0) return {g};
  if (e == 2.0) return {mul(g, op.inputs[0] * 2.0)};
  return {mul(g, pow(op.inputs[0], e - 1.0) * e)};
}

Grads where_rule(const SavedOp& op, const Tensor& g) {
  const Tensor& cond = op.inputs[0];
  const Tensor zero = zero_like_dtype(g);
  return {Tensor(), op.needs_grad[1] ? where(cond, g, zero) : Tensor(),
          op.needs_grad[2] ? where(cond, zero, g) : Tensor()};
}

// The engine casts g back to the input's dtype.
Grads cast_rule(const SavedOp& op, const Tensor& g) {
  (void)op;
  return {g};
}

Rule rule(RuleFn fn, bool inputs, bool outputs) { return Rule{fn, inputs, outputs}; }

}  // namespace

void add_elementwise_rules(RuleTable& table) {
  table["add"] = rule(add_rule, false, false);
  table["sub"] = rule(sub_rule, false, false);
  table["mul"] = rule(mul_rule, true, false);
  table["div"] = rule(div_rule, true, false);
  table["maximum"] = rule(maximum_rule, true, false);
  table["minimum"] = rule(minimum_rule, true, false);
  table["neg"] = rule(neg_rule, false, false);
  table["abs"] = rule(abs_rule, true, false);
  table["exp"] = rule(exp_rule, false, true);
  table["log"] = rule(log_rule, true, false);
  table["sqrt"] = rule(sqrt_rule, false, true);
  table["tanh"] = rule(tanh_rule, false, true);
  table["sigmoid"] = rule(sigmoid_rule, false, true);
  table["relu"] = rule(relu_rule, false, true);
  table["pow"] = rule(pow_rule, true, false);
  table["where"] = rule(where_rule, true, false);
  table["cast"] = rule(cast_rule, false, false);
  // Not differentiable: their results never require grad.
  for (const char* op : {"eq", "ne", "lt", "le", "gt", "ge", "argmax", "one_hot"}) {
    table[op] = Rule{};
  }
}

const Rule* find_rule(std::string_view op) {
  static const RuleTable table = [] {
    RuleTable t;
    add_elementwise_rules(t);
    add_shape_rules(t);
    return t;
  }();
  auto it = table.find(op);
  return it == table.end() ? nullptr : &it->second;
}

}  // namespace c10d::inline v1::lazy::autograd
