// Reduction kernels: the elementwise arithmetic every collective algorithm applies when it
// combines a received block with its own. Pure functions on caller-owned memory; thread-safe
// for disjoint buffers. No allocation (float16/bfloat16 go through a small stack buffer).
//
// How the algorithms use them, for a reduction `r` on `dtype`:
//   validate_reduction(dtype, r.op);                   // before any message, on every rank
//   if (r.op == kPremulSum) premul_in_place(dtype, r.premul_factor, own, n);  // once, own input
//   reduce_into(dtype, r, acc, received, n);          // for every block received, any order
//   if (r.op == kAvg) finish_average(dtype, result, n, world_size);         // once, at the end
// So every contribution is scaled exactly once, at its source, and every partial result in
// flight (a ring's running block, a tree's subtree sum) is a plain sum of scaled
// contributions; reduce_into therefore combines both AVG and PREMUL_SUM as SUM. Scaling on
// receipt instead would scale a partial once per hop.
//
// Semantics per dtype:
//  - float32/float64: IEEE arithmetic in the dtype. MIN and MAX propagate NaN, as
//    torch.minimum/maximum do. Bitwise ops are rejected.
//  - float16/bfloat16: each element is widened to float32, combined, and rounded back to
//    nearest even (core/half.h); so a chain of reduce_into calls rounds after every step, as a
//    16-bit buffer must. Bitwise ops are rejected.
//  - int8/uint8/int32/int64: SUM and PRODUCT wrap around (two's complement) instead of
//    overflowing; AVG and PREMUL_SUM are rejected, as NCCL and Gloo reject them for integers.
//  - bool (one byte, 0 or 1; any nonzero byte reads as true, results are 0 or 1): SUM, MAX,
//    BOR are logical or; PRODUCT, MIN, BAND logical and; BXOR logical xor. AVG and PREMUL_SUM
//    are rejected.
// A rejected combination throws InvalidArgument naming the op and the dtype.
#pragma once

#include <cstdint>

#include "c10d/types.h"

namespace c10d::inline v1::algorithms {

// Throws InvalidArgument, naming op and dtype, unless the kernels support `op` on `dtype`
// (table above). Cheap; the kernels below call it too, but an algorithm should call it before
// it sends anything so that a bad call fails on every rank alike instead of mid-collective.
void validate_reduction(DType dtype, ReduceOp op);

// acc[i] = op(acc[i], in[i]) for i in [0, count): SUM, PRODUCT, MIN, MAX, BAND, BOR, BXOR.
// AVG and PREMUL_SUM accumulate as SUM: acc[i] = acc[i] + in[i], where `in` already holds
// contributions scaled by premul_in_place (PREMUL_SUM; r.premul_factor is not read here) or
// not yet divided by finish_average (AVG). `acc` and `in` hold `count` elements of `dtype`
// and must not overlap. Throws InvalidArgument for a negative count or an unsupported
// (op, dtype).
void reduce_into(DType dtype, const Reduction& r, void* acc, const void* in, std::int64_t count);

// out[i] = op(a[i], in[i]): reduce_into with a separate destination, under the same rules. `out`
// is either `a` itself (then this is reduce_into) or disjoint from it; `in` overlaps neither.
void reduce_to(DType dtype, const Reduction& r, void* out, const void* a, const void* in,
               std::int64_t count);

// data[i] = factor * data[i]: scales one rank's contribution to a PREMUL_SUM before it is
// reduced. float64 multiplies in double; float32 by float(factor); float16/bfloat16 widen to
// float32, multiply by float(factor) and round back. Throws InvalidArgument for integer and
// bool dtypes, or a negative count.
void premul_in_place(DType dtype, double factor, void* data, std::int64_t count);

// data[i] = data[i] / world_size: turns the SUM that an AVG accumulated into the average,
// once at the end. Divides (correctly rounded) in the dtype; float16/bfloat16 in float32 and
// round back. Throws InvalidArgument for integer and bool dtypes, world_size < 1 or a
// negative count.
void finish_average(DType dtype, void* data, std::int64_t count, int world_size);

}  // namespace c10d::inline v1::algorithms
