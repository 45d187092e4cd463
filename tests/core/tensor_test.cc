#include "c10d/tensor.h"

#include <gtest/gtest.h>

#include <vector>

#include "c10d/errors.h"

namespace c10d::inline v1 {
namespace {

TEST(TensorTest, EmptyIsZeroedAndSized) {
  Tensor t = Tensor::empty({3, 5}, DType::kFloat64);
  EXPECT_EQ(t.numel(), 15);
  EXPECT_EQ(t.nbytes(), 120u);
  EXPECT_EQ(t.to_string(), "float64[3, 5]");
  for (int i = 0; i < 15; ++i) EXPECT_EQ(t.data<double>()[i], 0.0);
}

TEST(TensorTest, FromBlobSharesUserMemoryAndRunsDeleter) {
  std::vector<float> buffer = {1, 2, 3, 4};
  bool deleted = false;
  {
    Tensor t =
        Tensor::from_blob(buffer.data(), {2, 2}, DType::kFloat32, [&](void*) { deleted = true; });
    EXPECT_EQ(t.data<float>(), buffer.data());
    t.data<float>()[3] = 40;
    Tensor copy = t;  // a handle, not a copy of the data
    EXPECT_EQ(copy.data<float>(), buffer.data());
  }
  EXPECT_TRUE(deleted);
  EXPECT_EQ(buffer[3], 40);
}

TEST(TensorTest, CloneCopiesAndViewsShare) {
  Tensor t = Tensor::from_vector<std::int32_t>({1, 2, 3, 4, 5, 6}, DType::kInt32);
  Tensor c = t.clone();
  c.data<std::int32_t>()[0] = 100;
  EXPECT_EQ(t.data<std::int32_t>()[0], 1);
  Tensor v = t.view({2, 3});
  v.data<std::int32_t>()[5] = 60;
  EXPECT_EQ(t.data<std::int32_t>()[5], 60);
  Tensor rows = v.narrow_rows(1, 2);
  EXPECT_EQ(rows.numel(), 3);
  EXPECT_EQ(rows.data<std::int32_t>()[0], 4);
  EXPECT_THROW(v.narrow_rows(1, 3), InvalidArgument);
  EXPECT_THROW(t.view({4, 2}), InvalidArgument);
}

TEST(TensorTest, BadShapesAndHostTypesAreRejected) {
  EXPECT_THROW(Tensor::empty({-1}, DType::kFloat32), InvalidArgument);
  EXPECT_THROW(Tensor::from_vector<double>({1.0}, DType::kFloat32), InvalidArgument);
  EXPECT_THROW(Tensor().numel(), InvalidArgument);
}

class ConstantPending : public PendingValue {
 public:
  explicit ConstantPending(float v) : v_(v) {}
  void materialize(TensorImpl& impl) override {
    ++runs;
    auto storage = std::make_shared<Storage>(impl.numel() * sizeof(float));
    for (std::int64_t i = 0; i < impl.numel(); ++i) static_cast<float*>(storage->data())[i] = v_;
    impl.set_storage(storage);
  }
  int runs = 0;

 private:
  float v_;
};

TEST(TensorTest, PendingValueIsMaterializedOnceOnFirstRead) {
  auto pending = std::make_shared<ConstantPending>(2.5f);
  Tensor t(std::make_shared<TensorImpl>(DType::kFloat32, std::vector<std::int64_t>{4}, pending));
  EXPECT_TRUE(t.impl()->is_pending());
  EXPECT_EQ(t.data<float>()[3], 2.5f);
  EXPECT_EQ(t.data<float>()[0], 2.5f);
  EXPECT_EQ(pending->runs, 1);
  EXPECT_FALSE(t.impl()->is_pending());
}

}  // namespace
}  // namespace c10d::inline v1
