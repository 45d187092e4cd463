// Reductions: sum, mean, max over axes, and argmax. A reduction node reduces one contiguous
// block of axes (what a fused kernel's [A, R, B] view needs); other axis sets become a chain of
// such nodes, last block first (for mean, a mean of equal-sized means is the mean). keepdim is
// a reshape afterwards.
#include <algorithm>

#include "core/check.h"
#include "lazy/ops_common.h"

namespace c10d::inline v1::lazy {
namespace {

std::vector<std::int64_t> normalize_axes(std::string_view op, const std::vector<std::int64_t>& axes,
                                         const ValueType& t) {
  const auto rank = static_cast<std::int64_t>(t.shape.size());
  std::vector<std::int64_t> out;
  if (axes.empty()) {
    for (std::int64_t d = 0; d < rank; ++d) out.push_back(d);
    return out;
  }
  for (std::int64_t a : axes) out.push_back(normalize_axis(op, a, rank, t));
  std::sort(out.begin(), out.end());
  C10D_CHECK(std::adjacent_find(out.begin(), out.end()) == out.end(),
             "{}: axis repeated in [{}] for {}", op, fmt::join(axes, ", "), type_str(t));
  return out;
}

Value reduce_block(OpKind op, const Value& v, std::int64_t first, std::int64_t last) {
  const ValueType& t = v.type();
  Shape out;
  std::vector<std::int64_t> ints;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(t.shape.size()); ++d) {
    if (d < first || d > last) {
      out.push_back(t.shape[static_cast<std::size_t>(d)]);
    } else {
      ints.push_back(d);
    }
  }
  const DType dtype = t.dtype;
  return {make_node(op, {v}, {{dtype, out}}, std::move(ints)), 0};
}

Tensor reduce(OpKind op, const Tensor& a, const std::vector<std::int64_t>& axes_in, bool keepdim) {
  const std::string_view name = op_name(op);
  const ValueType ta = type_of(a);
  C10D_CHECK(is_arith(ta.dtype) || (op == OpKind::kSum && ta.dtype == DType::kBool),
             "{}: operand {} must be float32, float64, int32 or int64", name, type_str(ta));
  C10D_CHECK(op != OpKind::kMean || is_floating_point(ta.dtype),
             "mean: operand {} must be floating point (cast first)", type_str(ta));
  const std::vector<std::int64_t> axes = normalize_axes(name, axes_in, ta);
  for (std::int64_t d : axes) {
    C10D_CHECK(op != OpKind::kMax || ta.shape[static_cast<std::size_t>(d)] > 0,
               "max: axis {} of {} is empty", d, type_str(ta));
  }
  Value v = value_of(a);
  if (op == OpKind::kSum && !is_floating_point(ta.dtype)) v = cast_value(v, DType::kInt64);
  if (axes.empty()) {
    v = {make_node(OpKind::kIdentity, {v}, {v.type()}), 0};
  } else {
    // Contiguous blocks of axes, reduced from the last one so earlier indices stay valid.
    std::size_t end = axes.size();
    while (end > 0) {
      std::size_t begin = end - 1;
      while (begin > 0 && axes[begin - 1] == axes[begin] - 1) --begin;
      v = reduce_block(op, v, axes[begin], axes[end - 1]);
      end = begin;
    }
  }
  if (keepdim) {
    Shape kept = ta.shape;
    for (std::int64_t d : axes) kept[static_cast<std::size_t>(d)] = 1;
    v = {make_node(OpKind::kReshape, {v}, {{v.type().dtype, kept}}), 0};
  }
  Tensor r = make_result(std::move(v));
  record(name, {a}, {r}, [&](OpRecord& rec) {
    rec.axes = axes_in;
    rec.keepdim = keepdim;
  });
  return r;
}

}  // namespace

Tensor sum(const Tensor& a, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce(OpKind::kSum, a, axes, keepdim);
}
Tensor mean(const Tensor& a, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce(OpKind::kMean, a, axes, keepdim);
}
Tensor max(const Tensor& a, std::vector<std::int64_t> axes, bool keepdim) {
  return reduce(OpKind::kMax, a, axes, keepdim);
}

Tensor argmax(const Tensor& a, std::int64_t axis, bool keepdim) {
  const ValueType ta = type_of(a);
  check_arith("argmax", ta);
  const std::int64_t ax =
      normalize_axis("argmax", axis, static_cast<std::int64_t>(ta.shape.size()), ta);
  C10D_CHECK(ta.shape[static_cast<std::size_t>(ax)] > 0, "argmax: axis {} of {} is empty", ax,
             type_str(ta));
  Shape out = ta.shape;
  out.erase(out.begin() + ax);
  Value v{make_node(OpKind::kArgmax, {value_of(a)}, {{DType::kInt64, out}}, {ax}), 0};
  if (keepdim) {
    Shape kept = ta.shape;
    kept[static_cast<std::size_t>(ax)] = 1;
    v = {make_node(OpKind::kReshape, {v}, {{DType::kInt64, kept}}), 0};
  }
  Tensor r = make_result(std::move(v));
  record("argmax", {a}, {r}, [&](OpRecord& rec) {
    rec.axis = axis;
    rec.keepdim = keepdim;
  });
  return r;
}

}  // namespace c10d::inline v1::lazy
