// The fused-kernel engine: one pass over an iteration space in tiles of kTile elements. Per
// tile, inputs are loaded into registers (a pointer into the input when it has the iteration
// space's shape, a gathered copy when it broadcasts, a prefilled tile for a constant), each
// instruction computes its register with Eigen's vectorized array ops, registers that escape
// are computed straight into their output buffer, and the optional reduction folds one
// register into per-output accumulators. When every instruction is a float32 op of
// kernels_f32.h, a tile runs through those kernels instead, in blocks of kF32Block elements
// (every instruction on a block, then the next; today one block is the whole tile), each a
// plain call with no dtype or op dispatch, so memory traffic overlaps the arithmetic nearly as
// in one hand-written loop. Sums accumulate float32 in float64 with a fixed order (eight lanes per
// segment, segments split at tile boundaries), so eager and lazy runs, which cut the same tiles,
// give the same bits.
#include <Eigen/Core>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/check.h"
#include "lazy/kernels.h"
#include "lazy/kernels_f32.h"

namespace c10d::inline v1::lazy {
namespace {

template <class T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>>;

template <class F>
void dispatch_arith(DType t, F&& f) {
  dispatch_dtype(t, std::forward<F>(f), /*with_bool=*/true);
}

template <class F>
void dispatch_float(DType t, F&& f) {
  switch (t) {
    case DType::kFloat32:
      f(float{});
      return;
    case DType::kFloat64:
      f(double{});
      return;
    default:
      C10D_THROW(InvalidArgument, "no floating-point kernel for dtype {}", dtype_name(t));
  }
}

template <class T>
void eval_pow(Arr<T> o, Arr<T> a, double e) {
  if (e == 2) {
    o = a.square();
  } else if (e == 3) {
    o = a.cube();
  } else if (e == 1) {
    o = a;
  } else if (e == 0) {
    o.setConstant(T(1));
  } else if constexpr (std::is_floating_point_v<T>) {
    if (e == 0.5) {
      o = a.sqrt();
    } else if (e == -1) {
      o = a.inverse();
    } else if (e == -0.5) {
      o = a.rsqrt();
    } else {
      o = a.pow(T(e));
    }
  } else {
    const auto n = static_cast<std::int64_t>(e);
    for (Eigen::Index i = 0; i < o.size(); ++i) {
      T r = 1;
      for (std::int64_t k = 0; k < n; ++k) r *= a[i];
      o[i] = r;
    }
  }
}

// Computes one instruction over `n` elements into `out`.
void eval(const TileInstr& ins, void* const* regs, void* out, std::int64_t n) {
  const auto len = static_cast<Eigen::Index>(n);
  auto arr = [&](auto tag, int r) {
    using T = decltype(tag);
    return Arr<T>(static_cast<T*>(regs[r]), len);
  };
  switch (ins.op) {
    case OpKind::kIdentity:
      std::memcpy(out, regs[ins.a], static_cast<std::size_t>(n) * element_size(ins.dtype));
      return;
    case OpKind::kCast:
      convert(ins.in_dtype, regs[ins.a], ins.dtype, out, n);
      return;
    case OpKind::kExp:
    case OpKind::kLog:
    case OpKind::kSqrt:
    case OpKind::kTanh:
    case OpKind::kSigmoid:
      dispatch_float(ins.dtype, [&](auto tag) {
        using T = decltype(tag);
        Arr<T> o(static_cast<T*>(out), len);
        auto a = arr(tag, ins.a);
        switch (ins.op) {
          case OpKind::kExp:
            o = a.exp();
            break;
          case OpKind::kLog:
            o = a.log();
            break;
          case OpKind::kSqrt:
            o = a.sqrt();
            break;
          case OpKind::kTanh:
            o = a.tanh();
            break;
          default:
            o = a.logistic();
            break;
        }
      });
      return;
    default:
      break;
  }
  dispatch_arith(ins.in_dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, bool>) {
      // bool operands: comparisons (eq, ne) and where's branches only.
      Arr<bool> o(static_cast<bool*>(out), len);
      auto a = arr(tag, ins.a);
      switch (ins.op) {
        case OpKind::kEq:
          o = a == arr(tag, ins.b);
          return;
        case OpKind::kNe:
          o = a != arr(tag, ins.b);
          return;
        case OpKind::kWhere:
          o = arr(tag, ins.a).select(arr(tag, ins.b), arr(tag, ins.c));
          return;
        default:
          C10D_THROW(InvalidArgument, "{} has no kernel for bool", op_name(ins.op));
      }
    } else {
      auto a = arr(tag, ins.a);
      if (ins.dtype == DType::kBool && ins.op != OpKind::kWhere) {
        Arr<bool> o(static_cast<bool*>(out), len);
        auto b = arr(tag, ins.b);
        switch (ins.op) {
          case OpKind::kEq:
            o = a == b;
            return;
          case OpKind::kNe:
            o = a != b;
            return;
          case OpKind::kLt:
            o = a < b;
            return;
          case OpKind::kLe:
            o = a <= b;
            return;
          case OpKind::kGt:
            o = a > b;
            return;
          case OpKind::kGe:
            o = a >= b;
            return;
          default:
            break;
        }
        C10D_THROW(InvalidArgument, "{} has no bool-valued kernel", op_name(ins.op));
      }
      Arr<T> o(static_cast<T*>(out), len);
      if (ins.b_imm || ins.a_imm) {
        const T s = static_cast<T>(ins.imm);
        auto x = arr(tag, ins.b_imm ? ins.a : ins.b);
        switch (ins.op) {
          case OpKind::kAdd:
            o = x + s;
            return;
          case OpKind::kMul:
            o = x * s;
            return;
          case OpKind::kSub:
            if (ins.b_imm) {
              o = x - s;
            } else {
              o = s - x;
            }
            return;
          case OpKind::kDiv:
            if (ins.b_imm) {
              o = x / s;
            } else {
              o = s / x;
            }
            return;
          case OpKind::kMaximum:
            o = x.max(s);
            return;
          case OpKind::kMinimum:
            o = x.min(s);
            return;
          default:
            break;
        }
      }
      switch (ins.op) {
        case OpKind::kNeg:
          o = -a;
          return;
        case OpKind::kAbs:
          o = a.abs();
          return;
        case OpKind::kRelu:
          o = a.max(T(0));
          return;
        case OpKind::kPow:
          eval_pow<T>(o, a, ins.real);
          return;
        case OpKind::kAdd:
          o = a + arr(tag, ins.b);
          return;
        case OpKind::kSub:
          o = a - arr(tag, ins.b);
          return;
        case OpKind::kMul:
          o = a * arr(tag, ins.b);
          return;
        case OpKind::kDiv:
          o = a / arr(tag, ins.b);
          return;
        case OpKind::kMaximum:
          o = a.max(arr(tag, ins.b));
          return;
        case OpKind::kMinimum:
          o = a.min(arr(tag, ins.b));
          return;
        case OpKind::kWhere:
          o = Arr<bool>(static_cast<bool*>(regs[ins.a]), len)
                  .select(arr(tag, ins.b), arr(tag, ins.c));
          return;
        default:
          break;
      }
      C10D_THROW(InvalidArgument, "{} has no kernel for {}", op_name(ins.op),
                 dtype_name(ins.in_dtype));
    }
  });
}

// Copies elements [start, start + n) of the iteration space from a broadcast input.
void gather(const TileInput& in, const std::uint8_t* base, std::int64_t start, std::int64_t n,
            std::uint8_t* dst) {
  const std::size_t es = element_size(in.dtype);
  const std::size_t nd = in.dims.size();
  std::int64_t idx[16];
  std::int64_t rem = start;
  for (std::size_t d = nd; d-- > 0;) {
    idx[d] = rem % in.dims[d];
    rem /= in.dims[d];
  }
  std::int64_t done = 0;
  while (done < n) {
    std::int64_t src = 0;
    for (std::size_t d = 0; d < nd; ++d) src += idx[d] * in.strides[d];
    const std::int64_t run = std::min(in.dims[nd - 1] - idx[nd - 1], n - done);
    const std::uint8_t* s = base + static_cast<std::size_t>(src) * es;
    std::uint8_t* o = dst + static_cast<std::size_t>(done) * es;
    if (in.strides[nd - 1] == 1) {
      std::memcpy(o, s, static_cast<std::size_t>(run) * es);
    } else {
      for (std::int64_t i = 0; i < run; ++i)
        std::memcpy(o + static_cast<std::size_t>(i) * es, s, es);
    }
    done += run;
    idx[nd - 1] += run;
    for (std::size_t d = nd - 1; d > 0 && idx[d] == in.dims[d]; --d) {
      idx[d] = 0;
      ++idx[d - 1];
    }
  }
}

// Folds tiles of one register into accumulators over the [A, R, B] view.
template <class T, class Acc>
class Reducer {
 public:
  Reducer(const FusedKernel& k) : k_(k), acc_(static_cast<std::size_t>(k.A * k.B), init()) {}

  void add(const T* x, std::int64_t start, std::int64_t n) {
    const std::int64_t R = k_.R, B = k_.B;
    std::int64_t pos = start;
    const std::int64_t end = start + n;
    while (pos < end) {
      const T* p = x + (pos - start);
      if (B == 1) {
        const std::int64_t a = pos / R;
        const std::int64_t run = std::min(end, (a + 1) * R) - pos;
        acc_[static_cast<std::size_t>(a)] =
            combine(acc_[static_cast<std::size_t>(a)], fold(p, run));
        pos += run;
      } else {
        const std::int64_t a = pos / (R * B);
        const std::int64_t b0 = pos % B;
        const std::int64_t run = std::min(end - pos, B - b0);
        Acc* acc = acc_.data() + a * B + b0;
        for (std::int64_t i = 0; i < run; ++i) acc[i] = combine(acc[i], static_cast<Acc>(p[i]));
        pos += run;
      }
    }
  }

  template <class Out>
  void finish(Out* out) const {
    for (std::size_t i = 0; i < acc_.size(); ++i) {
      Acc v = acc_[i];
      if (k_.reduce == OpKind::kMean) v = static_cast<Acc>(v / static_cast<Acc>(k_.R));
      out[i] = static_cast<Out>(v);
    }
  }

 private:
  bool is_max() const { return k_.reduce == OpKind::kMax; }
  Acc init() const {
    if (!is_max()) return Acc(0);
    if constexpr (std::numeric_limits<Acc>::has_infinity)
      return -std::numeric_limits<Acc>::infinity();
    return std::numeric_limits<Acc>::lowest();
  }
  Acc combine(Acc a, Acc b) const {
    if (!is_max()) return a + b;
    if constexpr (std::is_floating_point_v<Acc>) {
      if (std::isnan(b)) return b;
    }
    return b > a ? b : a;
  }
  Acc fold(const T* p, std::int64_t n) const {
    if (is_max()) {
      Acc m = init();
      for (std::int64_t i = 0; i < n; ++i) m = combine(m, static_cast<Acc>(p[i]));
      return m;
    }
    Acc lanes[8] = {};
    std::int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (int j = 0; j < 8; ++j) lanes[j] += static_cast<Acc>(p[i + j]);
    }
    Acc tail = 0;
    for (; i < n; ++i) tail += static_cast<Acc>(p[i]);
    return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
           ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])) + tail;
  }

  const FusedKernel& k_;
  std::vector<Acc> acc_;
};

template <class T, class Acc>
void run_tiles(const FusedKernel& k, std::vector<Buf>& bufs, Reducer<T, Acc>* reducer);

struct Scratch {
  std::shared_ptr<Storage> bytes;
  std::size_t regs = 0;
};
thread_local Scratch t_scratch;

template <class T, class Acc>
void run_tiles(const FusedKernel& k, std::vector<Buf>& bufs, Reducer<T, Acc>* reducer) {
  const std::size_t n_in = k.inputs.size();
  const std::size_t n_regs = n_in + k.instrs.size();
  constexpr std::size_t kRegBytes = static_cast<std::size_t>(kTile) * 8;
  if (t_scratch.regs < n_regs) {
    t_scratch.bytes = allocate(n_regs * kRegBytes);
    t_scratch.regs = n_regs;
  }
  auto* scratch = static_cast<std::uint8_t*>(t_scratch.bytes->data());
  auto reg_scratch = [&](std::size_t r) { return scratch + r * kRegBytes; };
  std::vector<void*> regs(n_regs);
  std::vector<std::uint8_t*> store_base(n_regs, nullptr);
  for (const auto& [reg, slot] : k.stores) {
    store_base[static_cast<std::size_t>(reg)] =
        static_cast<std::uint8_t*>(bufs[static_cast<std::size_t>(slot)].data());
  }
  std::vector<const std::uint8_t*> in_base(n_in, nullptr);
  for (std::size_t i = 0; i < n_in; ++i) {
    const TileInput& in = k.inputs[i];
    if (in.kind == TileInput::Kind::kImmediate) {
      fill(in.dtype, reg_scratch(i), kTile, in.value);
      regs[i] = reg_scratch(i);
    } else {
      in_base[i] = static_cast<const std::uint8_t*>(bufs[static_cast<std::size_t>(in.slot)].data());
      if (in.kind == TileInput::Kind::kSplat) {
        const std::size_t es = element_size(in.dtype);
        std::uint8_t* r = reg_scratch(i);
        for (std::int64_t j = 0; j < kTile; ++j)
          std::memcpy(r + static_cast<std::size_t>(j) * es, in_base[i], es);
        regs[i] = r;
      }
    }
  }
  C10D_CHECK(k.f32 != nullptr, "fused kernel without its float32 plan (planner)");
  const F32Plan& f32 = *k.f32;
  for (std::int64_t start = 0; start < k.numel; start += kTile) {
    const std::int64_t n = std::min(kTile, k.numel - start);
    for (std::size_t i = 0; i < n_in; ++i) {
      const TileInput& in = k.inputs[i];
      const std::size_t es = element_size(in.dtype);
      if (in.kind == TileInput::Kind::kDirect) {
        regs[i] = const_cast<std::uint8_t*>(in_base[i] + static_cast<std::size_t>(start) * es);
      } else if (in.kind == TileInput::Kind::kBroadcast) {
        gather(in, in_base[i], start, n, reg_scratch(i));
        regs[i] = reg_scratch(i);
      }
    }
    for (std::size_t j = 0; j < k.instrs.size(); ++j) {
      const std::size_t r = n_in + j;
      regs[r] = store_base[r] != nullptr ? store_base[r] + static_cast<std::size_t>(start) *
                                                               element_size(k.instrs[j].dtype)
                                         : reg_scratch(r);
    }
    if (!f32.chain.ops.empty()) {
      run_f32_chain(f32.chain, regs.data(), n);
    } else if (f32.all_covered) {
      run_f32_chain(f32.steps, regs.data(), n_in, n);
    } else {
      for (std::size_t j = 0; j < k.instrs.size(); ++j) {
        const F32Step& f = f32.steps[j];
        void* out = regs[n_in + j];
        if (f.kernels.span == nullptr) {
          eval(k.instrs[j], regs.data(), out, n);
          continue;
        }
        const float* b = f.b < 0 ? nullptr : static_cast<const float*>(regs[f.b]);
        f.kernels.span(static_cast<const float*>(regs[f.a]), b, f.imm, static_cast<float*>(out), n);
      }
    }
    if (reducer != nullptr) {
      reducer->add(static_cast<const T*>(regs[static_cast<std::size_t>(k.reduce_reg)]), start, n);
    }
  }
}

}  // namespace

void run_fused(const FusedKernel& k, std::vector<Buf>& bufs) {
  if (k.reduce == OpKind::kData) {
    run_tiles<float, double>(k, bufs, nullptr);
    return;
  }
  void* out = bufs[static_cast<std::size_t>(k.reduce_slot)].data();
  auto reduce = [&](auto tag, auto acc_tag) {
    using T = decltype(tag);
    using Acc = decltype(acc_tag);
    Reducer<T, Acc> r(k);
    run_tiles<T, Acc>(k, bufs, &r);
    dispatch_arith(k.reduce_dtype,
                   [&](auto out_tag) { r.finish(static_cast<decltype(out_tag)*>(out)); });
  };
  const bool is_max = k.reduce == OpKind::kMax;
  switch (k.reg_dtype(k.reduce_reg)) {
    case DType::kFloat32:
      if (is_max) {
        reduce(float{}, float{});
      } else {
        reduce(float{}, double{});
      }
      return;
    case DType::kFloat64:
      reduce(double{}, double{});
      return;
    case DType::kInt32:
      if (is_max) {
        reduce(std::int32_t{}, std::int32_t{});
      } else {
        reduce(std::int32_t{}, std::int64_t{});
      }
      return;
    case DType::kInt64:
      reduce(std::int64_t{}, std::int64_t{});
      return;
    default:
      C10D_THROW(InvalidArgument, "{} has no kernel for {}", op_name(k.reduce),
                 dtype_name(k.reg_dtype(k.reduce_reg)));
  }
}

}  // namespace c10d::inline v1::lazy
