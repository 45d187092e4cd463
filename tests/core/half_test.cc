// float16 and bfloat16 conversions, checked exhaustively where the domain is small: every
// 16-bit pattern widens to the value its fields encode and narrows back to itself, every
// rounding midpoint ties to even (and its float32 neighbours go the right way), and random
// float32 bit patterns narrow to what an independent nearest-even rounding in double gives.
#include "core/half.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

namespace c10d::inline v1::core {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// The value a float16 bit pattern encodes, from its fields (IEEE 754 binary16).
double decode_half(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1F;
  const int mantissa = h & 0x3FF;
  const double sign = (h & 0x8000) ? -1.0 : 1.0;
  if (exponent == 0x1F) return mantissa == 0 ? sign * kInf : kNaN;
  if (exponent == 0) return sign * std::ldexp(mantissa, -24);
  return sign * std::ldexp(1024 + mantissa, exponent - 25);
}

bool is_half_nan(std::uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool is_bfloat16_nan(std::uint16_t b) { return (b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0; }

// Nearest-even rounding of `x` to a binary float with `mantissa_bits` explicit bits, minimum
// normal exponent `min_exp` and overflow threshold `limit` (the first power of two past the
// largest finite value), done in double, where every step is exact.
double round_reference(double x, int mantissa_bits, int min_exp, double limit) {
  if (x == 0 || std::isinf(x)) return x;
  int e = 0;
  std::frexp(x, &e);  // |x| in [2^(e-1), 2^e)
  const int exponent = std::max(e - 1, min_exp);
  const double ulp = std::ldexp(1.0, exponent - mantissa_bits);
  const double rounded = std::nearbyint(x / ulp) * ulp;  // default mode: ties to even
  if (std::fabs(rounded) >= limit) return std::copysign(kInf, x);
  return rounded == 0 ? std::copysign(0.0, x) : rounded;
}

TEST(HalfTest, WidensEveryPatternToItsEncodedValue) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = half_to_float(h);
    if (is_half_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << bits;
      EXPECT_EQ(std::signbit(f), (bits & 0x8000) != 0) << std::hex << bits;
    } else {
      EXPECT_EQ(static_cast<double>(f), decode_half(h)) << std::hex << bits;
      EXPECT_EQ(std::signbit(f), (bits & 0x8000) != 0) << std::hex << bits;
    }
  }
}

TEST(HalfTest, NarrowsEveryPatternBackToItself) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const std::uint16_t back = float_to_half(half_to_float(h));
    if (is_half_nan(h)) {
      EXPECT_EQ(back, (bits & 0x8000) | 0x7E00) << std::hex << bits;  // quiet, same sign
    } else {
      EXPECT_EQ(back, h) << std::hex << bits;
    }
  }
}

TEST(HalfTest, EveryMidpointTiesToEven) {
  for (std::uint32_t bits = 0; bits < 0x7C00; ++bits) {
    for (const std::uint32_t sign : {0u, 0x8000u}) {
      const auto lo = static_cast<std::uint16_t>(sign | bits);
      const auto hi = static_cast<std::uint16_t>(sign | (bits + 1));  // 0x7BFF + 1 is Inf
      // The next value after the largest finite half is 2^16 on the exponent grid.
      const double hi_value =
          bits + 1 == 0x7C00 ? std::copysign(65536.0, decode_half(lo)) : decode_half(hi);
      const auto mid = static_cast<float>((decode_half(lo) + hi_value) / 2);  // exact
      const std::uint16_t even = (bits & 1) == 0 ? lo : hi;
      EXPECT_EQ(float_to_half(mid), even) << std::hex << lo;
      const float away = std::nextafter(mid, sign ? -kInf : kInf);
      const float toward = std::nextafter(mid, 0.0f);
      EXPECT_EQ(float_to_half(away), hi) << std::hex << lo;
      EXPECT_EQ(float_to_half(toward), lo) << std::hex << lo;
    }
  }
}

TEST(HalfTest, NamedCases) {
  EXPECT_EQ(float_to_half(1.0f), 0x3C00);
  EXPECT_EQ(float_to_half(1.0f + 0x1.0p-11f), 0x3C00);      // tie, 1.0 is even
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1.0p-11f), 0x3C02);  // tie, 1 + 2^-9 is even
  EXPECT_EQ(float_to_half(1.0f + 0x1.0p-11f + 0x1.0p-20f), 0x3C01);
  EXPECT_EQ(float_to_half(65504.0f), 0x7BFF);  // largest finite
  EXPECT_EQ(float_to_half(65519.0f), 0x7BFF);
  EXPECT_EQ(float_to_half(65520.0f), 0x7C00);  // tie with 2^16 rounds to even: overflow
  EXPECT_EQ(float_to_half(1e10f), 0x7C00);
  EXPECT_EQ(float_to_half(-1e10f), 0xFC00);
  EXPECT_EQ(float_to_half(0x1.0p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_half(0x1.0p-25f), 0x0000);  // tie with zero rounds to even
  EXPECT_EQ(float_to_half(0x1.8p-25f), 0x0001);
  EXPECT_EQ(float_to_half(-1e-10f), 0x8000);
  EXPECT_EQ(float_to_half(0x1.0p-14f), 0x0400);  // smallest normal
  EXPECT_EQ(float_to_half(kInf), 0x7C00);
  EXPECT_EQ(float_to_half(-kInf), 0xFC00);
  EXPECT_EQ(float_to_half(kNaN), 0x7E00);
  EXPECT_EQ(float_to_half(-kNaN), 0xFE00);
  EXPECT_EQ(float_to_half(std::bit_cast<float>(0x7F800001u)), 0x7E00);  // signaling NaN
  EXPECT_EQ(half_to_float(0x7C00), kInf);
  EXPECT_EQ(half_to_float(0x3555), 0x1.554p-2f);
}

TEST(HalfTest, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(20240611);
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    const std::uint16_t h = float_to_half(x);
    if (std::isnan(x)) {
      EXPECT_TRUE(is_half_nan(h));
      continue;
    }
    const double expected = round_reference(x, 10, -14, 65536.0);
    ASSERT_EQ(decode_half(h), expected) << std::hexfloat << x;
    ASSERT_EQ(std::signbit(decode_half(h)), std::signbit(x)) << std::hexfloat << x;
  }
}

TEST(BFloat16Test, WidensAndNarrowsEveryPattern) {
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const auto b = static_cast<std::uint16_t>(bits);
    const float f = bfloat16_to_float(b);
    EXPECT_EQ(std::bit_cast<std::uint32_t>(f), bits << 16);
    const std::uint16_t back = float_to_bfloat16(f);
    if (is_bfloat16_nan(b)) {
      EXPECT_TRUE(is_bfloat16_nan(back)) << std::hex << bits;
      EXPECT_EQ(back & 0x8000, bits & 0x8000) << std::hex << bits;
    } else {
      EXPECT_EQ(back, b) << std::hex << bits;
    }
  }
}

TEST(BFloat16Test, EveryMidpointTiesToEven) {
  for (std::uint32_t bits = 0; bits < 0x7F80; ++bits) {
    for (const std::uint32_t sign : {0u, 0x8000u}) {
      const std::uint32_t lo = sign | bits;
      const std::uint32_t hi = lo + 1;  // 0x7F7F + 1 is Inf
      const auto mid = std::bit_cast<float>((lo << 16) | 0x8000u);
      EXPECT_EQ(float_to_bfloat16(mid), (bits & 1) == 0 ? lo : hi) << std::hex << lo;
      EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>((lo << 16) | 0x8001u)), hi);
      EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>((lo << 16) | 0x7FFFu)), lo);
    }
  }
}

TEST(BFloat16Test, NamedCases) {
  EXPECT_EQ(float_to_bfloat16(1.0f), 0x3F80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 0x1.0p-8f), 0x3F80);                   // tie, 1.0 is even
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * 0x1.0p-8f), 0x3F82);               // tie, 1 + 2^-6 is even
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7F80);  // overflows
  EXPECT_EQ(float_to_bfloat16(kInf), 0x7F80);
  EXPECT_EQ(float_to_bfloat16(-kInf), 0xFF80);
  EXPECT_EQ(float_to_bfloat16(kNaN), 0x7FC0);
  // NaNs whose rounding would carry into the exponent or sign stay NaN of their sign.
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x7FFFFFFFu)), 0x7FFF);
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0x7F800001u)), 0x7FC0);
  EXPECT_EQ(float_to_bfloat16(std::bit_cast<float>(0xFF800001u)), 0xFFC0);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(BFloat16Test, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1'000'000; ++i) {
    const float x = std::bit_cast<float>(static_cast<std::uint32_t>(rng()));
    const std::uint16_t b = float_to_bfloat16(x);
    const float back = bfloat16_to_float(b);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(back));
      continue;
    }
    const double expected = round_reference(x, 7, -126, 0x1.0p128);
    ASSERT_EQ(static_cast<double>(back), expected) << std::hexfloat << x;
    ASSERT_EQ(std::signbit(back), std::signbit(x)) << std::hexfloat << x;
  }
}

}  // namespace
}  // namespace c10d::inline v1::core
