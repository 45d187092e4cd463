// Conversions between float32 and the two 16-bit floating types, IEEE binary16 ("float16",
// "half") and bfloat16, whose values travel as their raw bits in a std::uint16_t.
//
// Narrowing rounds to nearest, ties to even, as torch and the hardware conversions do: values
// past the largest finite 16-bit value become infinity, values below the smallest subnormal
// become a signed zero, infinities stay infinities and a NaN stays a NaN of the same sign
// (quieted; the payload is not kept). Widening is exact.
//
// The functions have no branches on the value (the selects compile to blends), so a plain loop
// over an array of them vectorizes. The float16 ones follow the FP16 library by Marat Dukhan,
// which rounds by letting the FPU add a power of two: that needs float arithmetic done in
// float (true on x86-64 SSE and AArch64) and no -ffast-math. Pure functions: thread-safe.
#pragma once

#include <bit>
#include <cstdint>

namespace c10d::inline v1::core {

// float16 bits -> float32, exact.
inline float half_to_float(std::uint16_t h) {
  // Move the half to the top of a 32-bit word; `two_w` shifts the sign out, leaving the
  // exponent and mantissa at the top.
  const std::uint32_t w = static_cast<std::uint32_t>(h) << 16;
  const std::uint32_t sign = w & 0x80000000u;
  const std::uint32_t two_w = w + w;
  // Normal numbers (and Inf/NaN): shift exponent and mantissa into float32 position and
  // rebias the exponent by a multiplication. The exponent offset 0xE0 makes a half Inf/NaN
  // exponent (31) land on 0xFF, so they stay Inf/NaN through the multiply by 2^-112.
  constexpr std::uint32_t kExpOffset = 0xE0u << 23;
  constexpr float kExpScale = 0x1.0p-112f;
  const float normalized = std::bit_cast<float>((two_w >> 4) + kExpOffset) * kExpScale;
  // Subnormal halves: place the mantissa under the exponent of 0.5 and subtract 0.5, which
  // the FPU normalizes exactly.
  constexpr std::uint32_t kMagicMask = 126u << 23;
  constexpr float kMagicBias = 0.5f;
  const float denormalized = std::bit_cast<float>((two_w >> 17) | kMagicMask) - kMagicBias;
  constexpr std::uint32_t kDenormalizedCutoff = 1u << 27;
  const std::uint32_t magnitude = two_w < kDenormalizedCutoff
                                      ? std::bit_cast<std::uint32_t>(denormalized)
                                      : std::bit_cast<std::uint32_t>(normalized);
  return std::bit_cast<float>(sign | magnitude);
}

// float32 -> float16 bits, round to nearest even.
inline std::uint16_t float_to_half(float f) {
  // Saturate to infinity and flush below the half range by scaling: |f| * 2^112 * 2^-110
  // overflows exactly where the half would, and keeps the rest as |f| * 4.
  constexpr float kScaleToInf = 0x1.0p+112f;
  constexpr float kScaleToZero = 0x1.0p-110f;
  const std::uint32_t w = std::bit_cast<std::uint32_t>(f);
  const float abs_f = std::bit_cast<float>(w & 0x7FFFFFFFu);
  float base = (abs_f * kScaleToInf) * kScaleToZero;

  const std::uint32_t shl1_w = w + w;
  const std::uint32_t sign = w & 0x80000000u;
  // Adding a power of two whose unit in the last place is the half's ulp makes the FPU round
  // the mantissa to 10 bits (nearest even). Below the normal half range the bias is fixed, so
  // subnormals round at the subnormal ulp.
  std::uint32_t bias = shl1_w & 0xFF000000u;
  bias = bias < 0x71000000u ? 0x71000000u : bias;
  base = std::bit_cast<float>((bias >> 1) + 0x07800000u) + base;

  const std::uint32_t bits = std::bit_cast<std::uint32_t>(base);
  const std::uint32_t exp_bits = (bits >> 13) & 0x00007C00u;
  const std::uint32_t mantissa_bits = bits & 0x00000FFFu;
  const std::uint32_t nonsign = exp_bits + mantissa_bits;
  // shl1_w > 0xFF000000 exactly when f is a NaN: answer the canonical quiet NaN.
  return static_cast<std::uint16_t>((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : nonsign));
}

// bfloat16 bits -> float32, exact: bfloat16 is the top half of a float32.
inline float bfloat16_to_float(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

// float32 -> bfloat16 bits, round to nearest even.
inline std::uint16_t float_to_bfloat16(float f) {
  const std::uint32_t w = std::bit_cast<std::uint32_t>(f);
  // Adding 0x7FFF plus the lowest kept bit carries into the kept bits exactly when the dropped
  // half is above the midpoint, or at it with an odd kept part; a carry out of the mantissa
  // bumps the exponent, which turns the largest finite values into infinity as it should.
  const std::uint32_t rounded = (w + 0x7FFFu + ((w >> 16) & 1u)) >> 16;
  // Rounding a NaN could carry its payload into the sign or make it Inf; keep the sign and
  // set the quiet bit instead.
  const bool is_nan = (w & 0x7FFFFFFFu) > 0x7F800000u;
  return static_cast<std::uint16_t>(is_nan ? ((w >> 16) | 0x0040u) : rounded);
}

}  // namespace c10d::inline v1::core
