// Creation, random, the collective node, assign and detach.
#include <cmath>

#include "c10d/process_group.h"
#include "core/check.h"
#include "core/shape.h"
#include "lazy/ops_common.h"

namespace c10d::inline v1::lazy {
namespace {

Tensor constant(std::string_view op, const Shape& shape, double value, DType dtype) {
  core::checked_numel(op, shape, dtype);  // names "zeros", not make_node's "constant"
  return make_result({make_node(OpKind::kConstant, {}, {{dtype, shape}}, {}, {value}), 0});
}

Tensor random(OpKind op, const Shape& shape, Generator& gen, double a, double b, DType dtype) {
  const std::string_view name = op_name(op);
  C10D_CHECK(is_floating_point(dtype) && is_arith(dtype), "{}: dtype {} must be float32 or float64",
             name, dtype_name(dtype));
  const auto n = static_cast<std::uint64_t>(core::checked_numel(name, shape, dtype));
  auto node = make_node(op, {}, {{dtype, shape}}, {}, {a, b});
  node->seed = gen.seed();
  // Normal draws numbers in pairs (Box-Muller).
  node->counter = gen.advance(op == OpKind::kNormal ? (n + 1) / 2 * 2 : n);
  return make_result({std::move(node), 0});
}

}  // namespace

Tensor zeros(const Shape& shape, DType dtype) { return constant("zeros", shape, 0.0, dtype); }
Tensor ones(const Shape& shape, DType dtype) { return constant("ones", shape, 1.0, dtype); }
Tensor full(const Shape& shape, double value, DType dtype) {
  return constant("full", shape, value, dtype);
}
Tensor scalar(double value, DType dtype) { return constant("scalar", {}, value, dtype); }

Tensor arange(double start, double end, double step, DType dtype) {
  C10D_CHECK(step != 0 && std::isfinite(start) && std::isfinite(end) && std::isfinite(step),
             "arange: bad range start {} end {} step {}", start, end, step);
  const double count = std::ceil((end - start) / step);
  // Converting a count past int64 to it is undefined; make_node bounds the bytes.
  C10D_CHECK(count < 0x1p62, "arange: start {} end {} step {} makes {} elements", start, end, step,
             count);
  const auto n = static_cast<std::int64_t>(count > 0 ? count : 0);
  return make_result({make_node(OpKind::kArange, {}, {{dtype, {n}}}, {}, {start, step}), 0});
}

Tensor uniform(const Shape& shape, Generator& gen, double low, double high, DType dtype) {
  C10D_CHECK(low <= high, "uniform: low {} is above high {}", low, high);
  return random(OpKind::kUniform, shape, gen, low, high, dtype);
}

Tensor normal(const Shape& shape, Generator& gen, double mean, double stddev, DType dtype) {
  C10D_CHECK(stddev >= 0, "normal: stddev {} is negative", stddev);
  return random(OpKind::kNormal, shape, gen, mean, stddev, dtype);
}

std::vector<Tensor> all_reduce(const std::vector<Tensor>& tensors, ReduceOp op, double scale,
                               std::shared_ptr<ProcessGroup> group) {
  C10D_CHECK(group != nullptr, "all_reduce: no process group");
  C10D_CHECK(!tensors.empty(), "all_reduce: no tensors");
  std::vector<Value> operands;
  std::vector<ValueType> types;
  for (const Tensor& t : tensors) {
    const ValueType tt = type_of(t);
    C10D_CHECK(scale == 1.0 || is_floating_point(tt.dtype),
               "all_reduce: scale {} needs floating tensors, not {}", scale, type_str(tt));
    operands.push_back(value_of(t));
    types.push_back(tt);
  }
  auto node =
      make_node(OpKind::kAllReduce, std::move(operands), std::move(types),
                {static_cast<std::int64_t>(op)}, {scale}, is_lazy() ? last_collective() : nullptr);
  node->group = group;
  if (is_lazy()) set_last_collective(node);
  std::vector<Tensor> out = make_results(node);
  record("all_reduce", tensors, out, [&](OpRecord& rec) {
    rec.scalar = scale;
    rec.reduce_op = op;
    rec.group = group;
  });
  return out;
}

void assign(const Tensor& dst, const Tensor& value) {
  const ValueType td = type_of(dst), tv = type_of(value);
  C10D_CHECK(td.dtype == tv.dtype && td.shape == tv.shape, "assign: value {} does not match {}",
             type_str(tv), type_str(td));
  if (dst.impl() == value.impl()) return;
  const auto& vi = value.impl();
  if (vi->is_pending()) {
    if (auto* lv = dynamic_cast<const LazyValue*>(vi->pending().get())) {
      dst.impl()->set_pending(std::make_shared<LazyValue>(lv->value()));
      register_pending(dst.impl());
      return;
    }
  }
  vi->materialize();
  dst.impl()->set_storage(vi->storage(), vi->offset_bytes());
}

Tensor detach(const Tensor& a) {
  if (!a.defined()) return {};
  const auto& impl = a.impl();
  if (impl->is_pending()) {
    if (auto* lv = dynamic_cast<const LazyValue*>(impl->pending().get()))
      return make_pending(lv->value());
    impl->materialize();
  }
  return Tensor(std::make_shared<TensorImpl>(impl->dtype(), impl->shape(), impl->storage(),
                                             impl->offset_bytes()));
}

}  // namespace c10d::inline v1::lazy
