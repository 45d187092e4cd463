#include "c10d/types.h"

#include <gtest/gtest.h>

#include "c10d/errors.h"

namespace c10d::inline v1 {
namespace {

TEST(DTypeTest, SizesAndNamesRoundTrip) {
  const DType all[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                       DType::kInt8,    DType::kUInt8,   DType::kInt32,   DType::kInt64,
                       DType::kBool,    DType::kInt16};
  const std::size_t sizes[] = {4, 8, 2, 2, 1, 1, 4, 8, 1, 2};
  for (int i = 0; i < kNumDTypes; ++i) {
    EXPECT_EQ(element_size(all[i]), sizes[i]) << dtype_name(all[i]);
    EXPECT_EQ(parse_dtype(dtype_name(all[i])), all[i]);
  }
  EXPECT_EQ(parse_dtype("float"), DType::kFloat32);
  EXPECT_EQ(parse_dtype("half"), DType::kFloat16);
  EXPECT_TRUE(is_floating_point(DType::kBFloat16));
  EXPECT_FALSE(is_floating_point(DType::kInt64));
}

TEST(DTypeTest, UnknownNameIsInvalidArgumentNamingIt) {
  try {
    parse_dtype("float128");
    FAIL() << "no exception";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("float128"), std::string::npos);
  }
}

TEST(ReduceOpTest, NumberedAsPyTorch) {
  EXPECT_EQ(static_cast<int>(ReduceOp::kSum), 0);
  EXPECT_EQ(static_cast<int>(ReduceOp::kAvg), 1);
  EXPECT_EQ(static_cast<int>(ReduceOp::kProduct), 2);
  EXPECT_EQ(static_cast<int>(ReduceOp::kMin), 3);
  EXPECT_EQ(static_cast<int>(ReduceOp::kMax), 4);
  EXPECT_EQ(static_cast<int>(ReduceOp::kBand), 5);
  EXPECT_EQ(static_cast<int>(ReduceOp::kBor), 6);
  EXPECT_EQ(static_cast<int>(ReduceOp::kBxor), 7);
  EXPECT_EQ(static_cast<int>(ReduceOp::kPremulSum), 8);
  for (int i = 0; i <= 8; ++i) {
    auto op = static_cast<ReduceOp>(i);
    EXPECT_EQ(parse_reduce_op(reduce_op_name(op)), op);
  }
  EXPECT_THROW(parse_reduce_op("mean"), InvalidArgument);
}

}  // namespace
}  // namespace c10d::inline v1
