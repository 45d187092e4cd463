// softmax, log_softmax, one_hot and cross_entropy against hand-computed values, both modes.
#include <cmath>

#include "lazy_testing.h"

namespace c10d::inline v1::lazy {
namespace {

using testing::expect_near;
using testing::f32;
using testing::i64;
using testing::values;

class NnOpsTest : public ::testing::TestWithParam<bool> {
 protected:
  NnOpsTest() : mode_(GetParam()) {}
  testing::ModeGuard mode_;
};

TEST_P(NnOpsTest, SoftmaxRowsSumToOne) {
  Tensor x = f32({1, 2, 3, 0, 0, 1000}, {2, 3});
  const double e = std::exp(1.0), z = 1 + e + e * e;
  expect_near(values(softmax(x)), {1 / z, e / z, e * e / z, 0, 0, 1});
  const double lz = std::log(z);
  expect_near(values(log_softmax(x)), {-lz, 1 - lz, 2 - lz, -1000, -1000, 0}, 1e-5);
  expect_near(values(softmax(f32({1, 1, 2, 2}, {2, 2}), 0)),
              {1 / (1 + e), 1 / (1 + e), e / (1 + e), e / (1 + e)});
}

TEST_P(NnOpsTest, OneHotAndCrossEntropy) {
  expect_near(values(one_hot(i64({2, 0}), 3)), {0, 0, 1, 1, 0, 0});
  Tensor logits = f32({0, 0, 0, 1, 2, 3}, {2, 3});
  Tensor labels = i64({1, 2});
  const double e = std::exp(1.0), z = 1 + e + e * e;
  const double want = (std::log(3.0) + (std::log(z) - 2)) / 2;
  Tensor loss = cross_entropy(logits, labels);
  EXPECT_TRUE(loss.shape().empty());
  expect_near(values(loss), {want});
}

INSTANTIATE_TEST_SUITE_P(Modes, NnOpsTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Lazy" : "Eager"; });

}  // namespace
}  // namespace c10d::inline v1::lazy
