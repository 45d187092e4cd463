// Elements, value patterns and closed forms for the conformance suite (conformance.h).
//
// Words used here:
//  - global index: where an element sits in the data an op works on as a whole. For all_reduce
//    and reduce it is the tensor index; for reduce_scatter, block b element j of a rank's input
//    is global index b * count + j, so every block holds different values and a block sent to
//    the wrong rank shows.
//  - key pattern: the values the data-movement ops carry. Element j of the pattern with `seed`
//    is key(seed, j), written exactly in the dtype. No arithmetic touches them, so they only
//    need to differ; they use the dtype's full exact range (2^24 distinct floats in float32,
//    256 in bfloat16, every bit of an int64) so a misplaced element is caught.
//  - reduction pattern: rank r's input for a (dtype, reduce op, world size), and its closed
//    form. The values are chosen so that every partial result in any order is exact in the
//    dtype: sums stay within [-256, 256] in the floating dtypes (bfloat16 holds every integer
//    there), PRODUCT multiplies only 1, 2 and -1 (at most 2^8 over 8 ranks), PREMUL_SUM scales
//    by 0.5, and AVG's inputs (r + i) mod n + 1 + c(i) sum to n (n + 1) / 2 + n c(i), so the
//    average (n + 1) / 2 + c(i) is a half-integer, exact in every floating dtype. So closed
//    forms are compared exactly, whatever the order of combination. The integer dtypes add a
//    per-rank offset that makes SUM wrap around (both ways for the signed types) and PRODUCT
//    wraps at 2^8 in int8/uint8; the closed form is computed modulo 2^64 and narrowed, which is
//    what two's complement wraparound means. Patterns depend on the global index only modulo
//    kPeriod, which keeps the reference cheap for 1 << 20 elements.
//
// Thread-safety: pure functions and immutable objects.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "c10d/tensor.h"
#include "c10d/types.h"

namespace c10d::inline v1::conformance {

// Reduction patterns repeat after this many global indices: lcm(1..8) * 23, so (r + i) mod n
// repeats for every world size up to 8, and larger than every small count.
inline constexpr std::int64_t kPeriod = 840 * 23;

// One element in the widest form of its dtype: `f` for the floating dtypes (every one widens
// exactly into a double), `i` for the integers and bool (the value as the dtype reads it,
// sign-extended).
struct Num {
  double f = 0;
  std::int64_t i = 0;
};

Num get(const Tensor& t, std::int64_t index);
// Floating dtypes round v.f (the suite only writes exact values); integers wrap v.i modulo
// their width; bool writes v.i != 0.
void put(const Tensor& t, std::int64_t index, Num v);
// Equal, or both NaN.
bool same(DType dtype, Num a, Num b);
std::string show(DType dtype, Num v);

// The key pattern (see above).
Num key(DType dtype, std::uint64_t seed, std::int64_t j);
// Writes key(seed, first + j) into element j of t.
void fill_key(const Tensor& t, std::uint64_t seed, std::int64_t first = 0);
Tensor key_tensor(std::vector<std::int64_t> shape, DType dtype, std::uint64_t seed,
                  std::int64_t first = 0);

// True when the kernels of reduce_kernels.h accept `op` on `dtype`: bitwise ops only on
// integers and bool, AVG and PREMUL_SUM only on floating dtypes.
bool supported(DType dtype, ReduceOp op);

// The factor every PREMUL_SUM case scales by: exact in every floating dtype.
inline constexpr double kPremulFactor = 0.5;

// This rank's inputs and the closed form of one reduction over `world` ranks, for global
// indices [0, extent).
class ReductionPattern {
 public:
  ReductionPattern(DType dtype, ReduceOp op, int world, int rank, std::int64_t extent);

  Reduction reduction() const { return {op_, kPremulFactor}; }
  // Writes this rank's input for global indices [first, first + t.numel()) into t.
  void fill(const Tensor& t, std::int64_t first) const;
  // The closed form for global indices [first, first + numel(shape)).
  Tensor expected(std::vector<std::int64_t> shape, std::int64_t first) const;

 private:
  DType dtype_;
  ReduceOp op_;
  std::vector<Num> own_;       // this rank's input, by global index mod kPeriod
  std::vector<Num> expected_;  // the closed form, by global index mod kPeriod
};

}  // namespace c10d::inline v1::conformance
