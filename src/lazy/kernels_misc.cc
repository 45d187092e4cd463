// Node kernels: everything that is not elementwise or a fusible reduction. Matmul is Eigen's
// GEMM on row-major maps (single-threaded: EIGEN_DONT_PARALLELIZE).
#include <Eigen/Core>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <numbers>

#include "core/check.h"
#include "core/half.h"
#include "lazy/kernels.h"
#include "lazy/random.h"

namespace c10d::inline v1::lazy {
namespace {

template <class F>
void dispatch_numeric(DType t, F&& f) {
  dispatch_dtype(t, std::forward<F>(f), /*with_bool=*/false);
}

double load_as_double(DType t, const void* p, std::int64_t i) {
  switch (t) {
    case DType::kFloat32:
      return static_cast<const float*>(p)[i];
    case DType::kFloat64:
      return static_cast<const double*>(p)[i];
    case DType::kFloat16:
      return core::half_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kBFloat16:
      return core::bfloat16_to_float(static_cast<const std::uint16_t*>(p)[i]);
    case DType::kInt8:
      return static_cast<const std::int8_t*>(p)[i];
    case DType::kUInt8:
      return static_cast<const std::uint8_t*>(p)[i];
    case DType::kInt16:
      return static_cast<const std::int16_t*>(p)[i];
    case DType::kInt32:
      return static_cast<const std::int32_t*>(p)[i];
    case DType::kInt64:
      return static_cast<double>(static_cast<const std::int64_t*>(p)[i]);
    case DType::kBool:
      return static_cast<const bool*>(p)[i] ? 1.0 : 0.0;
  }
  return 0;
}

void store_double(DType t, void* p, std::int64_t i, double v) {
  switch (t) {
    case DType::kFloat32:
      static_cast<float*>(p)[i] = static_cast<float>(v);
      return;
    case DType::kFloat64:
      static_cast<double*>(p)[i] = v;
      return;
    case DType::kFloat16:
      static_cast<std::uint16_t*>(p)[i] = core::float_to_half(static_cast<float>(v));
      return;
    case DType::kBFloat16:
      static_cast<std::uint16_t*>(p)[i] = core::float_to_bfloat16(static_cast<float>(v));
      return;
    case DType::kInt8:
      static_cast<std::int8_t*>(p)[i] = static_cast<std::int8_t>(v);
      return;
    case DType::kUInt8:
      static_cast<std::uint8_t*>(p)[i] = static_cast<std::uint8_t>(v);
      return;
    case DType::kInt16:
      static_cast<std::int16_t*>(p)[i] = static_cast<std::int16_t>(v);
      return;
    case DType::kInt32:
      static_cast<std::int32_t*>(p)[i] = static_cast<std::int32_t>(v);
      return;
    case DType::kInt64:
      static_cast<std::int64_t*>(p)[i] = static_cast<std::int64_t>(v);
      return;
    case DType::kBool:
      static_cast<bool*>(p)[i] = v != 0;
      return;
  }
}

bool is_main(DType t) {
  return t == DType::kFloat32 || t == DType::kFloat64 || t == DType::kInt32 || t == DType::kInt64 ||
         t == DType::kBool;
}

template <class F>
void dispatch_main(DType t, F&& f) {
  if (t == DType::kBool) {
    f(bool{});
  } else {
    dispatch_numeric(t, f);
  }
}

}  // namespace

namespace {

// Freed kernel buffers, kept by size for the next allocation of that size (a caching
// allocator, as torch has): a fresh multi-megabyte buffer costs a page fault per 4 KiB, which
// would dominate eager mode. Holds at most kMaxCachedBytes.
std::atomic<bool> g_cache_alive{false};  // trivially destructible: valid during exit

class BufferCache {
 public:
  static constexpr std::size_t kMaxCachedBytes = std::size_t{512} << 20;

  BufferCache() { g_cache_alive = true; }
  ~BufferCache() {
    g_cache_alive = false;
    for (auto& [bytes, blocks] : free_) {
      for (void* p : blocks) std::free(p);
    }
  }
  BufferCache(const BufferCache&) = delete;
  BufferCache& operator=(const BufferCache&) = delete;

  void* take(std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = free_.find(bytes);
      if (it != free_.end() && !it->second.empty()) {
        void* p = it->second.back();
        it->second.pop_back();
        cached_ -= bytes;
        return p;
      }
    }
    void* p = std::aligned_alloc(64, bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }

  void give(void* p, std::size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (cached_ + bytes <= kMaxCachedBytes) {
        free_[bytes].push_back(p);
        cached_ += bytes;
        return;
      }
    }
    std::free(p);
  }

 private:
  std::mutex mu_;
  std::map<std::size_t, std::vector<void*>> free_;  // GUARDED_BY(mu_)
  std::size_t cached_ = 0;                          // GUARDED_BY(mu_)
};

BufferCache& buffer_cache() {
  static BufferCache cache;
  return cache;
}

}  // namespace

std::shared_ptr<Storage> allocate(std::size_t nbytes) {
  const std::size_t rounded = std::max<std::size_t>((nbytes + 63) / 64 * 64, 64);
  void* p = buffer_cache().take(rounded);
  return std::make_shared<Storage>(p, nbytes, [rounded](void* q) {
    // Storages freed after the cache (at exit) go straight back.
    if (g_cache_alive) {
      buffer_cache().give(q, rounded);
    } else {
      std::free(q);
    }
  });
}

void convert(DType from, const void* src, DType to, void* dst, std::int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, static_cast<std::size_t>(n) * element_size(to));
    return;
  }
  if (is_main(from) && is_main(to)) {
    dispatch_main(from, [&](auto ftag) {
      using F = decltype(ftag);
      dispatch_main(to, [&](auto ttag) {
        using T = decltype(ttag);
        const F* s = static_cast<const F*>(src);
        T* d = static_cast<T*>(dst);
        if constexpr (std::is_same_v<T, bool>) {
          for (std::int64_t i = 0; i < n; ++i) d[i] = s[i] != F(0);
        } else {
          for (std::int64_t i = 0; i < n; ++i) d[i] = static_cast<T>(s[i]);
        }
      });
    });
    return;
  }
  for (std::int64_t i = 0; i < n; ++i) store_double(to, dst, i, load_as_double(from, src, i));
}

void fill(DType dtype, void* dst, std::int64_t n, double value) {
  if (n <= 0) return;
  store_double(dtype, dst, 0, value);
  const std::size_t es = element_size(dtype);
  auto* d = static_cast<std::uint8_t*>(dst);
  for (std::int64_t i = 1; i < n; ++i) std::memcpy(d + static_cast<std::size_t>(i) * es, d, es);
}

void run_matmul(const ValueType& a, bool ta, const ValueType& b, bool tb, const ValueType& out,
                const Buf& ba, const Buf& bb, const Buf& bo, double alpha) {
  const std::size_t ra = a.shape.size(), rb = b.shape.size(), ro = out.shape.size();
  const std::int64_t m = out.shape[ro - 2], n = out.shape[ro - 1];
  const std::int64_t k = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  // Batch strides (in matrices) of a and b over the output's batch dims; 0 where broadcast.
  const std::size_t nb = ro - 2;
  std::vector<std::int64_t> sa(nb, 0), sb(nb, 0);
  std::int64_t acc_a = 1, acc_b = 1, batches = 1;
  for (std::size_t d = nb; d-- > 0;) {
    const std::int64_t off_a =
        static_cast<std::int64_t>(d) - static_cast<std::int64_t>(nb - (ra - 2));
    const std::int64_t off_b =
        static_cast<std::int64_t>(d) - static_cast<std::int64_t>(nb - (rb - 2));
    if (off_a >= 0) {
      const std::int64_t da = a.shape[static_cast<std::size_t>(off_a)];
      sa[d] = da == 1 ? 0 : acc_a;
      acc_a *= da;
    }
    if (off_b >= 0) {
      const std::int64_t db = b.shape[static_cast<std::size_t>(off_b)];
      sb[d] = db == 1 ? 0 : acc_b;
      acc_b *= db;
    }
    batches *= out.shape[d];
  }
  dispatch_numeric(out.dtype, [&](auto tag) {
    using T = decltype(tag);
    using Mat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
    const T* pa = static_cast<const T*>(ba.data());
    const T* pb = static_cast<const T*>(bb.data());
    T* po = static_cast<T*>(bo.data());
    std::vector<std::int64_t> idx(nb, 0);
    for (std::int64_t batch = 0; batch < batches; ++batch) {
      std::int64_t ia = 0, ib = 0;
      for (std::size_t d = 0; d < nb; ++d) {
        ia += idx[d] * sa[d];
        ib += idx[d] * sb[d];
      }
      // Stored shapes: a is [k, m] when ta, b is [n, k] when tb.
      Eigen::Map<const Mat> ma(pa + ia * m * k, ta ? k : m, ta ? m : k);
      Eigen::Map<const Mat> mb(pb + ib * k * n, tb ? n : k, tb ? k : n);
      Eigen::Map<Mat> mo(po + batch * m * n, m, n);
      const T s = static_cast<T>(alpha);  // Eigen hands a scalar factor to the GEMM as its alpha
      if (ta && tb) {
        mo.noalias() = s * (ma.transpose() * mb.transpose());
      } else if (ta) {
        mo.noalias() = s * (ma.transpose() * mb);
      } else if (tb) {
        mo.noalias() = s * (ma * mb.transpose());
      } else {
        mo.noalias() = s * (ma * mb);
      }
      for (std::size_t d = nb; d-- > 0;) {
        if (++idx[d] < out.shape[d]) break;
        idx[d] = 0;
      }
    }
  });
}

void run_transpose(const ValueType& in, std::int64_t dim0, std::int64_t dim1, const Buf& bi,
                   const Buf& bo) {
  if (dim0 > dim1) std::swap(dim0, dim1);
  auto prod = [&](std::int64_t from, std::int64_t to) {
    std::int64_t p = 1;
    for (std::int64_t d = from; d < to; ++d) p *= in.shape[static_cast<std::size_t>(d)];
    return p;
  };
  const std::int64_t A = prod(0, dim0), D0 = in.shape[static_cast<std::size_t>(dim0)],
                     M = prod(dim0 + 1, dim1), D1 = in.shape[static_cast<std::size_t>(dim1)],
                     C = prod(dim1 + 1, static_cast<std::int64_t>(in.shape.size()));
  const std::size_t es = element_size(in.dtype);
  const auto* src = static_cast<const std::uint8_t*>(bi.data());
  auto* dst = static_cast<std::uint8_t*>(bo.data());
  // out[a][i1][m][i0][c] = in[a][i0][m][i1][c]
  for (std::int64_t a = 0; a < A; ++a) {
    for (std::int64_t i1 = 0; i1 < D1; ++i1) {
      for (std::int64_t mm = 0; mm < M; ++mm) {
        for (std::int64_t i0 = 0; i0 < D0; ++i0) {
          const std::int64_t s = (((a * D0 + i0) * M + mm) * D1 + i1) * C;
          const std::int64_t d = (((a * D1 + i1) * M + mm) * D0 + i0) * C;
          std::memcpy(dst + static_cast<std::size_t>(d) * es,
                      src + static_cast<std::size_t>(s) * es, static_cast<std::size_t>(C) * es);
        }
      }
    }
  }
}

void run_concat(const std::vector<ValueType>& ins, std::int64_t axis,
                const std::vector<const Buf*>& bins, const Buf& bo) {
  const std::size_t es = element_size(ins[0].dtype);
  std::int64_t outer = 1;
  for (std::int64_t d = 0; d < axis; ++d) outer *= ins[0].shape[static_cast<std::size_t>(d)];
  auto* dst = static_cast<std::uint8_t*>(bo.data());
  for (std::int64_t o = 0; o < outer; ++o) {
    for (std::size_t i = 0; i < ins.size(); ++i) {
      const std::int64_t inner = outer == 0 ? 0 : ins[i].numel() / outer;
      const std::size_t bytes = static_cast<std::size_t>(inner) * es;
      std::memcpy(
          dst,
          static_cast<const std::uint8_t*>(bins[i]->data()) + static_cast<std::size_t>(o) * bytes,
          bytes);
      dst += bytes;
    }
  }
}

void run_one_hot(const ValueType& labels, const ValueType& out, const Buf& bl, const Buf& bo) {
  const std::int64_t classes = out.shape.back();
  const std::int64_t n = labels.numel();
  fill(out.dtype, bo.data(), out.numel(), 0.0);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto label = static_cast<std::int64_t>(load_as_double(labels.dtype, bl.data(), i));
    C10D_CHECK(label >= 0 && label < classes, "one_hot: label {} at index {} is outside [0, {})",
               label, i, classes);
    store_double(out.dtype, bo.data(), i * classes + label, 1.0);
  }
}

void run_argmax(const ValueType& in, std::int64_t axis, const Buf& bi, const Buf& bo) {
  std::int64_t A = 1, B = 1;
  for (std::int64_t d = 0; d < axis; ++d) A *= in.shape[static_cast<std::size_t>(d)];
  for (std::size_t d = static_cast<std::size_t>(axis) + 1; d < in.shape.size(); ++d)
    B *= in.shape[d];
  const std::int64_t R = in.shape[static_cast<std::size_t>(axis)];
  auto* out = static_cast<std::int64_t*>(bo.data());
  dispatch_numeric(in.dtype, [&](auto tag) {
    using T = decltype(tag);
    const T* x = static_cast<const T*>(bi.data());
    for (std::int64_t a = 0; a < A; ++a) {
      for (std::int64_t b = 0; b < B; ++b) {
        std::int64_t best = 0;
        T bv = x[a * R * B + b];
        for (std::int64_t r = 1; r < R; ++r) {
          const T v = x[(a * R + r) * B + b];
          bool nan_seen = false;
          if constexpr (std::is_floating_point_v<T>) nan_seen = std::isnan(bv);
          if (!nan_seen && (v > bv || v != v)) {
            bv = v;
            best = r;
          }
        }
        out[a * B + b] = best;
      }
    }
  });
}

void run_arange(const ValueType& out, double start, double step, const Buf& bo) {
  const std::int64_t n = out.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    store_double(out.dtype, bo.data(), i, start + static_cast<double>(i) * step);
  }
}

void run_random(bool normal, const ValueType& out, double a, double b, std::uint64_t seed,
                std::uint64_t counter, const Buf& bo) {
  const std::int64_t n = out.numel();
  if (!normal) {
    for (std::int64_t i = 0; i < n; ++i) {
      const double u = random_unit(seed, counter + static_cast<std::uint64_t>(i));
      store_double(out.dtype, bo.data(), i, a + (b - a) * u);
    }
    return;
  }
  // Box-Muller: numbers 2j and 2j+1 of the stream make elements 2j and 2j+1.
  for (std::int64_t i = 0; i < n; i += 2) {
    const auto c = counter + static_cast<std::uint64_t>(i);
    const double u1 = 1.0 - random_unit(seed, c);  // (0, 1]: log is finite
    const double u2 = random_unit(seed, c + 1);
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * std::numbers::pi * u2;
    store_double(out.dtype, bo.data(), i, a + b * r * std::cos(theta));
    if (i + 1 < n) store_double(out.dtype, bo.data(), i + 1, a + b * r * std::sin(theta));
  }
}

}  // namespace c10d::inline v1::lazy
