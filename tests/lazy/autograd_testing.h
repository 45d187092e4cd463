// Verbs for the autograd and nn tests: make tensors from values, read values back, and run
// every test in both modes (lazy and eager) through a parameterized fixture.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "c10d/lazy.h"
#include "c10d/tensor.h"

namespace c10d::inline v1::testing {

// A float64 (or other) tensor of `shape` holding `values` in row-major order.
inline Tensor make(const std::vector<double>& values, std::vector<std::int64_t> shape,
                   DType dtype = DType::kFloat64) {
  Tensor t = Tensor::empty(std::move(shape), dtype);
  EXPECT_EQ(static_cast<std::size_t>(t.numel()), values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    switch (dtype) {
      case DType::kFloat64:
        t.data<double>()[i] = values[i];
        break;
      case DType::kFloat32:
        t.data<float>()[i] = static_cast<float>(values[i]);
        break;
      case DType::kInt64:
        t.data<std::int64_t>()[i] = static_cast<std::int64_t>(values[i]);
        break;
      case DType::kInt32:
        t.data<std::int32_t>()[i] = static_cast<std::int32_t>(values[i]);
        break;
      case DType::kBool:
        t.data<bool>()[i] = values[i] != 0;
        break;
      default:
        ADD_FAILURE() << "make: unsupported dtype";
    }
  }
  return t;
}

// The values of `t` (materializing it) as doubles.
inline std::vector<double> values(const Tensor& t) {
  std::vector<double> out(static_cast<std::size_t>(t.numel()));
  for (std::size_t i = 0; i < out.size(); ++i) {
    switch (t.dtype()) {
      case DType::kFloat64:
        out[i] = t.data<double>()[i];
        break;
      case DType::kFloat32:
        out[i] = t.data<float>()[i];
        break;
      case DType::kInt64:
        out[i] = static_cast<double>(t.data<std::int64_t>()[i]);
        break;
      case DType::kInt32:
        out[i] = t.data<std::int32_t>()[i];
        break;
      case DType::kBool:
        out[i] = t.data<bool>()[i] ? 1 : 0;
        break;
      default:
        ADD_FAILURE() << "values: unsupported dtype";
    }
  }
  return out;
}

inline double item(const Tensor& t) { return values(t).at(0); }

// `n` values uniform in [lo, hi) from a fixed seed.
inline std::vector<double> uniform_values(std::size_t n, double lo, double hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// Values in +-[lo, hi), so no value sits near a kink at zero.
inline std::vector<double> away_from_zero(std::size_t n, double lo, double hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> dist(lo, hi);
  std::bernoulli_distribution sign(0.5);
  std::vector<double> v(n);
  for (auto& x : v) x = sign(rng) ? dist(rng) : -dist(rng);
  return v;
}

// Runs each test once lazy and once eager; restores the mode afterwards.
class BothModes : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    previous_ = lazy::is_lazy();
    lazy::set_lazy(GetParam());
  }
  void TearDown() override {
    lazy::mark_step();
    lazy::set_lazy(previous_);
  }

 private:
  bool previous_ = true;
};

inline std::string mode_name(const ::testing::TestParamInfo<bool>& info) {
  return info.param ? "Lazy" : "Eager";
}

}  // namespace c10d::inline v1::testing
