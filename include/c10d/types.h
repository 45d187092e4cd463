// Value types shared by every layer: element types, reduction operators and the option
// structs of the collectives.
//
// Thread-safety: plain values, safe to copy and read from any thread. Lifetime: values; they
// own what they hold.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/export.h"

namespace c10d::inline v1 {

using Bytes = std::vector<std::uint8_t>;
using Milliseconds = std::chrono::milliseconds;

// The default deadline of a blocking call when nothing else is set: 30 minutes, as PyTorch.
inline constexpr Milliseconds kDefaultTimeout{30 * 60 * 1000};

enum class DType : std::uint8_t {
  kFloat32,
  kFloat64,
  kFloat16,
  kBFloat16,
  kInt8,
  kUInt8,
  kInt32,
  kInt64,
  kBool,
  kInt16,  // last: dtype codes are stable (state_dict files store them)
};
inline constexpr int kNumDTypes = 10;

[[noreturn]] C10D_API void throw_invalid_dtype(DType dtype);
// Bytes per element (inline: every collective's checks call it). InvalidArgument on a value
// that is not a DType.
constexpr std::size_t element_size(DType dtype) {
  constexpr std::uint8_t kSizes[kNumDTypes] = {4, 8, 2, 2, 1, 1, 4, 8, 1, 2};  // in DType's order
  const auto index = static_cast<std::size_t>(dtype);
  if (index >= static_cast<std::size_t>(kNumDTypes)) [[unlikely]]
    throw_invalid_dtype(dtype);
  return kSizes[index];
}
C10D_API std::string_view dtype_name(DType dtype);  // "float32", "bfloat16", ...
// Parses the names dtype_name() prints, and the nccl-tests short forms ("float", "half",
// "bfloat16", "double", "int8", "uint8", "int32", "int64", "bool"), and "short" for int16.
// Throws InvalidArgument.
C10D_API DType parse_dtype(std::string_view name);
C10D_API bool is_floating_point(DType dtype);

// Numbered as PyTorch numbers ReduceOp::RedOpType.
enum class ReduceOp : std::uint8_t {
  kSum = 0,
  kAvg = 1,
  kProduct = 2,
  kMin = 3,
  kMax = 4,
  kBand = 5,
  kBor = 6,
  kBxor = 7,
  kPremulSum = 8,
};

C10D_API std::string_view reduce_op_name(ReduceOp op);     // "sum", "avg", "prod", ...
C10D_API ReduceOp parse_reduce_op(std::string_view name);  // throws InvalidArgument

// A reduction with its operator and, for PREMUL_SUM, the factor each input is scaled by.
struct Reduction {
  ReduceOp op = ReduceOp::kSum;
  double premul_factor = 1.0;  // used only by kPremulSum
};

// Options of every collective. A timeout left unset takes the group's default.
struct AllreduceOptions {
  Reduction reduce{};
  std::optional<Milliseconds> timeout;
};
struct BroadcastOptions {
  int root = 0;
  std::optional<Milliseconds> timeout;
};
struct ReduceOptions {
  Reduction reduce{};
  int root = 0;
  std::optional<Milliseconds> timeout;
};
struct AllgatherOptions {
  std::optional<Milliseconds> timeout;
};
struct ReduceScatterOptions {
  Reduction reduce{};
  std::optional<Milliseconds> timeout;
};
struct AllToAllOptions {
  // Elements (along the first dimension) sent to / received from each rank; empty means
  // equal splits. Sizes are in rows of the first dimension, as torch.distributed does.
  std::vector<std::int64_t> input_split_sizes;
  std::vector<std::int64_t> output_split_sizes;
  std::optional<Milliseconds> timeout;
};
struct GatherOptions {
  int root = 0;
  std::optional<Milliseconds> timeout;
};
struct ScatterOptions {
  int root = 0;
  std::optional<Milliseconds> timeout;
};
struct BarrierOptions {
  std::optional<Milliseconds> timeout;
};
struct SendRecvOptions {
  int tag = 0;
  std::optional<Milliseconds> timeout;
};

}  // namespace c10d::inline v1
