#include "elements.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/half.h"

namespace c10d::inline v1::conformance {
namespace {

std::uint64_t mix(std::uint64_t z) {  // splitmix64's finalizer
  z += 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename T>
T load(const void* base, std::int64_t i) {
  T v;
  std::memcpy(&v, static_cast<const std::byte*>(base) + i * static_cast<std::int64_t>(sizeof(T)),
              sizeof(T));
  return v;
}

template <typename T>
void store(void* base, std::int64_t i, T v) {
  std::memcpy(static_cast<std::byte*>(base) + i * static_cast<std::int64_t>(sizeof(T)), &v,
              sizeof(T));
}

Num get_at(DType dtype, const void* base, std::int64_t i) {
  switch (dtype) {
    case DType::kFloat32:
      return {load<float>(base, i), 0};
    case DType::kFloat64:
      return {load<double>(base, i), 0};
    case DType::kFloat16:
      return {core::half_to_float(load<std::uint16_t>(base, i)), 0};
    case DType::kBFloat16:
      return {core::bfloat16_to_float(load<std::uint16_t>(base, i)), 0};
    case DType::kInt8:
      return {0, load<std::int8_t>(base, i)};
    case DType::kUInt8:
    case DType::kBool:
      return {0, load<std::uint8_t>(base, i)};
    case DType::kInt16:
      return {0, load<std::int16_t>(base, i)};
    case DType::kInt32:
      return {0, load<std::int32_t>(base, i)};
    case DType::kInt64:
      return {0, load<std::int64_t>(base, i)};
  }
  return {};
}

void put_at(DType dtype, void* base, std::int64_t i, Num v) {
  switch (dtype) {
    case DType::kFloat32:
      return store(base, i, static_cast<float>(v.f));
    case DType::kFloat64:
      return store(base, i, v.f);
    case DType::kFloat16:
      return store(base, i, core::float_to_half(static_cast<float>(v.f)));
    case DType::kBFloat16:
      return store(base, i, core::float_to_bfloat16(static_cast<float>(v.f)));
    case DType::kInt8:
      return store(base, i, static_cast<std::int8_t>(v.i));
    case DType::kUInt8:
      return store(base, i, static_cast<std::uint8_t>(v.i));
    case DType::kBool:
      return store(base, i, static_cast<std::uint8_t>(v.i != 0));
    case DType::kInt16:
      return store(base, i, static_cast<std::int16_t>(v.i));
    case DType::kInt32:
      return store(base, i, static_cast<std::int32_t>(v.i));
    case DType::kInt64:
      return store(base, i, v.i);
  }
}

// The integer as `dtype` reads it once written (two's complement wraparound).
std::int64_t narrow(DType dtype, std::int64_t v) {
  switch (dtype) {
    case DType::kInt8:
      return static_cast<std::int8_t>(v);
    case DType::kUInt8:
      return static_cast<std::uint8_t>(v);
    case DType::kInt16:
      return static_cast<std::int16_t>(v);
    case DType::kInt32:
      return static_cast<std::int32_t>(v);
    case DType::kBool:
      return v != 0;
    default:
      return v;
  }
}

// Per-rank offsets of the integer SUM/MIN/MAX inputs: large enough that a SUM over three or
// more ranks wraps around (downwards too for the signed types, whose odd ranks go negative).
std::int64_t integer_offset(DType dtype, int rank) {
  const bool odd = rank % 2 == 1;
  switch (dtype) {
    case DType::kInt8:
      return odd ? -90 : 40;
    case DType::kUInt8:
      return 100;
    case DType::kInt16:
      return odd ? -0x5000 : 0x3000;
    case DType::kInt32:
      return odd ? -0x50000000LL : 0x30000000LL;
    case DType::kInt64:
      return odd ? -0x5000000000000000LL : 0x3000000000000000LL;
    default:
      return 0;
  }
}

bool is_and_like(ReduceOp op) {  // what bool reduces with logical and
  return op == ReduceOp::kProduct || op == ReduceOp::kMin || op == ReduceOp::kBand;
}

// Rank r's input at global index k (already reduced mod kPeriod); see the header.
Num input_value(DType dtype, ReduceOp op, int world, int r, std::int64_t k) {
  const std::uint64_t h =
      mix((static_cast<std::uint64_t>(r) << 32) ^ static_cast<std::uint64_t>(k));
  const std::int64_t small = (3 * r + 7 * k) % 23 - 8;  // in [-8, 14], distinct over 8 ranks
  static constexpr std::int64_t kFactors[4] = {1, 2, -1, 2};
  if (dtype == DType::kBool) {
    if (op == ReduceOp::kBxor) return {0, static_cast<std::int64_t>(h & 1)};
    // Three quarters ones for the and-like ops and one quarter for the or-like ones, so both
    // answers occur.
    return {0, is_and_like(op) ? (h % 4 != 0) : (h % 4 == 0)};
  }
  if (is_floating_point(dtype)) {
    switch (op) {
      case ReduceOp::kProduct:
        return {static_cast<double>(kFactors[h % 4]), 0};
      case ReduceOp::kAvg:
        return {static_cast<double>((r + k) % world + 1 + (k % 23) - 8), 0};
      default:
        return {static_cast<double>(small), 0};
    }
  }
  switch (op) {
    case ReduceOp::kProduct:
      return {0, narrow(dtype, kFactors[h % 4])};
    case ReduceOp::kBand:
      return {0, narrow(dtype, static_cast<std::int64_t>(h | (h >> 7)))};
    case ReduceOp::kBor:
      return {0, narrow(dtype, static_cast<std::int64_t>(h & (h >> 7)))};
    case ReduceOp::kBxor:
      return {0, narrow(dtype, static_cast<std::int64_t>(h))};
    default:
      return {0, narrow(dtype, small + integer_offset(dtype, r))};
  }
}

// One step of the reference reduction, in the wide domain (integers modulo 2^64).
Num combine(DType dtype, ReduceOp op, Num a, Num b) {
  if (is_floating_point(dtype)) {
    switch (op) {
      case ReduceOp::kProduct:
        return {a.f * b.f, 0};
      case ReduceOp::kMin:
        return {std::min(a.f, b.f), 0};
      case ReduceOp::kMax:
        return {std::max(a.f, b.f), 0};
      default:
        return {a.f + b.f, 0};
    }
  }
  if (dtype == DType::kBool) {
    if (op == ReduceOp::kBxor) return {0, a.i ^ b.i};
    return {0, is_and_like(op) ? (a.i & b.i) : (a.i | b.i)};
  }
  const auto ua = static_cast<std::uint64_t>(a.i);
  const auto ub = static_cast<std::uint64_t>(b.i);
  switch (op) {
    case ReduceOp::kProduct:
      return {0, static_cast<std::int64_t>(ua * ub)};
    case ReduceOp::kMin:
      return {0, std::min(a.i, b.i)};
    case ReduceOp::kMax:
      return {0, std::max(a.i, b.i)};
    case ReduceOp::kBand:
      return {0, a.i & b.i};
    case ReduceOp::kBor:
      return {0, a.i | b.i};
    case ReduceOp::kBxor:
      return {0, a.i ^ b.i};
    default:
      return {0, static_cast<std::int64_t>(ua + ub)};
  }
}

}  // namespace

Num get(const Tensor& t, std::int64_t index) { return get_at(t.dtype(), t.raw_data(), index); }

void put(const Tensor& t, std::int64_t index, Num v) { put_at(t.dtype(), t.raw_data(), index, v); }

bool same(DType dtype, Num a, Num b) {
  if (is_floating_point(dtype)) return a.f == b.f || (std::isnan(a.f) && std::isnan(b.f));
  return a.i == b.i;
}

std::string show(DType dtype, Num v) {
  return is_floating_point(dtype) ? fmt::format("{}", v.f) : fmt::format("{}", v.i);
}

Num key(DType dtype, std::uint64_t seed, std::int64_t j) {
  const std::uint64_t u = seed * 1000003ULL + static_cast<std::uint64_t>(j) * 7 + 1;
  switch (dtype) {
    case DType::kFloat32:
      return {static_cast<double>(u % (1ULL << 24)), 0};
    case DType::kFloat64:
      return {static_cast<double>(u % (1ULL << 53)), 0};
    case DType::kFloat16:  // every integer in [-2048, 2048] is a float16
      return {static_cast<double>(static_cast<std::int64_t>(u % 4096) - 2048), 0};
    case DType::kBFloat16:  // every integer in [-256, 256] is a bfloat16
      return {static_cast<double>(static_cast<std::int64_t>(u % 512) - 256), 0};
    case DType::kBool:
      return {0, static_cast<std::int64_t>(u & 1)};
    default:
      return {0, narrow(dtype, static_cast<std::int64_t>(u * 0x9e3779b97f4a7c15ULL))};
  }
}

void fill_key(const Tensor& t, std::uint64_t seed, std::int64_t first) {
  const DType dtype = t.dtype();
  void* base = t.raw_data();
  const std::int64_t n = t.numel();
  for (std::int64_t j = 0; j < n; ++j) put_at(dtype, base, j, key(dtype, seed, first + j));
}

Tensor key_tensor(std::vector<std::int64_t> shape, DType dtype, std::uint64_t seed,
                  std::int64_t first) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  fill_key(t, seed, first);
  return t;
}

bool supported(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      return !is_floating_point(dtype);
    case ReduceOp::kAvg:
    case ReduceOp::kPremulSum:
      return is_floating_point(dtype);
    default:
      return true;
  }
}

ReductionPattern::ReductionPattern(DType dtype, ReduceOp op, int world, int rank,
                                   std::int64_t extent)
    : dtype_(dtype), op_(op) {
  const std::int64_t n = std::min(extent, kPeriod);
  own_.resize(static_cast<std::size_t>(n));
  expected_.resize(static_cast<std::size_t>(n));
  for (std::int64_t k = 0; k < n; ++k) {
    Num acc;
    for (int q = 0; q < world; ++q) {
      Num v = input_value(dtype, op, world, q, k);
      if (q == rank) own_[k] = v;
      if (op == ReduceOp::kPremulSum) v.f *= kPremulFactor;
      acc = q == 0 ? v : combine(dtype, op, acc, v);
    }
    if (op == ReduceOp::kAvg) acc.f /= world;
    if (!is_floating_point(dtype)) acc.i = narrow(dtype, acc.i);
    expected_[k] = acc;
  }
}

void ReductionPattern::fill(const Tensor& t, std::int64_t first) const {
  void* base = t.raw_data();
  const std::int64_t n = t.numel();
  std::size_t k = static_cast<std::size_t>(first % kPeriod);
  for (std::int64_t j = 0; j < n; ++j) {
    put_at(dtype_, base, j, own_[k]);
    if (++k == static_cast<std::size_t>(kPeriod)) k = 0;
  }
}

Tensor ReductionPattern::expected(std::vector<std::int64_t> shape, std::int64_t first) const {
  Tensor t = Tensor::empty(std::move(shape), dtype_);
  void* base = t.raw_data();
  const std::int64_t n = t.numel();
  std::size_t k = static_cast<std::size_t>(first % kPeriod);
  for (std::int64_t j = 0; j < n; ++j) {
    put_at(dtype_, base, j, expected_[k]);
    if (++k == static_cast<std::size_t>(kPeriod)) k = 0;
  }
  return t;
}

}  // namespace c10d::inline v1::conformance
