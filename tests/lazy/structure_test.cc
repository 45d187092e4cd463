// Structure, not only values: how many kernels a step runs, what it fuses, when it compiles,
// what the cache keeps, what counts as a forced sync. Read through metrics().
#include <cmath>

#include "lazy/context.h"
#include "lazy_testing.h"

namespace c10d::inline v1::lazy {
namespace {

using testing::expect_near;
using testing::f32;
using testing::values;

class StructureTest : public ::testing::Test {
 protected:
  StructureTest() : mode_(true) {
    mark_step();
    set_cache_capacity(64);
    reset_metrics();
  }
  ~StructureTest() override { set_cache_capacity(64); }

  static Tensor data(std::int64_t n, float start = 0) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i)
      v[static_cast<std::size_t>(i)] = start + 0.001f * static_cast<float>(i);
    return f32(v);
  }

  testing::ModeGuard mode_;
};

TEST_F(StructureTest, FiveElementwiseOpsRunAsOneKernel) {
  Tensor x = data(10000);
  Tensor y = tanh(exp(x * 2.0 + 1.0) - 3.0);  // mul, add, exp, sub, tanh
  EXPECT_TRUE(y.impl()->is_pending());
  mark_step();
  EXPECT_FALSE(y.impl()->is_pending());
  const Metrics m = metrics();
  EXPECT_EQ(m.kernels_run, 1);
  EXPECT_EQ(m.fused_kernels, 1);
  EXPECT_EQ(m.ops_run, 5);
  EXPECT_EQ(m.steps, 1);
  EXPECT_EQ(m.forced_syncs, 0);
  expect_near({values(y)[7]}, {std::tanh(std::exp(0.007 * 2 + 1) - 3)});
}

TEST_F(StructureTest, ChainFeedingASumIsOneKernel) {
  Tensor x = data(10000);
  Tensor s = sum(x * x + 1.0);
  mark_step();
  const Metrics m = metrics();
  EXPECT_EQ(m.kernels_run, 1);
  EXPECT_EQ(m.fused_kernels, 1);
  EXPECT_EQ(m.ops_run, 3);
  double want = 0;
  for (int i = 0; i < 10000; ++i) {
    const double v = static_cast<float>(0.001f * static_cast<float>(i));
    want += static_cast<double>(static_cast<float>(static_cast<float>(v * v) + 1.0f));
  }
  expect_near(values(s), {want}, 1e-6);
}

TEST_F(StructureTest, BroadcastOperandsAndAReductionOverRowsFuse) {
  Tensor x = reshape(data(64 * 32), {64, 32});
  Tensor bias = data(32, 1);
  Tensor y = sum(relu(x + bias) * 2.0, {1});  // add (broadcast), relu, mul, row sums
  mark_step();
  EXPECT_EQ(metrics().kernels_run, 1);
  EXPECT_EQ(y.shape(), (std::vector<std::int64_t>{64}));
}

TEST_F(StructureTest, ASecondIdenticalStepCompilesNothing) {
  for (int step = 0; step < 3; ++step) {
    Tensor x = data(1000, static_cast<float>(step));  // new values, same shape
    Tensor y = x * 3.0 + 1.0;
    mark_step();
    EXPECT_NEAR(values(y)[0], 3.0 * step + 1, 1e-6);
  }
  const Metrics m = metrics();
  EXPECT_EQ(m.compiles, 1);
  EXPECT_EQ(m.cache_misses, 1);
  EXPECT_EQ(m.cache_hits, 2);
  EXPECT_EQ(m.steps, 3);
}

TEST_F(StructureTest, ADifferentConstantOrAliasingIsADifferentProgram) {
  Tensor x = data(100), y = data(100, 1);
  Tensor a = x + y;
  mark_step();
  Tensor b = x + x;  // same types, but one input used twice: another program
  mark_step();
  Tensor c = x * 2.0;
  mark_step();
  Tensor d = x * 3.0;  // constants hash by value
  mark_step();
  EXPECT_EQ(metrics().compiles, 4);
  EXPECT_NEAR(values(b)[1], 2 * 0.001, 1e-6);
  EXPECT_NEAR(values(a)[1], 1.002, 1e-6);
}

TEST_F(StructureTest, CommonSubexpressionsAreMerged) {
  Tensor x = data(1000);
  Tensor a = exp(x) * 2.0;
  Tensor b = exp(x) * 2.0;  // a second, equal computation
  Tensor y = a + b;
  a = Tensor();
  b = Tensor();
  mark_step();
  const Metrics m = metrics();
  EXPECT_EQ(m.cse_merged, 3);  // exp, the constant 2.0, mul
  EXPECT_EQ(m.ops_run, 3);     // exp, mul, add
  EXPECT_NEAR(values(y)[0], 4.0, 1e-6);
}

TEST_F(StructureTest, DeadValuesAreNotComputed) {
  Tensor x = data(1000);
  Tensor y = exp(x);
  { Tensor unused = tanh(x) * 2.0; }
  mark_step();
  EXPECT_EQ(metrics().ops_run, 1);
  EXPECT_NEAR(values(y)[0], 1.0, 1e-6);
}

TEST_F(StructureTest, LruCacheEvictsWithCapacityOne) {
  Tensor x = data(10);
  auto step_a = [&] {
    Tensor y = x + 1.0;
    mark_step();
  };
  auto step_b = [&] {
    Tensor y = x * 5.0;
    mark_step();
  };
  set_cache_capacity(1);
  step_a();
  step_b();
  step_a();  // evicted by b: compiled again
  EXPECT_EQ(metrics().compiles, 3);
  set_cache_capacity(2);
  reset_metrics();
  step_b();  // still cached (the last one)
  step_a();
  step_b();
  EXPECT_EQ(metrics().compiles, 1);
  EXPECT_EQ(metrics().cache_hits, 2);
}

TEST_F(StructureTest, ReadingAPendingValueIsAForcedSyncOfTheWholeGraph) {
  Tensor x = data(100);
  Tensor y = x + 1.0;
  Tensor z = x * 2.0;
  EXPECT_NEAR(y.data<float>()[0], 1.0f, 1e-6);  // runs y and z together
  EXPECT_FALSE(z.impl()->is_pending());
  EXPECT_NEAR(z.data<float>()[1], 0.002f, 1e-6);
  const Metrics m = metrics();
  EXPECT_EQ(m.forced_syncs, 1);
  EXPECT_EQ(m.steps, 1);
  mark_step();  // nothing pending: no run
  EXPECT_EQ(metrics().steps, 1);
}

TEST_F(StructureTest, EagerModeRunsEachOpAtOnce) {
  testing::ModeGuard eager(false);
  Tensor x = data(100);
  Tensor y = (x * 2.0) + 1.0;
  EXPECT_FALSE(y.impl()->is_pending());
  const Metrics m = metrics();
  EXPECT_EQ(m.kernels_run, 2);
  EXPECT_EQ(m.steps, 0);
  EXPECT_EQ(m.compiles, 0);
}

TEST_F(StructureTest, SoftmaxIsThreeKernels) {
  Tensor x = reshape(data(8 * 100), {8, 100});
  Tensor y = softmax(x);
  mark_step();
  // max; exp(x - max) and its sum; the division.
  EXPECT_EQ(metrics().kernels_run, 3);
  double row = 0;
  for (double v : values(slice_rows(y, 0, 1))) row += v;
  EXPECT_NEAR(row, 1.0, 1e-5);
}

TEST_F(StructureTest, StructuralHashIgnoresInputValuesButNotConstants) {
  Tensor x = data(10), y = data(10, 5);
  auto node_hash = [](const Tensor& t) { return value_of(t).node->hash; };
  EXPECT_EQ(node_hash(x * 2.0), node_hash(y * 2.0));
  EXPECT_NE(node_hash(x * 2.0), node_hash(x * 3.0));
}

TEST_F(StructureTest, DeepChainsNeitherRecurseWhenRunNorWhenFreed) {
  Tensor x = data(16);
  Tensor y = x;
  for (int i = 0; i < 2000; ++i) y = y + 1.0;
  mark_step();
  EXPECT_NEAR(values(y)[0], 2000.0, 1e-3);
  Tensor z = x;
  for (int i = 0; i < 200000; ++i) z = z * 1.0;
  z = Tensor();  // frees 200000 nodes without recursion
  mark_step();
}

TEST_F(StructureTest, RepeatedStepsReuseTheirBuffers) {
  Tensor x = data(1 << 16);
  const void* first = nullptr;
  for (int i = 0; i < 3; ++i) {
    Tensor y = tanh(x) * 2.0;
    mark_step();
    if (i == 0) first = y.raw_data();
    if (i == 2) {
      EXPECT_EQ(y.raw_data(), first);  // y of step 0 died: its bytes came back
    }
  }
}

}  // namespace
}  // namespace c10d::inline v1::lazy

namespace c10d::inline v1::lazy {
namespace {

TEST(TransposeFoldTest, MatmulReadsTransposedOperandsWithoutACopy) {
  testing::ModeGuard mode(true);
  mark_step();
  reset_metrics();
  Tensor x = f32({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor w = f32({1, 0, 2, 0, 1, 3}, {2, 3});     // Linear's [out, in] weight
  Tensor y = matmul(x, transpose(w));             // [2, 2]
  Tensor g = transpose(matmul(transpose(x), y));  // (x^T y)^T = y^T x, [2, 3]
  Tensor back = transpose(transpose(w));
  EXPECT_NE(dump_graph({y}).find("matmul[transpose_a=0, transpose_b=1]"), std::string::npos)
      << dump_graph({y});
  mark_step();
  EXPECT_EQ(metrics().kernels_run, 2);  // two GEMMs; no transpose copies
  expect_near(values(y), {7, 11, 16, 23});
  // y^T x: [[7, 16], [11, 23]] x [[1, 2, 3], [4, 5, 6]]
  expect_near(values(g), {71, 94, 117, 103, 137, 171});
  expect_near(values(back), {1, 0, 2, 0, 1, 3});
  Tensor bx = reshape(arange(0, 12), {2, 2, 3});
  expect_near(values(matmul(bx, transpose(bx))), {5, 14, 14, 50, 149, 212, 212, 302});
}

}  // namespace
}  // namespace c10d::inline v1::lazy
