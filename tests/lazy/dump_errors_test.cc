// dump_graph's text, and the errors ops throw when they are recorded (or when a step runs).
#include "c10d/errors.h"
#include "lazy_testing.h"

namespace c10d::inline v1::lazy {
namespace {

using testing::f32;
using testing::i64;

class DumpTest : public ::testing::Test {
 protected:
  DumpTest() : mode_(true) {}
  testing::ModeGuard mode_;
};

TEST_F(DumpTest, MatmulGraphPrintsLikeTorchJit) {
  Tensor x = Tensor::zeros({64, 784}, DType::kFloat32);
  Tensor w = Tensor::zeros({784, 10}, DType::kFloat32);
  EXPECT_EQ(dump_graph({matmul(x, w)}),
            "graph(%0 : f32[64, 784], %1 : f32[784, 10]) {\n"
            "  %2 = matmul(%0, %1) : f32[64, 10]\n"
            "  return (%2)\n"
            "}\n");
}

TEST_F(DumpTest, ConstantsAttributesAndSharedOperandsPrint) {
  Tensor x = Tensor::zeros({4, 3}, DType::kFloat32);
  Tensor y = sum(x * x * 0.5, {1});
  EXPECT_EQ(dump_graph({y, x}),
            "graph(%0 : f32[4, 3]) {\n"
            "  %1 = mul(%0, %0) : f32[4, 3]\n"
            "  %2 = constant[value=0.5]() : f32[]\n"
            "  %3 = mul(%1, %2) : f32[4, 3]\n"
            "  %4 = sum[axes=[1]](%3) : f32[4]\n"
            "  return (%4, %0)\n"
            "}\n");
}

template <class F>
void expect_invalid(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; wanted one containing: " << needle;
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

class ErrorsTest : public ::testing::TestWithParam<bool> {
 protected:
  ErrorsTest() : mode_(GetParam()) {}
  testing::ModeGuard mode_;
};

TEST_P(ErrorsTest, MessagesNameTheOpAndTheOperands) {
  Tensor a = Tensor::zeros({3, 4}, DType::kFloat32);
  Tensor b = Tensor::zeros({5}, DType::kFloat32);
  expect_invalid([&] { add(a, b); }, "add: shapes f32[3, 4] and f32[5] do not broadcast");
  expect_invalid([&] { matmul(a, a); }, "matmul: shapes f32[3, 4] and f32[3, 4] do not multiply");
  expect_invalid([&] { reshape(a, {5, -1}); }, "reshape: cannot view f32[3, 4] as [5, -1]");
  expect_invalid([&] { sum(a, {2}); }, "sum: axis 2 is out of range for f32[3, 4]");
  expect_invalid([&] { sum(a, {1, -1}); }, "sum: axis repeated");
  expect_invalid([&] { exp(cast(a, DType::kBool)); }, "exp: operand bool[3, 4] has dtype bool");
  expect_invalid([&] { mean(i64({1, 2})); }, "mean: operand i64[2] must be floating point");
  expect_invalid([&] { slice_rows(a, 2, 5); },
                 "slice_rows: rows [2, 5) are out of range for f32[3, 4]");
  expect_invalid([&] { assign(a, b); }, "assign: value f32[5] does not match f32[3, 4]");
  expect_invalid([&] { concat({a, b}); }, "concat: shapes f32[3, 4] and f32[5] differ");
  expect_invalid(
      [&] {
        broadcast_to(b, {3, 4});
      },
      "broadcast_to: f32[5] does not broadcast to f32[3, 4]");
  expect_invalid(
      [&] {
        cross_entropy(a, i64({0, 1}));
      },
      "cross_entropy: logits f32[3, 4] and labels i64[2]");
}

TEST_P(ErrorsTest, BadLabelsFailWhenTheStepRunsAndTheTensorStaysPending) {
  Tensor labels = i64({0, 7});
  expect_invalid(
      [&] {
        Tensor h = one_hot(labels, 3);
        h.raw_data();
      },
      "one_hot: label 7 at index 1 is outside [0, 3)");
}

INSTANTIATE_TEST_SUITE_P(Modes, ErrorsTest, ::testing::Values(false, true),
                         [](const auto& p) { return p.param ? "Lazy" : "Eager"; });

}  // namespace
}  // namespace c10d::inline v1::lazy
