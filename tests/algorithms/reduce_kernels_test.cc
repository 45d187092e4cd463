// The reduction kernels against a scalar reference: every dtype x op on seeded random data at
// counts that leave odd tails after any vector width and 16-bit chunk, then AVG and PREMUL_SUM
// the way the algorithms drive them over several ranks, 16-bit rounding and NaN/Inf cases, and
// the combinations that must be refused with a message naming op and dtype.
#include "algorithms/reduce_kernels.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "c10d/errors.h"
#include "core/half.h"

namespace c10d::inline v1::algorithms {
namespace {

using Rng = std::mt19937_64;

constexpr DType kAllDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16,
                                DType::kInt8,    DType::kUInt8,   DType::kInt16,   DType::kInt32,
                                DType::kInt64,   DType::kBool};
constexpr ReduceOp kAllOps[] = {ReduceOp::kSum, ReduceOp::kAvg,  ReduceOp::kProduct,
                                ReduceOp::kMin, ReduceOp::kMax,  ReduceOp::kBand,
                                ReduceOp::kBor, ReduceOp::kBxor, ReduceOp::kPremulSum};
constexpr std::int64_t kCounts[] = {0, 1, 7, 1000, 4097};

bool is_bitwise(ReduceOp op) {
  return op == ReduceOp::kBand || op == ReduceOp::kBor || op == ReduceOp::kBxor;
}
bool needs_floating(ReduceOp op) { return op == ReduceOp::kAvg || op == ReduceOp::kPremulSum; }
bool supported(DType dtype, ReduceOp op) {
  return is_floating_point(dtype) ? !is_bitwise(op) : !needs_floating(op);
}

// The scalar reference, written independently of the kernels: integer arithmetic in uint64
// (defined wrap-around, then truncated), NaN-propagating MIN/MAX spelled out.
template <typename T>
T reference(ReduceOp op, T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    const bool nan = std::isnan(a) || std::isnan(b);
    switch (op) {
      case ReduceOp::kMin:
        return nan ? std::numeric_limits<T>::quiet_NaN() : (b < a ? b : a);
      case ReduceOp::kMax:
        return nan ? std::numeric_limits<T>::quiet_NaN() : (b > a ? b : a);
      case ReduceOp::kProduct:
        return a * b;
      default:  // SUM, and AVG and PREMUL_SUM accumulate as SUM
        return a + b;
    }
  } else {
    const auto ua = static_cast<std::uint64_t>(a);
    const auto ub = static_cast<std::uint64_t>(b);
    switch (op) {
      case ReduceOp::kSum:
        return static_cast<T>(ua + ub);
      case ReduceOp::kProduct:
        return static_cast<T>(ua * ub);
      case ReduceOp::kMin:
        return a < b ? a : b;
      case ReduceOp::kMax:
        return a > b ? a : b;
      case ReduceOp::kBand:
        return static_cast<T>(ua & ub);
      case ReduceOp::kBor:
        return static_cast<T>(ua | ub);
      default:
        return static_cast<T>(ua ^ ub);
    }
  }
}

// Per-dtype test traits: storage type, random values, reference combine, equality, and (for
// floating dtypes) conversion from and to double.
template <typename T>
struct Arith {
  using Storage = T;
  static T random(Rng& rng) {
    if constexpr (std::is_floating_point_v<T>) {
      return static_cast<T>(std::uniform_real_distribution<double>(-4, 4)(rng));
    } else {
      return static_cast<T>(rng());  // full range: SUM and PRODUCT wrap
    }
  }
  static T combine(ReduceOp op, T a, T b) { return reference(op, a, b); }
  static bool equal(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    }
    return a == b;
  }
  static T from_double(double x) { return static_cast<T>(x); }
  static double to_double(T x) { return static_cast<double>(x); }
  static constexpr double kEpsilon = std::numeric_limits<T>::epsilon();
};

template <float (*kWiden)(std::uint16_t), std::uint16_t (*kNarrow)(float), int kMantissaBits>
struct Float16Like {
  using Storage = std::uint16_t;
  static Storage random(Rng& rng) {
    return kNarrow(std::uniform_real_distribution<float>(-8, 8)(rng));
  }
  static Storage combine(ReduceOp op, Storage a, Storage b) {
    return kNarrow(reference(op, kWiden(a), kWiden(b)));
  }
  static bool equal(Storage a, Storage b) { return Arith<float>::equal(kWiden(a), kWiden(b)); }
  static Storage from_double(double x) { return kNarrow(static_cast<float>(x)); }
  static double to_double(Storage x) { return kWiden(x); }
  static constexpr double kEpsilon = 1.0 / (1 << kMantissaBits);
};
using Half = Float16Like<core::half_to_float, core::float_to_half, 10>;
using BFloat16 = Float16Like<core::bfloat16_to_float, core::float_to_bfloat16, 7>;

struct Bool {
  using Storage = std::uint8_t;
  // Bytes 2 and 3 read as true too; results must come back as 0 or 1.
  static Storage random(Rng& rng) { return static_cast<Storage>(rng() % 4); }
  static Storage combine(ReduceOp op, Storage a, Storage b) {
    const bool x = a != 0;
    const bool y = b != 0;
    switch (op) {
      case ReduceOp::kSum:
      case ReduceOp::kMax:
      case ReduceOp::kBor:
        return x || y;
      case ReduceOp::kBxor:
        return x != y;
      default:  // PRODUCT, MIN, BAND
        return x && y;
    }
  }
  static bool equal(Storage a, Storage b) { return a == b; }
};

// Calls fn(Traits{}) with the traits of the floating `dtype`, which also convert to and from
// double.
template <typename Fn>
void visit_floating(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn(Arith<float>{});
    case DType::kFloat64:
      return fn(Arith<double>{});
    case DType::kFloat16:
      return fn(Half{});
    case DType::kBFloat16:
      return fn(BFloat16{});
    default:
      FAIL() << "not a floating dtype: " << dtype_name(dtype);
  }
}

// Calls fn(Traits{}) with the traits of `dtype`, any dtype.
template <typename Fn>
void visit(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
    case DType::kFloat64:
    case DType::kFloat16:
    case DType::kBFloat16:
      return visit_floating(dtype, fn);
    case DType::kInt8:
      return fn(Arith<std::int8_t>{});
    case DType::kUInt8:
      return fn(Arith<std::uint8_t>{});
    case DType::kInt16:
      return fn(Arith<std::int16_t>{});
    case DType::kInt32:
      return fn(Arith<std::int32_t>{});
    case DType::kInt64:
      return fn(Arith<std::int64_t>{});
    case DType::kBool:
      return fn(Bool{});
  }
}

template <typename Traits>
std::vector<typename Traits::Storage> random_buffer(Rng& rng, std::int64_t count) {
  std::vector<typename Traits::Storage> v(static_cast<std::size_t>(count));
  for (auto& x : v) x = Traits::random(rng);
  return v;
}

using DTypeOp = std::tuple<DType, ReduceOp>;

// The (dtype, op) pairs the kernels accept, or those they refuse.
std::vector<DTypeOp> pairs(bool accepted) {
  std::vector<DTypeOp> out;
  for (const DType dtype : kAllDTypes) {
    for (const ReduceOp op : kAllOps) {
      if (supported(dtype, op) == accepted) out.emplace_back(dtype, op);
    }
  }
  return out;
}

std::string pair_name(const testing::TestParamInfo<DTypeOp>& p) {
  return std::string(dtype_name(std::get<0>(p.param))) + "_" +
         std::string(reduce_op_name(std::get<1>(p.param)));
}

class ReduceIntoTest : public testing::TestWithParam<DTypeOp> {};

TEST_P(ReduceIntoTest, MatchesScalarReference) {
  const DType dtype = std::get<0>(GetParam());
  const ReduceOp op = std::get<1>(GetParam());
  EXPECT_NO_THROW(validate_reduction(dtype, op));
  visit(dtype, [&](auto traits) {
    using Traits = decltype(traits);
    for (const std::int64_t count : kCounts) {
      Rng rng(static_cast<std::uint64_t>(count) * 131 + static_cast<int>(dtype) * 17 +
              static_cast<int>(op));
      auto acc = random_buffer<Traits>(rng, count);
      const auto in = random_buffer<Traits>(rng, count);
      std::vector<typename Traits::Storage> expected(acc.size());
      for (std::size_t i = 0; i < acc.size(); ++i) {
        expected[i] = Traits::combine(op, acc[i], in[i]);
      }
      // A factor that PREMUL_SUM must not apply here: the input is already scaled.
      reduce_into(dtype, Reduction{op, 7.0}, acc.data(), in.data(), count);
      for (std::size_t i = 0; i < acc.size(); ++i) {
        ASSERT_TRUE(Traits::equal(acc[i], expected[i]))
            << "count " << count << " element " << i << ": got " << +acc[i] << ", expected "
            << +expected[i];
      }
    }
  });
}

// reduce_to writes op(a, in) to a buffer of its own and leaves both operands as they were.
TEST_P(ReduceIntoTest, ReduceToWritesASeparateOutput) {
  const DType dtype = std::get<0>(GetParam());
  const ReduceOp op = std::get<1>(GetParam());
  visit(dtype, [&](auto traits) {
    using Traits = decltype(traits);
    for (const std::int64_t count : kCounts) {
      Rng rng(static_cast<std::uint64_t>(count) * 71 + static_cast<int>(dtype) * 13 +
              static_cast<int>(op));
      const auto a = random_buffer<Traits>(rng, count);
      const auto in = random_buffer<Traits>(rng, count);
      const auto a_before = a;
      const auto in_before = in;
      auto out = random_buffer<Traits>(rng, count);
      reduce_to(dtype, Reduction{op, 7.0}, out.data(), a.data(), in.data(), count);
      for (std::size_t i = 0; i < out.size(); ++i) {
        const auto expected = Traits::combine(op, a[i], in[i]);
        ASSERT_TRUE(Traits::equal(out[i], expected))
            << "count " << count << " element " << i << ": got " << +out[i] << ", expected "
            << +expected;
      }
      // Bytes, not values: a NaN operand must be left as it was too.
      const auto same_bytes = [](const auto& x, const auto& y) {
        return x.empty() || std::memcmp(x.data(), y.data(), x.size() * sizeof(x[0])) == 0;
      };
      EXPECT_TRUE(same_bytes(a, a_before));
      EXPECT_TRUE(same_bytes(in, in_before));
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Accepted, ReduceIntoTest, testing::ValuesIn(pairs(true)), pair_name);

class RefusedReductionTest : public testing::TestWithParam<DTypeOp> {};

TEST_P(RefusedReductionTest, RefusesWithOpAndDTypeInMessage) {
  const auto [dtype, op] = GetParam();
  std::vector<std::uint8_t> acc(8), in(8);
  for (const bool validate_only : {true, false}) {
    try {
      if (validate_only) {
        validate_reduction(dtype, op);
      } else {
        reduce_into(dtype, Reduction{op}, acc.data(), in.data(), 1);
      }
      FAIL() << "accepted " << reduce_op_name(op) << " on " << dtype_name(dtype);
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string(reduce_op_name(op))), std::string::npos) << what;
      EXPECT_NE(what.find(std::string(dtype_name(dtype))), std::string::npos) << what;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Refused, RefusedReductionTest, testing::ValuesIn(pairs(false)), pair_name);

constexpr DType kFloatingDTypes[] = {DType::kFloat32, DType::kFloat64, DType::kFloat16,
                                     DType::kBFloat16};

class FloatingReduceTest : public testing::TestWithParam<DType> {};

// Drives AVG or PREMUL_SUM over `ranks` inputs the way an algorithm does and checks each element
// against `expected(sum over ranks of the inputs)` within a few units of the dtype's rounding.
template <typename Traits, typename Expected>
void check_multi_rank(DType dtype, const Reduction& r, int ranks, Expected expected) {
  for (const std::int64_t count : kCounts) {
    Rng rng(static_cast<std::uint64_t>(count) + 99);
    std::vector<std::vector<typename Traits::Storage>> inputs;
    for (int rank = 0; rank < ranks; ++rank) inputs.push_back(random_buffer<Traits>(rng, count));
    auto contributions = inputs;
    if (r.op == ReduceOp::kPremulSum) {
      for (auto& c : contributions) premul_in_place(dtype, r.premul_factor, c.data(), count);
    }
    auto acc = contributions[0];
    for (int rank = 1; rank < ranks; ++rank) {
      reduce_into(dtype, r, acc.data(), contributions[rank].data(), count);
    }
    if (r.op == ReduceOp::kAvg) finish_average(dtype, acc.data(), count, ranks);
    for (std::size_t i = 0; i < acc.size(); ++i) {
      double sum = 0;
      double magnitude = 0;
      for (const auto& in : inputs) {
        sum += Traits::to_double(in[i]);
        magnitude += std::fabs(Traits::to_double(in[i]));
      }
      const double want = expected(sum);
      const double tolerance = 4 * Traits::kEpsilon * std::fabs(expected(magnitude));
      ASSERT_NEAR(Traits::to_double(acc[i]), want, tolerance) << "count " << count << " at " << i;
    }
  }
}

TEST_P(FloatingReduceTest, AverageOverThreeRanksIsSumOverThree) {
  const DType dtype = GetParam();
  visit_floating(dtype, [&](auto traits) {
    check_multi_rank<decltype(traits)>(dtype, Reduction{ReduceOp::kAvg}, 3,
                                       [](double sum) { return sum / 3; });
  });
}

TEST_P(FloatingReduceTest, PremulSumScalesEveryContributionOnce) {
  const DType dtype = GetParam();
  for (const double factor : {0.5, -1.25, 3.0}) {
    visit_floating(dtype, [&](auto traits) {
      check_multi_rank<decltype(traits)>(dtype, Reduction{ReduceOp::kPremulSum, factor}, 4,
                                         [factor](double sum) { return factor * sum; });
    });
  }
}

TEST_P(FloatingReduceTest, NaNAndInfPropagate) {
  const DType dtype = GetParam();
  visit_floating(dtype, [&](auto traits) {
    using Traits = decltype(traits);
    constexpr double kInf = std::numeric_limits<double>::infinity();
    constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
    const auto v = [](double x) { return Traits::from_double(x); };
    struct Case {
      ReduceOp op;
      double a, b, want;
    };
    const Case cases[] = {
        {ReduceOp::kSum, kNaN, 1, kNaN},     {ReduceOp::kSum, 1, kNaN, kNaN},
        {ReduceOp::kSum, kInf, 1, kInf},     {ReduceOp::kSum, kInf, -kInf, kNaN},
        {ReduceOp::kProduct, kInf, 0, kNaN}, {ReduceOp::kProduct, -kInf, 2, -kInf},
        {ReduceOp::kMin, kNaN, 1, kNaN},     {ReduceOp::kMin, 1, kNaN, kNaN},
        {ReduceOp::kMax, kNaN, 1, kNaN},     {ReduceOp::kMax, 1, kNaN, kNaN},
        {ReduceOp::kMin, -kInf, 1, -kInf},   {ReduceOp::kMax, 1, kInf, kInf},
        {ReduceOp::kAvg, kInf, 1, kInf},     {ReduceOp::kPremulSum, kNaN, 1, kNaN},
    };
    for (const Case& c : cases) {
      // Pad to a vector-width multiple plus a tail so both loop parts see the case.
      std::vector<typename Traits::Storage> acc(37, v(c.a)), in(37, v(c.b));
      reduce_into(dtype, Reduction{c.op}, acc.data(), in.data(), 37);
      for (const auto& x : acc) {
        const double got = Traits::to_double(x);
        if (std::isnan(c.want)) {
          EXPECT_TRUE(std::isnan(got)) << reduce_op_name(c.op) << " " << c.a << " " << c.b;
        } else {
          EXPECT_EQ(got, c.want) << reduce_op_name(c.op) << " " << c.a << " " << c.b;
        }
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(FloatingDTypes, FloatingReduceTest, testing::ValuesIn(kFloatingDTypes),
                         [](const auto& p) { return std::string(dtype_name(p.param)); });

// Sums whose exact value is a tie between two 16-bit neighbours round to the even one.
TEST(Reduce16BitTest, SumRoundsTiesToEven) {
  struct Case {
    DType dtype;
    std::uint16_t a, b, want;
  };
  const Case cases[] = {
      {DType::kFloat16, 0x3C00, 0x1000, 0x3C00},   // 1 + 2^-11: tie, 1.0 is even
      {DType::kFloat16, 0x3C01, 0x1000, 0x3C02},   // (1 + 2^-10) + 2^-11: up to even
      {DType::kFloat16, 0x7BFF, 0x7BFF, 0x7C00},   // 65504 + 65504 overflows to Inf
      {DType::kFloat16, 0x0001, 0x0001, 0x0002},   // subnormals add exactly
      {DType::kBFloat16, 0x3F80, 0x3B80, 0x3F80},  // 1 + 2^-8: tie, 1.0 is even
      {DType::kBFloat16, 0x3F81, 0x3B80, 0x3F82},  // (1 + 2^-7) + 2^-8: up to even
      {DType::kBFloat16, 0x7F7F, 0x7F7F, 0x7F80},  // max + max overflows to Inf
  };
  for (const Case& c : cases) {
    std::vector<std::uint16_t> acc(300, c.a), in(300, c.b);  // spans two chunks
    reduce_into(c.dtype, Reduction{ReduceOp::kSum}, acc.data(), in.data(), 300);
    for (const auto x : acc) ASSERT_EQ(x, c.want) << dtype_name(c.dtype) << std::hex << c.a;
  }
}

TEST(Reduce16BitTest, PremulAndAverageRoundOnce) {
  // 3 * (1 + 2^-10) = 3 + 3 * 2^-10, exactly between two float16 neighbours 3 + 2^-9 (odd
  // mantissa) and 3 + 2^-8 (even): rounds to the even one.
  std::vector<std::uint16_t> h(5, 0x3C01);
  premul_in_place(DType::kFloat16, 3.0, h.data(), 5);
  for (const auto x : h) EXPECT_EQ(core::half_to_float(x), 3.0f + 0x1.0p-8f);
  // 3 / 3 is exact; 1 / 3 rounds to the nearest bfloat16.
  std::vector<std::uint16_t> b = {core::float_to_bfloat16(3.0f), core::float_to_bfloat16(1.0f)};
  finish_average(DType::kBFloat16, b.data(), 2, 3);
  EXPECT_EQ(core::bfloat16_to_float(b[0]), 1.0f);
  EXPECT_EQ(b[1], core::float_to_bfloat16(1.0f / 3));
}

TEST(ReduceKernelsTest, Float64PremulUsesTheDoubleFactor) {
  std::vector<double> d = {1.0, 3.0};
  premul_in_place(DType::kFloat64, 0.1, d.data(), 2);
  EXPECT_EQ(d[0], 0.1);
  EXPECT_EQ(d[1], 3.0 * 0.1);
}

TEST(ReduceKernelsTest, RefusesBadArguments) {
  std::vector<std::uint8_t> buf(16);
  const auto message_of = [](auto&& call) -> std::string {
    try {
      call();
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    return "no exception";
  };
  std::string m = message_of([&] { premul_in_place(DType::kInt8, 2.0, buf.data(), 1); });
  EXPECT_NE(m.find("premul_sum"), std::string::npos) << m;
  EXPECT_NE(m.find("int8"), std::string::npos) << m;
  m = message_of([&] { finish_average(DType::kUInt8, buf.data(), 1, 2); });
  EXPECT_NE(m.find("avg"), std::string::npos) << m;
  EXPECT_NE(m.find("uint8"), std::string::npos) << m;
  m = message_of([&] { finish_average(DType::kFloat32, buf.data(), 1, 0); });
  EXPECT_NE(m.find("world size 0"), std::string::npos) << m;
  m = message_of([&] {
    reduce_into(DType::kFloat32, Reduction{ReduceOp::kSum}, buf.data(), buf.data() + 8, -1);
  });
  EXPECT_NE(m.find("negative"), std::string::npos) << m;
  m = message_of([&] { validate_reduction(DType::kFloat32, static_cast<ReduceOp>(42)); });
  EXPECT_NE(m.find("42"), std::string::npos) << m;
  m = message_of([&] { validate_reduction(static_cast<DType>(99), ReduceOp::kSum); });
  EXPECT_NE(m.find("99"), std::string::npos) << m;
  m = message_of([&] { validate_reduction(DType::kFloat32, ReduceOp::kBxor); });
  EXPECT_NE(m.find("'bxor' is bitwise"), std::string::npos) << m;
  EXPECT_NE(m.find("float32"), std::string::npos) << m;
  m = message_of([&] { validate_reduction(DType::kInt32, ReduceOp::kAvg); });
  EXPECT_NE(m.find("'avg' needs a floating-point dtype"), std::string::npos) << m;
  EXPECT_NE(m.find("int32"), std::string::npos) << m;
  for (const ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kBand, ReduceOp::kBor, ReduceOp::kBxor}) {
    EXPECT_NO_THROW(validate_reduction(DType::kInt64, op));
  }
  EXPECT_NO_THROW(validate_reduction(DType::kBFloat16, ReduceOp::kPremulSum));
}

}  // namespace
}  // namespace c10d::inline v1::algorithms
