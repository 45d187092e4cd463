#include "core/shape.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace c10d::inline v1::core {

std::optional<std::int64_t> shape_bytes(std::span<const std::int64_t> shape,
                                        std::size_t element_size) {
  constexpr auto kMax = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
  if (element_size > kMax) return std::nullopt;
  std::uint64_t bytes = element_size;
  for (const std::int64_t d : shape) {
    if (d < 0) return std::nullopt;
    if (__builtin_mul_overflow(bytes, static_cast<std::uint64_t>(d), &bytes) || bytes > kMax) {
      return std::nullopt;
    }
  }
  return static_cast<std::int64_t>(bytes);
}

std::int64_t checked_numel(std::string_view what, std::span<const std::int64_t> shape,
                           DType dtype) {
  const std::size_t size = element_size(dtype);
  const auto bytes = shape_bytes(shape, size);
  if (!bytes) {
    const bool negative = std::any_of(shape.begin(), shape.end(), [](auto d) { return d < 0; });
    const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
    C10D_THROW(InvalidArgument, "{}: shape [{}] of {} {}", what, fmt::join(shape, ", "),
               dtype_name(dtype),
               negative ? "has a negative dimension"
               : empty  ? "takes more than 2^63 - 1 bytes in its dimensions before the 0"
                        : "would take more than 2^63 - 1 bytes");
  }
  return *bytes / static_cast<std::int64_t>(size);
}

}  // namespace c10d::inline v1::core
