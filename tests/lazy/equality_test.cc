// Lazy mode gives the same bytes as eager mode: a sweep over shapes (with broadcasting and
// sizes that cross tile boundaries), dtypes, ops, fused chains and reductions. Both modes cut
// the same tiles and run the same kernels, so the comparison is exact.
#include <fmt/format.h>

#include <functional>

#include "lazy_testing.h"

namespace c10d::inline v1::lazy {
namespace {

using Shape = std::vector<std::int64_t>;
using Fn = std::function<std::vector<Tensor>(const std::vector<Tensor>&)>;

// Deterministic inputs, made eagerly (so both modes read the same bytes).
Tensor input(const Shape& shape, DType dtype, std::uint64_t seed, double lo = -2, double hi = 2) {
  testing::ModeGuard eager(false);
  Generator g(seed);
  Tensor u = uniform(shape, g, lo, hi, DType::kFloat64);
  if (dtype == DType::kInt32 || dtype == DType::kInt64) u = u * 10.0;
  return cast(u, dtype);
}

std::vector<std::vector<std::uint8_t>> run(bool lazy, const Fn& f, const std::vector<Tensor>& in) {
  testing::ModeGuard mode(lazy);
  std::vector<Tensor> out = f(in);
  if (lazy) mark_step();
  std::vector<std::vector<std::uint8_t>> bytes;
  for (const Tensor& t : out) bytes.push_back(testing::bytes_of(t));
  return bytes;
}

void expect_same(const std::string& what, const Fn& f, const std::vector<Tensor>& in) {
  const auto eager = run(false, f, in);
  const auto lazy = run(true, f, in);
  ASSERT_EQ(eager.size(), lazy.size()) << what;
  for (std::size_t i = 0; i < eager.size(); ++i)
    EXPECT_TRUE(eager[i] == lazy[i]) << what << " output " << i;
}

const std::vector<std::pair<Shape, Shape>> kShapePairs = {
    {{17}, {17}},        {{5, 1}, {1, 7}},    {{3, 4, 5}, {5}}, {{1000}, {}},  {{4097}, {4097}},
    {{3, 4097}, {3, 1}}, {{2, 1, 3}, {4, 1}}, {{0, 3}, {3}},    {{9000}, {1}},
};

TEST(LazyEqualsEager, BinaryOpsOverShapesAndDtypes) {
  using BinFn = Tensor (*)(const Tensor&, const Tensor&);
  const std::vector<std::pair<const char*, BinFn>> ops = {
      {"add", add},         {"sub", sub}, {"mul", mul}, {"div", div}, {"maximum", maximum},
      {"minimum", minimum}, {"lt", lt},   {"eq", eq},   {"ge", ge}};
  int seed = 1;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64}) {
    for (const auto& [sa, sb] : kShapePairs) {
      const Tensor a = input(sa, dt, static_cast<std::uint64_t>(seed++));
      const Tensor b = input(sb, dt, static_cast<std::uint64_t>(seed++), 0.5, 3);
      for (const auto& [name, op] : ops) {
        expect_same(fmt::format("{} {} {}x{}", name, dtype_name(dt), fmt::join(sa, ","),
                                fmt::join(sb, ",")),
                    [op = op](const auto& in) { return std::vector<Tensor>{op(in[0], in[1])}; },
                    {a, b});
      }
    }
  }
}

TEST(LazyEqualsEager, UnaryMathAndFusedChains) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    for (const Shape& s : {Shape{1}, Shape{31}, Shape{4096}, Shape{3, 5000}, Shape{}}) {
      const Tensor x = input(s, dt, 7);
      const Tensor y = input(s, dt, 8, 0.1, 4);
      const std::string tag = fmt::format("{} [{}]", dtype_name(dt), fmt::join(s, ","));
      expect_same("unary " + tag,
                  [](const auto& in) {
                    const Tensor& a = in[0];
                    const Tensor& p = in[1];
                    return std::vector<Tensor>{neg(a),    abs(a),      exp(a),     log(p),
                                               sqrt(p),   tanh(a),     sigmoid(a), relu(a),
                                               pow(p, 2), pow(p, 1.7), pow(a, 3)};
                  },
                  {x, y});
      expect_same("chain " + tag,
                  [](const auto& in) {
                    const Tensor& a = in[0];
                    const Tensor& b = in[1];
                    Tensor t = tanh(a * b + 1.0) * 0.5;
                    return std::vector<Tensor>{t, where(gt(a, t), exp(-abs(a)), log(b) - t),
                                               cast(t * 100.0, DType::kInt32)};
                  },
                  {x, y});
    }
  }
}

TEST(LazyEqualsEager, ReductionsOfChainsOverEveryAxisSet) {
  const Tensor x = input({6, 700, 5}, DType::kFloat32, 11);
  const Tensor xi = input({6, 700, 5}, DType::kInt32, 12);
  const std::vector<std::vector<std::int64_t>> axes_sets = {{},     {0},    {1},   {2},
                                                            {0, 1}, {1, 2}, {0, 2}};
  for (const auto& axes : axes_sets) {
    const std::string tag = fmt::format("axes [{}]", fmt::join(axes, ","));
    expect_same(tag,
                [&axes](const auto& in) {
                  Tensor t = in[0] * in[0] + 1.0;
                  return std::vector<Tensor>{sum(t, axes),          mean(t, axes, true),
                                             max(exp(in[0]), axes), sum(in[1], axes),
                                             max(in[1], axes),      sum(in[0], axes)};
                },
                {x, xi});
  }
  expect_same("argmax",
              [](const auto& in) {
                return std::vector<Tensor>{argmax(in[0], 1), argmax(in[0] * 2.0, 0, true),
                                           argmax(in[1], 2)};
              },
              {x, xi});
}

TEST(LazyEqualsEager, ShapeLinearAlgebraAndNnOps) {
  const Tensor a = input({2, 16, 33}, DType::kFloat32, 21);
  const Tensor w = input({33, 10}, DType::kFloat32, 22);
  const Tensor labels = cast(abs(input({32}, DType::kInt64, 23)), DType::kInt64);
  expect_same("nn",
              [](const auto& in) {
                Tensor h = matmul(in[0], in[1]);  // [2, 16, 10]
                Tensor flat = reshape(h, {32, 10});
                Tensor lab = cast(in[2] - cast(in[2] / 10.0, DType::kInt64) * 10.0, DType::kInt64);
                Tensor z = concat({slice_rows(flat, 0, 8), slice_rows(flat, 8, 32) * 2.0}, 0);
                return std::vector<Tensor>{softmax(z),
                                           log_softmax(z, 0),
                                           cross_entropy(z, lab),
                                           transpose(h, 0, 2),
                                           broadcast_to(sum(z, {0}), {3, 10}),
                                           one_hot(lab, 10)};
              },
              {a, w, labels});
}

TEST(LazyEqualsEager, RandomStreamsMatch) {
  expect_same("random",
              [](const auto&) {
                Generator g(99);
                Tensor u = uniform({3, 1001}, g);
                Tensor n = normal({777}, g, 0.5, 2.0, DType::kFloat64);
                return std::vector<Tensor>{u, n, u * 2.0 + 1.0};
              },
              {});
}

}  // namespace
}  // namespace c10d::inline v1::lazy
