// Kernels: the code that computes values, shared by eager and lazy mode (so both give the same
// bits). Buffers are dense, contiguous, and never written after the step that made them.
//
// Thread-safety: kernels touch only their arguments and per-thread scratch; any thread may run
// them. Eigen is built with EIGEN_DONT_PARALLELIZE: every kernel runs on the calling thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/check.h"
#include "lazy/program.h"

namespace c10d::inline v1::lazy {

// Calls f(T{}) with the C++ type of `t`, for the dtypes kernels compute in: float32, float64,
// int32, int64, and bool when `with_bool`. Any other dtype is an InvalidArgument.
template <class F>
void dispatch_dtype(DType t, F&& f, bool with_bool = false) {
  switch (t) {
    case DType::kFloat32:
      f(float{});
      return;
    case DType::kFloat64:
      f(double{});
      return;
    case DType::kInt32:
      f(std::int32_t{});
      return;
    case DType::kInt64:
      f(std::int64_t{});
      return;
    case DType::kBool:
      if (with_bool) {
        f(bool{});
        return;
      }
      break;
    default:
      break;
  }
  C10D_THROW(InvalidArgument, "no kernel for dtype {}", dtype_name(t));
}

// Elements per tile of a fused kernel: a few registers of this size stay in L1. With AVX2,
// tanh(x*x+1)*0.5 over 16M floats ran fastest at 512 (10.5 ms; 11.5 at 1024, 16.5 at 2048,
// 14.2 at 128, where dispatching each instruction per tile starts to show).
inline constexpr std::int64_t kTile = 512;

struct Buf {
  std::shared_ptr<Storage> storage;
  std::size_t offset = 0;
  void* data() const { return static_cast<std::uint8_t*>(storage->data()) + offset; }
};

// Uninitialized, 64-byte aligned bytes (Storage's own constructor zeroes them).
std::shared_ptr<Storage> allocate(std::size_t nbytes);

// Runs a fused kernel; its store and reduce slots must already have buffers.
void run_fused(const FusedKernel& k, std::vector<Buf>& bufs);

// Node kernels. `out` buffers are allocated by the caller.
// alpha x op(a) x op(b), op transposing the last two axes where ta / tb is set (alpha is
// applied by the GEMM as it stores its result: no pass of its own).
void run_matmul(const ValueType& a, bool ta, const ValueType& b, bool tb, const ValueType& out,
                const Buf& ba, const Buf& bb, const Buf& bo, double alpha = 1.0);
void run_transpose(const ValueType& in, std::int64_t dim0, std::int64_t dim1, const Buf& bi,
                   const Buf& bo);
void run_concat(const std::vector<ValueType>& ins, std::int64_t axis,
                const std::vector<const Buf*>& bins, const Buf& bo);
void run_one_hot(const ValueType& labels, const ValueType& out, const Buf& bl, const Buf& bo);
void run_argmax(const ValueType& in, std::int64_t axis, const Buf& bi, const Buf& bo);
void run_arange(const ValueType& out, double start, double step, const Buf& bo);
void run_random(bool normal, const ValueType& out, double a, double b, std::uint64_t seed,
                std::uint64_t counter, const Buf& bo);

// Converts `n` elements between any two dtypes (float16/bfloat16 through float32).
void convert(DType from, const void* src, DType to, void* dst, std::int64_t n);
// Writes `value`, converted to `dtype`, into n elements.
void fill(DType dtype, void* dst, std::int64_t n, double value);

}  // namespace c10d::inline v1::lazy
