#include "lazy/ops_common.h"

#include <fmt/format.h>

#include "core/check.h"

namespace c10d::inline v1::lazy {

std::string_view short_dtype(DType t) {
  switch (t) {
    case DType::kFloat32:
      return "f32";
    case DType::kFloat64:
      return "f64";
    case DType::kFloat16:
      return "f16";
    case DType::kBFloat16:
      return "bf16";
    case DType::kInt8:
      return "i8";
    case DType::kUInt8:
      return "u8";
    case DType::kInt16:
      return "i16";
    case DType::kInt32:
      return "i32";
    case DType::kInt64:
      return "i64";
    case DType::kBool:
      return "bool";
  }
  return "?";
}

std::string type_str(const ValueType& t) {
  return fmt::format("{}[{}]", short_dtype(t.dtype), fmt::join(t.shape, ", "));
}

std::string type_str(const Tensor& t) {
  return t.defined() ? type_str(type_of(t)) : std::string("undefined");
}

ValueType type_of(const Tensor& t) {
  C10D_CHECK(t.defined(), "lazy op on an undefined tensor");
  return {t.dtype(), t.shape()};
}

Shape broadcast_shapes(std::string_view op, const std::vector<ValueType>& types) {
  std::size_t rank = 0;
  for (const ValueType& t : types) rank = std::max(rank, t.shape.size());
  Shape out(rank, 1);
  for (const ValueType& t : types) {
    const std::size_t off = rank - t.shape.size();
    for (std::size_t d = 0; d < t.shape.size(); ++d) {
      const std::int64_t v = t.shape[d];
      std::int64_t& o = out[off + d];
      if (v == o || v == 1) continue;
      if (o == 1) {
        o = v;
        continue;
      }
      std::vector<std::string> names;
      for (const ValueType& x : types) names.push_back(type_str(x));
      C10D_THROW(InvalidArgument, "{}: shapes {} do not broadcast", op, fmt::join(names, " and "));
    }
  }
  return out;
}

bool is_arith(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64;
}

DType promote(DType a, DType b) {
  if (a == b) return a;
  if (a == DType::kBool) return b;
  if (b == DType::kBool) return a;
  const bool fa = is_floating_point(a), fb = is_floating_point(b);
  if (fa && fb)
    return (a == DType::kFloat64 || b == DType::kFloat64) ? DType::kFloat64 : DType::kFloat32;
  if (fa) return a;
  if (fb) return b;
  return (a == DType::kInt64 || b == DType::kInt64) ? DType::kInt64 : DType::kInt32;
}

void check_arith(std::string_view op, const ValueType& t) {
  C10D_CHECK(is_arith(t.dtype),
             "{}: operand {} has dtype {}; arithmetic takes float32, float64, int32 or int64 "
             "(cast first)",
             op, type_str(t), dtype_name(t.dtype));
}

std::int64_t normalize_axis(std::string_view op, std::int64_t axis, std::int64_t rank,
                            const ValueType& t) {
  C10D_CHECK(axis >= -rank && axis < rank, "{}: axis {} is out of range for {}", op, axis,
             type_str(t));
  return axis < 0 ? axis + rank : axis;
}

Value cast_value(const Value& v, DType to) {
  const ValueType& t = v.type();
  if (t.dtype == to) return v;
  return {make_node(OpKind::kCast, {v}, {{to, t.shape}}), 0};
}

Tensor constant_scalar(double value, DType dtype) {
  return make_pending({make_node(OpKind::kConstant, {}, {{dtype, {}}}, {}, {value}), 0});
}

}  // namespace c10d::inline v1::lazy
