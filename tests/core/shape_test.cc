// core/shape.h: element and byte counts of a shape that never wrap.
#include "core/shape.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "c10d/errors.h"

namespace c10d::inline v1::core {
namespace {

using Dims = std::vector<std::int64_t>;

TEST(ShapeTest, BytesAreCountedUpToTheLargestInt64) {
  EXPECT_EQ(shape_bytes(Dims{}, 4), 4);
  EXPECT_EQ(shape_bytes(Dims{2, 3}, 8), 48);
  EXPECT_EQ(shape_bytes(Dims{2, 0, 3}, 8), 0);
  constexpr std::int64_t kMax = std::numeric_limits<std::int64_t>::max();
  EXPECT_EQ(shape_bytes(Dims{kMax}, 1), kMax);
  EXPECT_FALSE(shape_bytes(Dims{kMax}, 2));
  EXPECT_FALSE(shape_bytes(Dims{std::int64_t{1} << 62, 2}, 1));
  EXPECT_FALSE(shape_bytes(Dims{std::int64_t{1} << 32, std::int64_t{1} << 32}, 1));
  EXPECT_FALSE(shape_bytes(Dims{3, -1}, 1));
  // Counted in order: a 0 ends the count, but what comes before it must fit.
  EXPECT_EQ(shape_bytes(Dims{0, std::int64_t{1} << 62}, 8), 0);
  EXPECT_FALSE(shape_bytes(Dims{std::int64_t{1} << 62, 0}, 8));
  EXPECT_FALSE(shape_bytes(Dims{std::int64_t{1} << 40, std::int64_t{1} << 40, 0}, 1));
}

TEST(ShapeTest, CheckedNumelNamesTheCallerTheShapeAndTheDtype) {
  EXPECT_EQ(checked_numel("t", Dims{2, 3}, DType::kFloat64), 6);
  const auto what = [](const Dims& shape) {
    try {
      checked_numel("zeros", shape, DType::kFloat32);
    } catch (const InvalidArgument& e) {
      return std::string(e.what());
    }
    return std::string("no InvalidArgument");
  };
  EXPECT_NE(what({std::int64_t{1} << 40, std::int64_t{1} << 40})
                .find("zeros: shape [1099511627776, 1099511627776] of float32 would take more "
                      "than 2^63 - 1 bytes"),
            std::string::npos);
  EXPECT_NE(what({-2, 3}).find("zeros: shape [-2, 3] of float32 has a negative dimension"),
            std::string::npos);
  EXPECT_NE(what({std::int64_t{1} << 62, 0})
                .find("takes more than 2^63 - 1 bytes in its dimensions before the 0"),
            std::string::npos);
}

}  // namespace
}  // namespace c10d::inline v1::core
