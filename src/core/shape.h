// The element and byte counts of a tensor shape, computed without wrapping: the one place that
// multiplies a shape's dimensions from user values (eager tensors, lazy nodes, state_dict
// files).
//
// A shape fits when no dimension is negative and, multiplying the element size by its
// dimensions in order, no step passes 2^63 - 1 bytes; a dimension of 0 ends the count at 0.
// So every leading part of the shape (a count of rows, of outer blocks) fits too, as code that
// walks a shape from the front needs: [0, 2^62] of float64 fits, [2^62, 0] does not.
//
// Thread-safety: pure functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "c10d/types.h"

namespace c10d::inline v1::core {

// The bytes of a tensor of `shape` with elements of `element_size` bytes; nullopt when the
// shape does not fit (above).
std::optional<std::int64_t> shape_bytes(std::span<const std::int64_t> shape,
                                        std::size_t element_size);

// The elements of a tensor of `shape` and `dtype`; InvalidArgument naming `what`, the dtype
// and the shape when it does not fit: "zeros: shape [1099511627776, 1099511627776] of float32
// would take more than 2^63 - 1 bytes", "view: shape [-2, 3] of float32 has a negative
// dimension".
std::int64_t checked_numel(std::string_view what, std::span<const std::int64_t> shape, DType dtype);

}  // namespace c10d::inline v1::core
