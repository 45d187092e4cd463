#include "sweep_data.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "c10d/errors.h"
#include "core/half.h"

namespace c10d::inline v1::bench {
namespace {

// How one dtype's elements are read and written as doubles. Every value the sweep writes or
// expects is exact in double, so a round trip through store() is the dtype's own rounding.
template <typename T>
struct PlainElement {
  using Bits = T;
  static double load(Bits x) { return static_cast<double>(x); }
  static Bits store(double v) { return static_cast<Bits>(v); }
};
struct HalfElement {
  using Bits = std::uint16_t;
  static double load(Bits x) { return core::half_to_float(x); }
  static Bits store(double v) { return core::float_to_half(static_cast<float>(v)); }
};
struct BFloat16Element {
  using Bits = std::uint16_t;
  static double load(Bits x) { return core::bfloat16_to_float(x); }
  static Bits store(double v) { return core::float_to_bfloat16(static_cast<float>(v)); }
};

template <typename F>
void visit_element(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32:
      return f(PlainElement<float>{});
    case DType::kFloat64:
      return f(PlainElement<double>{});
    case DType::kFloat16:
      return f(HalfElement{});
    case DType::kBFloat16:
      return f(BFloat16Element{});
    case DType::kInt8:
      return f(PlainElement<std::int8_t>{});
    case DType::kUInt8:
      return f(PlainElement<std::uint8_t>{});
    case DType::kInt32:
      return f(PlainElement<std::int32_t>{});
    case DType::kInt64:
      return f(PlainElement<std::int64_t>{});
    default:
      throw InvalidArgument(
          fmt::format("the benchmark has no values for dtype {}", dtype_name(dtype)));
  }
}

// The largest L such that the dtype holds every integer in [0, L] exactly.
std::int64_t exact_integer_limit(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
      return 127;
    case DType::kUInt8:
      return 255;
    case DType::kBFloat16:
      return 256;
    case DType::kFloat16:
      return 2048;
    case DType::kFloat32:
      return std::int64_t{1} << 24;
    case DType::kFloat64:
      return std::int64_t{1} << 53;
    case DType::kInt32:
      return std::numeric_limits<std::int32_t>::max();
    default:
      return std::numeric_limits<std::int64_t>::max();
  }
}

// The largest t such that 2^t fits the dtype (exactly, being a power of two).
std::int64_t max_factors_of_two(DType dtype) {
  switch (dtype) {
    case DType::kInt8:
      return 6;
    case DType::kUInt8:
      return 7;
    case DType::kFloat16:
      return 15;
    case DType::kInt32:
      return 30;
    case DType::kInt64:
      return 62;
    case DType::kFloat64:
      return 1023;
    default:
      return 127;  // float32, bfloat16
  }
}

// The reduction pattern of the header comment, and its closed-form result.
class ReductionPattern {
 public:
  ReductionPattern(ReduceOp op, DType dtype, int world_size)
      : op_(op), dtype_(dtype), n_(world_size) {
    if (op == ReduceOp::kMin || op == ReduceOp::kMax) {
      k_ = 64;
    } else {
      k_ = 1 + std::min<std::int64_t>(63, exact_integer_limit(dtype) / n_);
    }
    twos_ = std::min<std::int64_t>(n_, max_factors_of_two(dtype));
  }

  // What rank r contributes at index i.
  double value(int r, std::int64_t i) const {
    if (op_ == ReduceOp::kProduct) return (r < twos_ && (r + i) % 3 == 0) ? 2.0 : 1.0;
    return static_cast<double>((r + i) % k_);
  }

  // The reduction over every rank at index i, before rounding to the dtype.
  double result(std::int64_t i) const {
    const std::int64_t s = i % k_;
    const bool wraps = n_ >= k_ || s + n_ > k_;  // the n values (s + r) mod k pass k - 1
    switch (op_) {
      case ReduceOp::kMin:
        return wraps ? 0.0 : static_cast<double>(s);
      case ReduceOp::kMax:
        return static_cast<double>(wraps ? k_ - 1 : s + n_ - 1);
      case ReduceOp::kProduct: {
        // Ranks r < twos_ with r = -i (mod 3) contribute a factor 2.
        const std::int64_t first = (3 - i % 3) % 3;
        const std::int64_t factors = twos_ > first ? (twos_ - 1 - first) / 3 + 1 : 0;
        return std::ldexp(1.0, static_cast<int>(factors));
      }
      case ReduceOp::kAvg: {
        const double sum = this->sum(s);
        if (dtype_ == DType::kFloat64) return sum / n_;
        return static_cast<double>(static_cast<float>(sum) / static_cast<float>(n_));
      }
      default:
        return sum(s);
    }
  }

 private:
  // Sum over r in [0, n) of (s + r) mod k: n / k whole cycles, then the first n mod k terms
  // from s, less k for each of those that wrapped.
  double sum(std::int64_t s) const {
    const std::int64_t cycles = n_ / k_;
    const std::int64_t rest = n_ % k_;
    const std::int64_t total = cycles * (k_ * (k_ - 1) / 2) + rest * s + rest * (rest - 1) / 2 -
                               k_ * std::max<std::int64_t>(0, s + rest - k_);
    return static_cast<double>(total);
  }

  ReduceOp op_;
  DType dtype_;
  std::int64_t n_;
  std::int64_t k_ = 1;
  std::int64_t twos_ = 0;
};

double copy_value(std::int64_t block, std::int64_t i) {
  return static_cast<double>((13 * block + i) % 127);
}

}  // namespace

bool is_reduction(Collective collective) {
  return collective == Collective::kAllReduce || collective == Collective::kReduce ||
         collective == Collective::kReduceScatter;
}

std::int64_t send_elements(const OpCall& call, int world_size) {
  switch (call.collective) {
    case Collective::kReduceScatter:
    case Collective::kAllToAll:
      return call.count * world_size;
    default:
      return call.count;
  }
}

std::int64_t recv_elements(const OpCall& call, int world_size) {
  switch (call.collective) {
    case Collective::kAllGather:
    case Collective::kAllToAll:
      return call.count * world_size;
    default:
      return call.count;
  }
}

void fill_buffers(const OpCall& call, int rank, int world_size, void* recv_buffer,
                  std::int64_t recv_buffer_elements) {
  visit_element(call.dtype, [&]<typename E>(E) {
    using Bits = typename E::Bits;
    const Bits sentinel = E::store(call.dtype == DType::kUInt8 ? 255.0 : -1.0);
    std::fill_n(static_cast<Bits*>(recv_buffer), recv_buffer_elements, sentinel);

    Bits* in = static_cast<Bits*>(call.send);
    const std::int64_t c = call.count;
    const std::int64_t n = world_size;
    if (is_reduction(call.collective)) {
      const ReductionPattern pattern(call.op, call.dtype, world_size);
      const std::int64_t elements = send_elements(call, world_size);
      for (std::int64_t i = 0; i < elements; ++i) in[i] = E::store(pattern.value(rank, i));
      return;
    }
    switch (call.collective) {
      case Collective::kBroadcast:
        if (rank != call.root) return;
        for (std::int64_t i = 0; i < c; ++i) in[i] = E::store(copy_value(call.root, i));
        return;
      case Collective::kAllGather:
        for (std::int64_t i = 0; i < c; ++i) in[i] = E::store(copy_value(rank, i));
        return;
      default:  // all_to_all: block d goes to rank d
        for (std::int64_t d = 0; d < n; ++d) {
          for (std::int64_t i = 0; i < c; ++i)
            in[d * c + i] = E::store(copy_value(rank * n + d, i));
        }
        return;
    }
  });
}

std::int64_t count_wrong(const OpCall& call, int rank, int world_size, const void* output) {
  if (call.collective == Collective::kReduce && rank != call.root) return 0;
  std::int64_t wrong = 0;
  visit_element(call.dtype, [&]<typename E>(E) {
    const auto* out = static_cast<const typename E::Bits*>(output);
    const auto expect = [&](std::int64_t j, double value) {
      if (E::load(out[j]) != E::load(E::store(value))) ++wrong;
    };
    const std::int64_t c = call.count;
    const std::int64_t n = world_size;
    switch (call.collective) {
      case Collective::kAllReduce:
      case Collective::kReduce:
      case Collective::kReduceScatter: {
        const ReductionPattern pattern(call.op, call.dtype, world_size);
        const std::int64_t first =
            call.collective == Collective::kReduceScatter ? rank * c : 0;  // this rank's block
        for (std::int64_t i = 0; i < c; ++i) expect(i, pattern.result(first + i));
        return;
      }
      case Collective::kBroadcast:
        for (std::int64_t i = 0; i < c; ++i) expect(i, copy_value(call.root, i));
        return;
      case Collective::kAllGather:
        for (std::int64_t q = 0; q < n; ++q) {
          for (std::int64_t i = 0; i < c; ++i) expect(q * c + i, copy_value(q, i));
        }
        return;
      case Collective::kAllToAll:  // block s came from rank s, which sent its block `rank`
        for (std::int64_t s = 0; s < n; ++s) {
          for (std::int64_t i = 0; i < c; ++i) expect(s * c + i, copy_value(s * n + rank, i));
        }
        return;
    }
  });
  return wrong;
}

void finish_average(DType dtype, void* data, std::int64_t count, int world_size) {
  if (!is_floating_point(dtype)) {
    throw InvalidArgument(fmt::format("avg of integer dtype {}", dtype_name(dtype)));
  }
  visit_element(dtype, [&]<typename E>(E) {
    auto* x = static_cast<typename E::Bits*>(data);
    if (dtype == DType::kFloat64) {
      for (std::int64_t i = 0; i < count; ++i) x[i] = E::store(E::load(x[i]) / world_size);
      return;
    }
    const auto n = static_cast<float>(world_size);
    for (std::int64_t i = 0; i < count; ++i) {
      x[i] = E::store(static_cast<float>(E::load(x[i])) / n);
    }
  });
}

}  // namespace c10d::inline v1::bench
