// Reduction kernels. The (dtype, op) pair is resolved by a switch before any element is
// touched and selects a template instance whose inner loop is a plain indexed loop over
// __restrict pointers with one branch-free combine, which the compiler vectorizes. float16 and
// bfloat16 go through float32 in chunks: widen a chunk of each operand into a stack buffer,
// combine the float32 buffers, round back; each of the three loops vectorizes on its own.
#include "algorithms/reduce_kernels.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "core/check.h"
#include "core/half.h"

namespace c10d::inline v1::algorithms {
namespace {

// Elements per float32 chunk of the 16-bit paths: two 1 KiB buffers stay in L1 and the
// per-chunk overhead is small next to 256 elements of work.
constexpr std::int64_t kChunk = 256;

// One combine per op. Integer SUM and PRODUCT compute in the unsigned type so overflow wraps
// (as torch's integer tensors do) instead of being undefined; the narrowing back is modular
// since C++20.
struct Sum {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) + static_cast<U>(b));
    } else {
      return a + b;
    }
  }
};
struct Product {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_integral_v<T>) {
      // uint8 operands promote to int, whose range holds 255 * 255: no signed overflow.
      using U = std::make_unsigned_t<T>;
      return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
    } else {
      return a * b;
    }
  }
};
// MIN and MAX propagate NaN from either side, as torch.minimum/maximum do (a plain a < b ? a
// : b would drop a NaN in `a`). Written as selects so they compile to compare-and-blend.
struct Min {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a < b || a != a) ? a : b;
    } else {
      return b < a ? b : a;
    }
  }
};
struct Max {
  template <typename T>
  static T apply(T a, T b) {
    if constexpr (std::is_floating_point_v<T>) {
      return (a > b || a != a) ? a : b;
    } else {
      return b > a ? b : a;
    }
  }
};
struct BitAnd {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(a & b);
  }
};
struct BitOr {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(a | b);
  }
};
struct BitXor {
  template <typename T>
  static T apply(T a, T b) {
    return static_cast<T>(a ^ b);
  }
};
// bool bytes: any nonzero byte is true; results are normalized to 0 or 1.
struct LogicalOr {
  static std::uint8_t apply(std::uint8_t a, std::uint8_t b) {
    return static_cast<std::uint8_t>((a | b) != 0);
  }
};
struct LogicalAnd {
  static std::uint8_t apply(std::uint8_t a, std::uint8_t b) {
    return static_cast<std::uint8_t>((a != 0) & (b != 0));
  }
};
struct LogicalXor {
  static std::uint8_t apply(std::uint8_t a, std::uint8_t b) {
    return static_cast<std::uint8_t>((a != 0) ^ (b != 0));
  }
};

// The loop every reduction ends in: out[i] = op(a[i], in[i]), where out is either a itself or
// disjoint from it (two loops, so that each is vectorized over non-aliasing pointers).
template <typename Op, typename T>
void combine(T* out, const T* a, const T* __restrict in, std::int64_t count) {
  if (out == a) {
    T* __restrict acc = out;
    for (std::int64_t i = 0; i < count; ++i) acc[i] = Op::apply(acc[i], in[i]);
  } else {
    T* __restrict o = out;
    const T* __restrict x = a;
    for (std::int64_t i = 0; i < count; ++i) o[i] = Op::apply(x[i], in[i]);
  }
}

// Calls fn(OpType{}) for the combine that `op` accumulates with on element type T (AVG and
// PREMUL_SUM accumulate as SUM; see the header). Bitwise ops exist only for integers;
// validate_reduction has rejected them for floating types before this runs.
template <typename T, typename Fn>
void with_op(ReduceOp op, Fn&& fn) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
    case ReduceOp::kPremulSum:
      return fn(Sum{});
    case ReduceOp::kProduct:
      return fn(Product{});
    case ReduceOp::kMin:
      return fn(Min{});
    case ReduceOp::kMax:
      return fn(Max{});
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      if constexpr (std::is_integral_v<T>) {
        if (op == ReduceOp::kBand) return fn(BitAnd{});
        if (op == ReduceOp::kBor) return fn(BitOr{});
        return fn(BitXor{});
      }
      break;
  }
  C10D_THROW(InvalidArgument, "reduce op {} has no kernel", static_cast<int>(op));
}

void reduce_bool(ReduceOp op, std::uint8_t* out, const std::uint8_t* a, const std::uint8_t* in,
                 std::int64_t count) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kMax:
    case ReduceOp::kBor:
      return combine<LogicalOr>(out, a, in, count);
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kBand:
      return combine<LogicalAnd>(out, a, in, count);
    case ReduceOp::kBxor:
      return combine<LogicalXor>(out, a, in, count);
    case ReduceOp::kAvg:
    case ReduceOp::kPremulSum:
      break;
  }
  C10D_THROW(InvalidArgument, "reduce op {} has no bool kernel", static_cast<int>(op));
}

// The 16-bit floating types: how to widen to and round from float32.
struct Half {
  static float widen(std::uint16_t h) { return core::half_to_float(h); }
  static std::uint16_t narrow(float f) { return core::float_to_half(f); }
};
struct BFloat16 {
  static float widen(std::uint16_t b) { return core::bfloat16_to_float(b); }
  static std::uint16_t narrow(float f) { return core::float_to_bfloat16(f); }
};

template <typename Codec>
void widen(const std::uint16_t* __restrict src, float* __restrict dst, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) dst[i] = Codec::widen(src[i]);
}

template <typename Codec>
void narrow(const float* __restrict src, std::uint16_t* __restrict dst, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) dst[i] = Codec::narrow(src[i]);
}

// A chunk of `a` and of `in` is widened before the chunk of `out` is written, so out may be a.
template <typename Codec, typename Op>
void combine_16bit(std::uint16_t* out, const std::uint16_t* a, const std::uint16_t* in,
                   std::int64_t count) {
  float x[kChunk];
  float y[kChunk];
  for (std::int64_t start = 0; start < count; start += kChunk) {
    const std::int64_t n = std::min(kChunk, count - start);
    widen<Codec>(a + start, x, n);
    widen<Codec>(in + start, y, n);
    combine<Op>(x, x, y, n);
    narrow<Codec>(x, out + start, n);
  }
}

// data[i] = fn(data[i]) through float32, chunk by chunk.
template <typename Codec, typename Fn>
void map_16bit(std::uint16_t* data, std::int64_t count, Fn fn) {
  float a[kChunk];
  for (std::int64_t start = 0; start < count; start += kChunk) {
    const std::int64_t n = std::min(kChunk, count - start);
    widen<Codec>(data + start, a, n);
    for (std::int64_t i = 0; i < n; ++i) a[i] = fn(a[i]);
    narrow<Codec>(a, data + start, n);
  }
}

template <typename T, typename Fn>
void map(T* __restrict data, std::int64_t count, Fn fn) {
  for (std::int64_t i = 0; i < count; ++i) data[i] = fn(data[i]);
}

template <typename T>
void reduce_typed(ReduceOp op, void* out, const void* a, const void* in, std::int64_t count) {
  with_op<T>(op, [&](auto combine_op) {
    combine<decltype(combine_op)>(static_cast<T*>(out), static_cast<const T*>(a),
                                  static_cast<const T*>(in), count);
  });
}

template <typename Codec>
void reduce_16bit(ReduceOp op, void* out, const void* a, const void* in, std::int64_t count) {
  with_op<float>(op, [&](auto combine_op) {
    combine_16bit<Codec, decltype(combine_op)>(static_cast<std::uint16_t*>(out),
                                               static_cast<const std::uint16_t*>(a),
                                               static_cast<const std::uint16_t*>(in), count);
  });
}

void check_count(std::int64_t count) {
  C10D_CHECK(count >= 0, "reduction count {} is negative", count);
}

}  // namespace

void validate_reduction(DType dtype, ReduceOp op) {
  // Every small op passes here up to three times: the names are looked up only for an error.
  // is_floating_point throws InvalidArgument for an out-of-range dtype, reduce_op_name for an
  // out-of-range op.
  const bool floating = is_floating_point(dtype);
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kProduct:
    case ReduceOp::kMin:
    case ReduceOp::kMax:
      return;
    case ReduceOp::kBand:
    case ReduceOp::kBor:
    case ReduceOp::kBxor:
      C10D_CHECK(!floating,
                 "reduce op '{}' is bitwise and not defined for floating-point dtype '{}'",
                 reduce_op_name(op), dtype_name(dtype));
      return;
    case ReduceOp::kAvg:
    case ReduceOp::kPremulSum:
      C10D_CHECK(floating, "reduce op '{}' needs a floating-point dtype, not '{}'",
                 reduce_op_name(op), dtype_name(dtype));
      return;
  }
  static_cast<void>(reduce_op_name(op));  // throws: not a ReduceOp
}

void reduce_to(DType dtype, const Reduction& r, void* out, const void* a, const void* in,
               std::int64_t count) {
  validate_reduction(dtype, r.op);
  check_count(count);
  switch (dtype) {
    case DType::kFloat32:
      return reduce_typed<float>(r.op, out, a, in, count);
    case DType::kFloat64:
      return reduce_typed<double>(r.op, out, a, in, count);
    case DType::kFloat16:
      return reduce_16bit<Half>(r.op, out, a, in, count);
    case DType::kBFloat16:
      return reduce_16bit<BFloat16>(r.op, out, a, in, count);
    case DType::kInt8:
      return reduce_typed<std::int8_t>(r.op, out, a, in, count);
    case DType::kUInt8:
      return reduce_typed<std::uint8_t>(r.op, out, a, in, count);
    case DType::kInt16:
      return reduce_typed<std::int16_t>(r.op, out, a, in, count);
    case DType::kInt32:
      return reduce_typed<std::int32_t>(r.op, out, a, in, count);
    case DType::kInt64:
      return reduce_typed<std::int64_t>(r.op, out, a, in, count);
    case DType::kBool:
      return reduce_bool(r.op, static_cast<std::uint8_t*>(out), static_cast<const std::uint8_t*>(a),
                         static_cast<const std::uint8_t*>(in), count);
  }
}

void reduce_into(DType dtype, const Reduction& r, void* acc, const void* in, std::int64_t count) {
  reduce_to(dtype, r, acc, acc, in, count);
}

void premul_in_place(DType dtype, double factor, void* data, std::int64_t count) {
  validate_reduction(dtype, ReduceOp::kPremulSum);
  check_count(count);
  const auto f = static_cast<float>(factor);
  const auto scale = [f](float x) { return x * f; };
  switch (dtype) {
    case DType::kFloat32:
      return map(static_cast<float*>(data), count, scale);
    case DType::kFloat64:
      return map(static_cast<double*>(data), count, [factor](double x) { return x * factor; });
    case DType::kFloat16:
      return map_16bit<Half>(static_cast<std::uint16_t*>(data), count, scale);
    case DType::kBFloat16:
      return map_16bit<BFloat16>(static_cast<std::uint16_t*>(data), count, scale);
    default:
      break;  // rejected by validate_reduction
  }
}

void finish_average(DType dtype, void* data, std::int64_t count, int world_size) {
  validate_reduction(dtype, ReduceOp::kAvg);
  check_count(count);
  C10D_CHECK(world_size >= 1, "average over world size {}", world_size);
  // Divide rather than multiply by 1/n: 1/n is inexact for most n, the quotient is correctly
  // rounded, and a division per element costs little next to moving the bytes.
  const auto n = static_cast<float>(world_size);
  const auto divide = [n](float x) { return x / n; };
  switch (dtype) {
    case DType::kFloat32:
      return map(static_cast<float*>(data), count, divide);
    case DType::kFloat64:
      return map(static_cast<double*>(data), count,
                 [world_size](double x) { return x / static_cast<double>(world_size); });
    case DType::kFloat16:
      return map_16bit<Half>(static_cast<std::uint16_t*>(data), count, divide);
    case DType::kBFloat16:
      return map_16bit<BFloat16>(static_cast<std::uint16_t*>(data), count, divide);
    default:
      break;  // rejected by validate_reduction
  }
}

}  // namespace c10d::inline v1::algorithms
