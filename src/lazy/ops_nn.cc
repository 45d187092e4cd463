// Neural-network functions, built of the other ops (so they fuse like them) and recorded for
// autograd as themselves: the ops inside run with recording suspended.
#include "core/check.h"
#include "lazy/ops_common.h"

namespace c10d::inline v1::lazy {
namespace {

void check_float(std::string_view op, const ValueType& t) {
  C10D_CHECK(is_floating_point(t.dtype) && is_arith(t.dtype),
             "{}: operand {} must be float32 or float64", op, type_str(t));
}

// x - max(x, axis) and its exp's sum, shared by softmax and log_softmax.
struct Shifted {
  Tensor shifted;
  Tensor exps;
  Tensor sum;
};
Shifted shift(const Tensor& a, std::int64_t axis) {
  Tensor m = max(a, {axis}, true);
  Tensor s = sub(a, m);
  Tensor e = exp(s);
  return {s, e, sum(e, {axis}, true)};
}

// softmax or log_softmax (`op`): `finish` of `a` shifted along `axis`, recorded as `op`.
template <typename Finish>
Tensor softmax_like(std::string_view op, const Tensor& a, std::int64_t axis, Finish finish) {
  const ValueType ta = type_of(a);
  check_float(op, ta);
  const std::int64_t ax = normalize_axis(op, axis, static_cast<std::int64_t>(ta.shape.size()), ta);
  Tensor r;
  {
    RecordSuspendGuard guard;
    r = finish(shift(a, ax));
  }
  record(op, {a}, {r}, [&](OpRecord& rec) { rec.axis = ax; });
  return r;
}

}  // namespace

Tensor softmax(const Tensor& a, std::int64_t axis) {
  return softmax_like("softmax", a, axis, [](const Shifted& s) { return div(s.exps, s.sum); });
}

Tensor log_softmax(const Tensor& a, std::int64_t axis) {
  return softmax_like("log_softmax", a, axis,
                      [](const Shifted& s) { return sub(s.shifted, log(s.sum)); });
}

Tensor one_hot(const Tensor& labels, std::int64_t classes, DType dtype) {
  const ValueType tl = type_of(labels);
  C10D_CHECK(tl.dtype == DType::kInt32 || tl.dtype == DType::kInt64,
             "one_hot: labels {} must be int32 or int64", type_str(tl));
  C10D_CHECK(classes > 0, "one_hot: classes {} must be positive", classes);
  Shape out = tl.shape;
  out.push_back(classes);
  Tensor r =
      make_result({make_node(OpKind::kOneHot, {value_of(labels)}, {{dtype, out}}, {classes}), 0});
  record("one_hot", {labels}, {r}, [&](OpRecord& rec) {
    rec.classes = classes;
    rec.dtype = dtype;
  });
  return r;
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels) {
  const ValueType tx = type_of(logits), tl = type_of(labels);
  check_float("cross_entropy", tx);
  C10D_CHECK(tx.shape.size() == 2 && tl.shape.size() == 1 && tl.shape[0] == tx.shape[0] &&
                 (tl.dtype == DType::kInt32 || tl.dtype == DType::kInt64),
             "cross_entropy: logits {} and labels {} must be [N, C] and int [N]", type_str(tx),
             type_str(tl));
  Tensor r;
  {
    RecordSuspendGuard guard;
    Tensor lsm = log_softmax(logits, 1);
    Tensor picked = sum(mul(lsm, one_hot(labels, tx.shape[1], tx.dtype)), {1});
    r = neg(mean(picked));
  }
  record("cross_entropy", {logits, labels}, r);
  return r;
}

}  // namespace c10d::inline v1::lazy
