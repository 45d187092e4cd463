#include "c10d/types.h"

#include <array>

#include "core/check.h"

namespace c10d::inline v1 {
namespace {

struct DTypeInfo {
  DType dtype;
  std::size_t size;
  std::string_view name;
  bool floating;
};

constexpr std::array<DTypeInfo, kNumDTypes> kDTypes = {{
    {DType::kFloat32, 4, "float32", true},
    {DType::kFloat64, 8, "float64", true},
    {DType::kFloat16, 2, "float16", true},
    {DType::kBFloat16, 2, "bfloat16", true},
    {DType::kInt8, 1, "int8", false},
    {DType::kUInt8, 1, "uint8", false},
    {DType::kInt32, 4, "int32", false},
    {DType::kInt64, 8, "int64", false},
    {DType::kBool, 1, "bool", false},
    {DType::kInt16, 2, "int16", false},
}};

constexpr bool sizes_agree() {
  for (const auto& d : kDTypes) {
    if (element_size(d.dtype) != d.size) return false;
  }
  return true;
}
static_assert(sizes_agree(), "element_size() in types.h disagrees with kDTypes");

const DTypeInfo& info(DType dtype) {
  const auto index = static_cast<std::size_t>(dtype);
  if (index >= kDTypes.size()) throw_invalid_dtype(dtype);
  return kDTypes[index];
}

constexpr std::array<std::string_view, 9> kReduceOpNames = {
    "sum", "avg", "prod", "min", "max", "band", "bor", "bxor", "premul_sum"};

}  // namespace

void throw_invalid_dtype(DType dtype) {
  C10D_THROW(InvalidArgument, "invalid dtype value {}", static_cast<unsigned>(dtype));
}

std::string_view dtype_name(DType dtype) { return info(dtype).name; }
bool is_floating_point(DType dtype) { return info(dtype).floating; }

DType parse_dtype(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  // nccl-tests spellings.
  if (name == "float" || name == "f32") return DType::kFloat32;
  if (name == "double" || name == "f64") return DType::kFloat64;
  if (name == "half" || name == "f16") return DType::kFloat16;
  if (name == "bf16") return DType::kBFloat16;
  if (name == "char") return DType::kInt8;
  if (name == "int") return DType::kInt32;
  if (name == "short") return DType::kInt16;
  C10D_THROW(InvalidArgument,
             "unknown dtype '{}' (float32|float, float64|double, float16|half, bfloat16, int8, "
             "uint8, int16|short, int32, int64, bool)",
             name);
}

std::string_view reduce_op_name(ReduceOp op) {
  const auto index = static_cast<std::size_t>(op);
  C10D_CHECK(index < kReduceOpNames.size(), "invalid reduce op value {}", index);
  return kReduceOpNames[index];
}

ReduceOp parse_reduce_op(std::string_view name) {
  for (std::size_t i = 0; i < kReduceOpNames.size(); ++i) {
    if (kReduceOpNames[i] == name) return static_cast<ReduceOp>(i);
  }
  if (name == "product") return ReduceOp::kProduct;
  C10D_THROW(InvalidArgument,
             "unknown reduce op '{}' (sum, avg, prod, min, max, band, bor, bxor, premul_sum)",
             name);
}

}  // namespace c10d::inline v1
