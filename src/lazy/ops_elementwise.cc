// Elementwise ops: unary, binary with numpy broadcasting, comparisons, where, cast, and the
// operators on Tensor. Each makes one IR node (plus casts for dtype promotion) and records
// itself for autograd.
#include <cmath>

#include "core/check.h"
#include "lazy/ops_common.h"

namespace c10d::inline v1::lazy {
namespace {

bool float_math(OpKind op) {
  return op == OpKind::kExp || op == OpKind::kLog || op == OpKind::kSqrt || op == OpKind::kTanh ||
         op == OpKind::kSigmoid;
}

bool is_comparison(OpKind op) { return op >= OpKind::kEq && op <= OpKind::kGe; }

Tensor unary(OpKind op, const Tensor& a, double real = 0) {
  const std::string_view name = op_name(op);
  const ValueType ta = type_of(a);
  check_arith(name, ta);
  DType out = ta.dtype;
  if (float_math(op) && !is_floating_point(out)) out = DType::kFloat32;
  if (op == OpKind::kPow && !is_floating_point(out) && (real < 0 || real != std::floor(real))) {
    out = DType::kFloat32;
  }
  Value v = cast_value(value_of(a), out);
  std::vector<double> reals;
  if (op == OpKind::kPow) reals.push_back(real);
  Tensor r = make_result({make_node(op, {v}, {{out, ta.shape}}, {}, std::move(reals)), 0});
  record(name, {a}, {r}, [&](OpRecord& rec) { rec.exponent = real; });
  return r;
}

Tensor binary(OpKind op, const Tensor& a, const Tensor& b) {
  const std::string_view name = op_name(op);
  const ValueType ta = type_of(a), tb = type_of(b);
  const bool eq_ne = op == OpKind::kEq || op == OpKind::kNe;
  if (!(eq_ne && ta.dtype == DType::kBool && tb.dtype == DType::kBool)) {
    check_arith(name, ta);
    check_arith(name, tb);
  }
  const Shape shape = broadcast_shapes(name, {ta, tb});
  DType compute = promote(ta.dtype, tb.dtype);
  if (op == OpKind::kDiv && !is_floating_point(compute)) compute = DType::kFloat32;
  const DType out = is_comparison(op) ? DType::kBool : compute;
  Value va = cast_value(value_of(a), compute), vb = cast_value(value_of(b), compute);
  Tensor r = make_result({make_node(op, {va, vb}, {{out, shape}}), 0});
  record(name, {a, b}, r);
  return r;
}

// The dtype a double operand takes next to `a`.
DType scalar_dtype(const Tensor& a, double v) {
  const DType t = a.dtype();
  if (is_floating_point(t) || v == std::floor(v)) return t;
  return DType::kFloat32;
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) { return binary(OpKind::kAdd, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(OpKind::kSub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(OpKind::kMul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(OpKind::kDiv, a, b); }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpKind::kMaximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpKind::kMinimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(OpKind::kEq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(OpKind::kNe, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(OpKind::kLt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(OpKind::kLe, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(OpKind::kGt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(OpKind::kGe, a, b); }
Tensor neg(const Tensor& a) { return unary(OpKind::kNeg, a); }
Tensor abs(const Tensor& a) { return unary(OpKind::kAbs, a); }
Tensor exp(const Tensor& a) { return unary(OpKind::kExp, a); }
Tensor log(const Tensor& a) { return unary(OpKind::kLog, a); }
Tensor sqrt(const Tensor& a) { return unary(OpKind::kSqrt, a); }
Tensor tanh(const Tensor& a) { return unary(OpKind::kTanh, a); }
Tensor sigmoid(const Tensor& a) { return unary(OpKind::kSigmoid, a); }
Tensor relu(const Tensor& a) { return unary(OpKind::kRelu, a); }
Tensor pow(const Tensor& a, double exponent) { return unary(OpKind::kPow, a, exponent); }

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const ValueType tc = type_of(cond), ta = type_of(a), tb = type_of(b);
  C10D_CHECK(tc.dtype == DType::kBool || is_arith(tc.dtype),
             "where: condition {} must be bool or numeric", type_str(tc));
  if (!(ta.dtype == DType::kBool && tb.dtype == DType::kBool)) {
    check_arith("where", ta);
    check_arith("where", tb);
  }
  const Shape shape = broadcast_shapes("where", {tc, ta, tb});
  const DType out = promote(ta.dtype, tb.dtype);
  Value vc = value_of(cond);
  if (tc.dtype != DType::kBool)
    vc = {make_node(OpKind::kCast, {vc}, {{DType::kBool, tc.shape}}), 0};
  Value va = cast_value(value_of(a), out), vb = cast_value(value_of(b), out);
  Tensor r = make_result({make_node(OpKind::kWhere, {vc, va, vb}, {{out, shape}}), 0});
  record("where", {cond, a, b}, r);
  return r;
}

Tensor cast(const Tensor& a, DType dtype) {
  const ValueType ta = type_of(a);
  Tensor r = make_result({make_node(OpKind::kCast, {value_of(a)}, {{dtype, ta.shape}}), 0});
  record("cast", {a}, {r}, [&](OpRecord& rec) { rec.dtype = dtype; });
  return r;
}

}  // namespace c10d::inline v1::lazy

namespace c10d::inline v1 {

Tensor operator+(const Tensor& a, const Tensor& b) { return lazy::add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return lazy::sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return lazy::mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return lazy::div(a, b); }
Tensor operator-(const Tensor& a) { return lazy::neg(a); }
Tensor operator+(const Tensor& a, double b) {
  return lazy::add(a, lazy::constant_scalar(b, lazy::scalar_dtype(a, b)));
}
Tensor operator-(const Tensor& a, double b) {
  return lazy::sub(a, lazy::constant_scalar(b, lazy::scalar_dtype(a, b)));
}
Tensor operator*(const Tensor& a, double b) {
  return lazy::mul(a, lazy::constant_scalar(b, lazy::scalar_dtype(a, b)));
}
Tensor operator/(const Tensor& a, double b) {
  return lazy::div(a, lazy::constant_scalar(b, lazy::scalar_dtype(a, b)));
}
Tensor operator+(double a, const Tensor& b) {
  return lazy::add(lazy::constant_scalar(a, lazy::scalar_dtype(b, a)), b);
}
Tensor operator-(double a, const Tensor& b) {
  return lazy::sub(lazy::constant_scalar(a, lazy::scalar_dtype(b, a)), b);
}
Tensor operator*(double a, const Tensor& b) {
  return lazy::mul(lazy::constant_scalar(a, lazy::scalar_dtype(b, a)), b);
}
Tensor operator/(double a, const Tensor& b) {
  return lazy::div(lazy::constant_scalar(a, lazy::scalar_dtype(b, a)), b);
}

}  // namespace c10d::inline v1
