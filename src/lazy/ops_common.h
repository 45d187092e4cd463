// Helpers shared by the op files (ops_*.cc): type names for messages, broadcasting, dtype
// promotion, axis checks, and the recording call. Internal to src/lazy.
//
// Promotion (torch's rules, for the dtypes ops accept): a floating dtype wins over an integer
// one; float64 over float32; int64 over int32; bool joins only comparisons (eq, ne) and where.
// A double operand of an operator (`a * 0.5`) takes a's dtype, except that a non-integral
// value with an integer tensor gives float32 (as torch does). Integer division, and exp, log,
// sqrt, tanh, sigmoid of integers, compute in float32.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "c10d/lazy.h"
#include "lazy/autograd_hook.h"
#include "lazy/context.h"
#include "lazy/ir.h"

namespace c10d::inline v1::lazy {

std::string_view short_dtype(DType t);     // "f32", "i64", "bool", ...
std::string type_str(const ValueType& t);  // "f32[3, 4]"
std::string type_str(const Tensor& t);

// numpy broadcasting; throws "op: shapes f32[3,4] and f32[5] do not broadcast".
Shape broadcast_shapes(std::string_view op, const std::vector<ValueType>& types);
DType promote(DType a, DType b);
bool is_arith(DType t);  // float32, float64, int32, int64
void check_arith(std::string_view op, const ValueType& t);
std::int64_t normalize_axis(std::string_view op, std::int64_t axis, std::int64_t rank,
                            const ValueType& t);
// `v` converted to `to` (a cast node, or v itself).
Value cast_value(const Value& v, DType to);
ValueType type_of(const Tensor& t);
// A 0-d constant tensor (not tracked by mark_step).
Tensor constant_scalar(double value, DType dtype);

// Calls the autograd hook if it wants this op; `fill` sets the op's attributes.
template <class Fill>
void record(std::string_view name, std::vector<Tensor> inputs, std::vector<Tensor> outputs,
            Fill&& fill) {
  if (!should_record(inputs)) return;
  OpRecord r;
  r.name = name;
  r.inputs = std::move(inputs);
  r.outputs = std::move(outputs);
  fill(r);
  record_op(r);
}
inline void record(std::string_view name, std::vector<Tensor> inputs, const Tensor& output) {
  record(name, std::move(inputs), {output}, [](OpRecord&) {});
}

}  // namespace c10d::inline v1::lazy
