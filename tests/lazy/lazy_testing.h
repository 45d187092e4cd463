// Helpers for the lazy-core tests: tensors from values, values out of tensors, and a guard that
// sets lazy or eager mode for one test.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "c10d/lazy.h"
#include "c10d/tensor.h"

namespace c10d::inline v1::lazy::testing {

// Sets the mode for its scope and restores lazy mode after.
class ModeGuard {
 public:
  explicit ModeGuard(bool lazy) { set_lazy(lazy); }
  ~ModeGuard() { set_lazy(true); }
  ModeGuard(const ModeGuard&) = delete;
  ModeGuard& operator=(const ModeGuard&) = delete;
};

template <class T>
Tensor make(const std::vector<T>& values, std::vector<std::int64_t> shape, DType dtype) {
  Tensor t = Tensor::from_vector(values, dtype);
  return t.view(std::move(shape));
}
inline Tensor f32(const std::vector<float>& v, std::vector<std::int64_t> shape) {
  return make(v, std::move(shape), DType::kFloat32);
}
inline Tensor f32(const std::vector<float>& v) {
  return f32(v, {static_cast<std::int64_t>(v.size())});
}
inline Tensor f64(const std::vector<double>& v, std::vector<std::int64_t> shape) {
  return make(v, std::move(shape), DType::kFloat64);
}
inline Tensor i64(const std::vector<std::int64_t>& v, std::vector<std::int64_t> shape) {
  return make(v, std::move(shape), DType::kInt64);
}
inline Tensor i64(const std::vector<std::int64_t>& v) {
  return i64(v, {static_cast<std::int64_t>(v.size())});
}
inline Tensor i32(const std::vector<std::int32_t>& v, std::vector<std::int64_t> shape) {
  return make(v, std::move(shape), DType::kInt32);
}

// The tensor's elements converted to double (reads it: computes a pending value).
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  const void* p = t.raw_data();
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat32:
        out[i] = static_cast<const float*>(p)[i];
        break;
      case DType::kFloat64:
        out[i] = static_cast<const double*>(p)[i];
        break;
      case DType::kInt32:
        out[i] = static_cast<const std::int32_t*>(p)[i];
        break;
      case DType::kInt64:
        out[i] = static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
        break;
      case DType::kBool:
        out[i] = static_cast<const bool*>(p)[i] ? 1 : 0;
        break;
      default:
        ADD_FAILURE() << "values(): unexpected dtype";
    }
  }
  return out;
}

// The tensor's raw bytes (for exact lazy-versus-eager comparisons).
inline std::vector<std::uint8_t> bytes_of(const Tensor& t) {
  const auto b = t.bytes();
  return {b.begin(), b.end()};
}

inline void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                        double tol = 1e-5) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << "at index " << i;
  }
}

}  // namespace c10d::inline v1::lazy::testing
