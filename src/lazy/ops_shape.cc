// Linear algebra and shape ops: matmul, transpose, reshape, slice_rows, concat, broadcast_to.
// reshape and slice_rows share their operand's bytes (no copy when they run).
#include <algorithm>

#include "core/check.h"
#include "core/shape.h"
#include "lazy/ops_common.h"

namespace c10d::inline v1::lazy {
namespace {

// True when `v` is a pending transpose of its operand's last two axes.
bool is_last_two_transpose(const Value& v) {
  const Node& n = *v.node;
  if (n.op != OpKind::kTranspose) return false;
  const auto r = static_cast<std::int64_t>(n.outputs[0].shape.size());
  return std::min(n.ints[0], n.ints[1]) == r - 2 && std::max(n.ints[0], n.ints[1]) == r - 1;
}

// A matmul node computing op_a(a) x op_b(b), where op is a transpose of the last two axes when
// the flag is set: Eigen reads the untransposed bytes, so the transpose costs no copy.
std::shared_ptr<Node> matmul_node(Value a, bool ta, Value b, bool tb, ValueType out) {
  // A pending transpose operand folds into the flag.
  if (is_last_two_transpose(a)) {
    a = a.node->operands[0];
    ta = !ta;
  }
  if (is_last_two_transpose(b)) {
    b = b.node->operands[0];
    tb = !tb;
  }
  std::vector<std::int64_t> ints;
  if (ta || tb) ints = {ta ? 1 : 0, tb ? 1 : 0};
  return make_node(OpKind::kMatmul, {std::move(a), std::move(b)}, {std::move(out)},
                   std::move(ints));
}

}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  const ValueType ta = type_of(a), tb = type_of(b);
  check_arith("matmul", ta);
  check_arith("matmul", tb);
  const std::size_t ra = ta.shape.size(), rb = tb.shape.size();
  C10D_CHECK(ra >= 2 && rb >= 2 && ta.shape[ra - 1] == tb.shape[rb - 2],
             "matmul: shapes {} and {} do not multiply ([..., m, k] x [..., k, n])", type_str(ta),
             type_str(tb));
  const ValueType ba{ta.dtype, Shape(ta.shape.begin(), ta.shape.end() - 2)};
  const ValueType bb{tb.dtype, Shape(tb.shape.begin(), tb.shape.end() - 2)};
  Shape out = broadcast_shapes("matmul", {ba, bb});
  out.push_back(ta.shape[ra - 2]);
  out.push_back(tb.shape[rb - 1]);
  const DType dtype = promote(ta.dtype, tb.dtype);
  Tensor r = make_result({matmul_node(cast_value(value_of(a), dtype), false,
                                      cast_value(value_of(b), dtype), false, {dtype, out}),
                          0});
  record("matmul", {a, b}, r);
  return r;
}

Tensor transpose(const Tensor& a, std::int64_t dim0, std::int64_t dim1) {
  const ValueType ta = type_of(a);
  const auto rank = static_cast<std::int64_t>(ta.shape.size());
  const std::int64_t d0 = normalize_axis("transpose", dim0, rank, ta);
  const std::int64_t d1 = normalize_axis("transpose", dim1, rank, ta);
  Shape out = ta.shape;
  std::swap(out[static_cast<std::size_t>(d0)], out[static_cast<std::size_t>(d1)]);
  const Value v = value_of(a);
  const Node& src = *v.node;
  std::shared_ptr<Node> node;
  const bool last_two = std::min(d0, d1) == rank - 2 && std::max(d0, d1) == rank - 1;
  if (d0 == d1) {
    node = make_node(OpKind::kReshape, {v}, {{ta.dtype, out}});
  } else if (src.op == OpKind::kTranspose &&
             std::min(d0, d1) == std::min(src.ints[0], src.ints[1]) &&
             std::max(d0, d1) == std::max(src.ints[0], src.ints[1])) {
    // transpose(transpose(x)) is x: an alias of its bytes.
    node = make_node(OpKind::kReshape, {src.operands[0]}, {{ta.dtype, out}});
  } else if (src.op == OpKind::kMatmul && last_two) {
    // (A B)^T = B^T A^T: a GEMM on the same bytes instead of a copy of its result.
    const bool fa = !src.ints.empty() && src.ints[0] != 0;
    const bool fb = !src.ints.empty() && src.ints[1] != 0;
    node = matmul_node(src.operands[1], !fb, src.operands[0], !fa, {ta.dtype, out});
  } else {
    node = make_node(OpKind::kTranspose, {v}, {{ta.dtype, out}}, {d0, d1});
  }
  Tensor r = make_result({std::move(node), 0});
  record("transpose", {a}, {r}, [&](OpRecord& rec) {
    rec.dim0 = dim0;
    rec.dim1 = dim1;
  });
  return r;
}

Tensor reshape(const Tensor& a, Shape shape) {
  const ValueType ta = type_of(a);
  int infer = -1;
  Shape given;  // the dimensions other than the -1
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == -1) {
      C10D_CHECK(infer < 0, "reshape: more than one -1 in [{}] for {}", fmt::join(shape, ", "),
                 type_str(ta));
      infer = static_cast<int>(d);
    } else {
      C10D_CHECK(shape[d] >= 0, "reshape: bad dimension {} in [{}] for {}", shape[d],
                 fmt::join(shape, ", "), type_str(ta));
      given.push_back(shape[d]);
    }
  }
  const auto given_numel = core::shape_bytes(given, 1);
  C10D_CHECK(given_numel, "reshape: cannot view {} as [{}]: too many elements", type_str(ta),
             fmt::join(shape, ", "));
  std::int64_t known = *given_numel;
  const std::int64_t n = ta.numel();
  if (infer >= 0) {
    C10D_CHECK(known > 0 && n % known == 0, "reshape: cannot view {} as [{}]", type_str(ta),
               fmt::join(shape, ", "));
    shape[static_cast<std::size_t>(infer)] = n / known;
    known = n;
  }
  C10D_CHECK(known == n, "reshape: cannot view {} ({} elements) as [{}]", type_str(ta), n,
             fmt::join(shape, ", "));
  Tensor r = make_result({make_node(OpKind::kReshape, {value_of(a)}, {{ta.dtype, shape}}), 0});
  record("reshape", {a}, {r}, [&](OpRecord& rec) { rec.shape = shape; });
  return r;
}

Tensor slice_rows(const Tensor& a, std::int64_t begin, std::int64_t end) {
  const ValueType ta = type_of(a);
  C10D_CHECK(!ta.shape.empty(), "slice_rows: operand {} has no rows", type_str(ta));
  C10D_CHECK(0 <= begin && begin <= end && end <= ta.shape[0],
             "slice_rows: rows [{}, {}) are out of range for {}", begin, end, type_str(ta));
  Shape out = ta.shape;
  out[0] = end - begin;
  Tensor r = make_result(
      {make_node(OpKind::kSliceRows, {value_of(a)}, {{ta.dtype, out}}, {begin, end}), 0});
  record("slice_rows", {a}, {r}, [&](OpRecord& rec) {
    rec.begin = begin;
    rec.end = end;
  });
  return r;
}

Tensor concat(const std::vector<Tensor>& tensors, std::int64_t axis) {
  C10D_CHECK(!tensors.empty(), "concat: no tensors");
  const ValueType t0 = type_of(tensors[0]);
  const auto rank = static_cast<std::int64_t>(t0.shape.size());
  C10D_CHECK(rank > 0, "concat: operand {} is 0-d", type_str(t0));
  const std::int64_t ax = normalize_axis("concat", axis, rank, t0);
  DType dtype = t0.dtype;
  Shape out = t0.shape;
  out[static_cast<std::size_t>(ax)] = 0;
  for (const Tensor& t : tensors) {
    const ValueType ti = type_of(t);
    bool ok = ti.shape.size() == t0.shape.size();
    for (std::size_t d = 0; ok && d < ti.shape.size(); ++d) {
      ok = static_cast<std::int64_t>(d) == ax || ti.shape[d] == t0.shape[d];
    }
    C10D_CHECK(ok, "concat: shapes {} and {} differ outside axis {}", type_str(t0), type_str(ti),
               ax);
    out[static_cast<std::size_t>(ax)] += ti.shape[static_cast<std::size_t>(ax)];
    dtype = promote(dtype, ti.dtype);
  }
  std::vector<Value> ops;
  for (const Tensor& t : tensors) ops.push_back(cast_value(value_of(t), dtype));
  Tensor r = make_result({make_node(OpKind::kConcat, std::move(ops), {{dtype, out}}, {ax}), 0});
  record("concat", tensors, {r}, [&](OpRecord& rec) { rec.axis = ax; });
  return r;
}

Tensor broadcast_to(const Tensor& a, const Shape& shape) {
  const ValueType ta = type_of(a);
  const ValueType target{ta.dtype, shape};
  bool ok = ta.shape.size() <= shape.size();
  for (std::size_t d = 0; ok && d < ta.shape.size(); ++d) {
    const std::int64_t v = ta.shape[d], want = shape[shape.size() - ta.shape.size() + d];
    ok = v == want || v == 1;
  }
  C10D_CHECK(ok, "broadcast_to: {} does not broadcast to {}", type_str(ta), type_str(target));
  Tensor r = make_result({make_node(OpKind::kIdentity, {value_of(a)}, {target}), 0});
  record("broadcast_to", {a}, {r}, [&](OpRecord& rec) { rec.shape = shape; });
  return r;
}

}  // namespace c10d::inline v1::lazy
