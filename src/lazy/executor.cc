#include "lazy/executor.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstring>

#include "c10d/lazy.h"
#include "c10d/process_group.h"
#include "c10d/work.h"
#include "core/check.h"

namespace c10d::inline v1::lazy {
namespace {

using Clock = std::chrono::steady_clock;

constexpr std::size_t kMaxPooledWorkspaces = 4;
constexpr std::size_t kAlign = 64;

std::size_t align_up(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

thread_local CollectiveTime t_collectives;

// dst[i] = src[i] * scale (dst may be src). Float32 multiplies in float when the scale is exact
// there (1/world for a power of two), else in double and rounds once; the result is the same.
// (algorithms::premul_in_place rounds the factor to float first, so it would not give the node's
// bits for 1/3; and copying and scaling in one pass is the point here.)
void scaled_copy(DType dtype, void* dst, const void* src, std::int64_t n, double scale) {
  if (scale == 1.0) {
    if (dst != src) std::memcpy(dst, src, static_cast<std::size_t>(n) * element_size(dtype));
    return;
  }
  if (dtype == DType::kFloat32) {
    const auto* in = static_cast<const float*>(src);
    auto* out = static_cast<float*>(dst);
    const auto narrow = static_cast<float>(scale);
    if (static_cast<double>(narrow) == scale) {
      for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] * narrow;
    } else {
      for (std::int64_t i = 0; i < n; ++i) out[i] = static_cast<float>(in[i] * scale);
    }
  } else if (dtype == DType::kFloat64) {
    const auto* in = static_cast<const double*>(src);
    auto* out = static_cast<double*>(dst);
    for (std::int64_t i = 0; i < n; ++i) out[i] = in[i] * scale;
  } else {
    C10D_THROW(InvalidArgument, "all_reduce: scale {} needs a floating tensor, not {}", scale,
               dtype_name(dtype));
  }
}

class Run {
 public:
  Run(Program& p, const Graph& g, bool reuse) : p_(p), g_(g), reuse_(reuse) {
    bufs_.resize(static_cast<std::size_t>(p.num_slots));
    if (reuse_) {
      std::lock_guard<std::mutex> lock(p.pool_mutex);
      if (!p.pool.empty()) {
        ws_ = std::move(p.pool.back());
        p.pool.pop_back();
      }
    }
    ws_.resize(static_cast<std::size_t>(p.num_slots));
  }

  ~Run() {
    if (!reuse_) return;
    std::lock_guard<std::mutex> lock(p_.pool_mutex);
    if (p_.pool.size() < kMaxPooledWorkspaces) p_.pool.push_back(std::move(ws_));
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  std::vector<Buf> go() {
    for (std::size_t e = 0; e < p_.entries.size(); ++e) {
      const ProgramEntry& x = p_.entries[e];
      if (x.op != OpKind::kData) continue;
      const Node* node = g_.params[static_cast<std::size_t>(x.param)];
      bufs_[static_cast<std::size_t>(p_.slot_base[e])] = {node->storage, node->offset_bytes};
    }
    for (const Step& s : p_.steps) {
      if (s.fused) {
        for (const TileInput& t : s.kernel.inputs) {
          if (t.kind != TileInput::Kind::kImmediate) await(t.slot);
        }
        for (const auto& st : s.kernel.stores) alloc(st.second);
        if (s.kernel.reduce_slot >= 0) alloc(s.kernel.reduce_slot);
        run_fused(s.kernel, bufs_);
      } else {
        node_step(s.entry);
      }
    }
    for (std::size_t c = 0; c < collectives_.size(); ++c) complete(c);
    std::vector<Buf> out;
    out.reserve(p_.root_slots.size());
    for (int slot : p_.root_slots) out.push_back(bufs_[static_cast<std::size_t>(slot)]);
    return out;
  }

 private:
  const Buf& alloc(int slot) { return alloc(slot, p_.slot_bytes[static_cast<std::size_t>(slot)]); }
  const Buf& alloc(int slot, std::size_t bytes) {
    const auto i = static_cast<std::size_t>(slot);
    std::shared_ptr<Storage>& kept = ws_[i];
    if (!(reuse_ && kept && kept.use_count() == 1 && kept->nbytes() == bytes)) {
      kept = allocate(bytes);
    }
    bufs_[i] = {kept, 0};
    if (!reuse_) kept.reset();
    return bufs_[i];
  }
  const Buf& in(const Slot& s) { return bufs_[static_cast<std::size_t>(p_.slot(s))]; }
  const ValueType& type(const Slot& s) {
    return p_.entries[static_cast<std::size_t>(s.entry)].outputs[static_cast<std::size_t>(s.index)];
  }

  // A collective's outputs are pending until the first step that reads one: that step (or the
  // end of the run) waits for it. A reshape or slice of a pending output reads no bytes; its
  // view is pending on the same collective.
  void await(int slot) {
    if (pending_.empty()) return;  // no collective issued in this run
    const int c = pending_[static_cast<std::size_t>(slot)];
    if (c >= 0) complete(static_cast<std::size_t>(c));
  }

  void node_step(int e) {
    const ProgramEntry& x = p_.entries[static_cast<std::size_t>(e)];
    const int out = p_.slot({e, 0});
    if (x.op == OpKind::kReshape || x.op == OpKind::kSliceRows) {
      if (!pending_.empty()) {
        pending_[static_cast<std::size_t>(out)] =
            pending_[static_cast<std::size_t>(p_.slot(x.operands[0]))];
      }
    } else {
      for (const Slot& s : x.operands) await(p_.slot(s));
    }
    switch (x.op) {
      case OpKind::kReshape:
        bufs_[static_cast<std::size_t>(out)] = in(x.operands[0]);
        return;
      case OpKind::kSliceRows: {
        Buf b = in(x.operands[0]);
        const ValueType& t = type(x.operands[0]);
        const std::int64_t row = t.shape[0] == 0 ? 0 : t.numel() / t.shape[0];
        b.offset += static_cast<std::size_t>(x.ints[0] * row) * element_size(t.dtype);
        bufs_[static_cast<std::size_t>(out)] = b;
        return;
      }
      case OpKind::kArange:
        run_arange(x.outputs[0], x.reals[0], x.reals[1], alloc(out));
        return;
      case OpKind::kUniform:
      case OpKind::kNormal: {
        const Node* node = g_.params[static_cast<std::size_t>(x.param)];
        run_random(x.op == OpKind::kNormal, x.outputs[0], x.reals[0], x.reals[1], node->seed,
                   node->counter, alloc(out));
        return;
      }
      case OpKind::kMatmul: {
        // Into its all_reduce's flat buffer when that is its only reader (Program::home),
        // premultiplied there by the GEMM when the scale is exact.
        const Slot home = p_.home[static_cast<std::size_t>(out)];
        double alpha = 1.0;
        if (home.entry >= 0) {
          lay_out(home.entry);
          bufs_[static_cast<std::size_t>(out)] = bufs_[static_cast<std::size_t>(p_.slot(home))];
          alpha = gemm_scale(p_.entries[static_cast<std::size_t>(home.entry)]);
        } else {
          alloc(out);
        }
        run_matmul(type(x.operands[0]), !x.ints.empty() && x.ints[0] != 0, type(x.operands[1]),
                   !x.ints.empty() && x.ints[1] != 0, x.outputs[0], in(x.operands[0]),
                   in(x.operands[1]), bufs_[static_cast<std::size_t>(out)], alpha);
        return;
      }
      case OpKind::kTranspose:
        run_transpose(type(x.operands[0]), x.ints[0], x.ints[1], in(x.operands[0]), alloc(out));
        return;
      case OpKind::kConcat: {
        std::vector<ValueType> types;
        std::vector<const Buf*> bins;
        for (const Slot& s : x.operands) {
          types.push_back(type(s));
          bins.push_back(&in(s));
        }
        run_concat(types, x.ints[0], bins, alloc(out));
        return;
      }
      case OpKind::kOneHot:
        run_one_hot(type(x.operands[0]), x.outputs[0], in(x.operands[0]), alloc(out));
        return;
      case OpKind::kArgmax:
        run_argmax(type(x.operands[0]), x.ints[0], in(x.operands[0]), alloc(out));
        return;
      case OpKind::kAllReduce:
        all_reduce(e, x);
        return;
      default:
        C10D_THROW(InvalidArgument, "lazy executor: no node kernel for {}", op_name(x.op));
    }
  }

  // One all_reduce node in flight: its collectives, their flat buffers, and the scale still to
  // apply to its results (ops other than a sum).
  struct Collective {
    std::vector<std::shared_ptr<Work>> works;
    std::vector<Tensor> flats;
    double post_scale = 1.0;
    Clock::time_point issued;
    std::shared_ptr<std::atomic<Clock::rep>> finished;  // latest completion, set by the backend
    bool done = false;
  };

  // The outputs of an all_reduce node of one dtype (consecutive ones) share one flat buffer and
  // one collective: each output is a 64-byte aligned range of it, and the output slots are
  // views of those ranges.
  struct FlatRun {
    std::size_t first = 0, end = 0;  // outputs [first, end)
    std::vector<std::size_t> at;     // byte offset of each in the buffer
    std::size_t bytes = 0;
    Buf flat;
  };

  // Lays out node `e`'s flat buffers, once per run: by its home matmuls (which write into them)
  // or by the node itself, whichever runs first.
  const std::vector<FlatRun>& lay_out(int e) {
    for (const auto& [entry, runs] : layouts_) {
      if (entry == e) return runs;
    }
    const ProgramEntry& x = p_.entries[static_cast<std::size_t>(e)];
    std::vector<FlatRun> runs;
    for (std::size_t i = 0; i < x.outputs.size();) {
      FlatRun r;
      r.first = i;
      const DType dtype = x.outputs[i].dtype;
      for (r.end = i; r.end < x.outputs.size() && x.outputs[r.end].dtype == dtype; ++r.end) {
        r.at.push_back(r.bytes);
        r.bytes = align_up(r.bytes + static_cast<std::size_t>(x.outputs[r.end].numel()) *
                                         element_size(dtype));
      }
      r.flat = alloc(p_.slot({e, static_cast<int>(i)}), r.bytes);
      for (std::size_t k = r.first; k < r.end; ++k) {
        bufs_[static_cast<std::size_t>(p_.slot({e, static_cast<int>(k)}))] = {
            r.flat.storage, r.flat.offset + r.at[k - r.first]};
      }
      runs.push_back(std::move(r));
      i = runs.back().end;
    }
    layouts_.emplace_back(e, std::move(runs));
    return layouts_.back().second;
  }

  static bool premultiplies(const ProgramEntry& x) {
    const auto op = static_cast<ReduceOp>(x.ints[0]);
    return op == ReduceOp::kSum || op == ReduceOp::kAvg;
  }
  // The scale a home matmul of node `x` applies as it computes: the node's, when multiplying
  // by it is exact whatever the value (a power of two), so the bits are those of a separate
  // multiplication; else 1 and the node scales the range itself.
  static double gemm_scale(const ProgramEntry& x) {
    int exponent = 0;
    return premultiplies(x) && std::frexp(x.reals[0], &exponent) == 0.5 ? x.reals[0] : 1.0;
  }

  // Fills node `e`'s flat buffers from its operands (a home matmul's range is filled already),
  // each rank's share premultiplied for a sum (no scaling pass of its own; another op scales
  // its result), and issues one collective per buffer, in program order, the same on every
  // rank. With overlap_collectives() it returns: the steps that read the outputs wait for them;
  // else it waits at once.
  void all_reduce(int e, const ProgramEntry& x) {
    const Node* node = g_.params[static_cast<std::size_t>(x.param)];
    AllreduceOptions opts;
    opts.reduce.op = static_cast<ReduceOp>(x.ints[0]);
    const bool premul = premultiplies(x);
    const double scale = premul ? x.reals[0] : 1.0;
    const double applied = gemm_scale(x);
    Collective c;
    c.post_scale = premul ? 1.0 : x.reals[0];
    c.finished = std::make_shared<std::atomic<Clock::rep>>(0);
    const int index = static_cast<int>(collectives_.size());
    if (pending_.empty()) pending_.assign(static_cast<std::size_t>(p_.num_slots), -1);
    for (const FlatRun& r : lay_out(e)) {
      const DType dtype = x.outputs[r.first].dtype;
      for (std::size_t k = r.first; k < r.end; ++k) {
        const auto slot = static_cast<std::size_t>(p_.slot({e, static_cast<int>(k)}));
        const Slot& operand = x.operands[k];
        const std::int64_t n = x.outputs[k].numel();
        void* out = bufs_[slot].data();
        if (p_.home[static_cast<std::size_t>(p_.slot(operand))] == Slot{e, static_cast<int>(k)}) {
          scaled_copy(dtype, out, out, n, scale / applied);
        } else {
          scaled_copy(dtype, out, in(operand).data(), n, scale);
        }
        const std::size_t used = static_cast<std::size_t>(n) * element_size(dtype);
        const std::size_t next = k + 1 < r.end ? r.at[k + 1 - r.first] : r.bytes;
        std::memset(static_cast<std::byte*>(out) + used, 0, next - r.at[k - r.first] - used);
        pending_[slot] = index;
      }
      c.flats.emplace_back(std::make_shared<TensorImpl>(
          dtype, Shape{static_cast<std::int64_t>(r.bytes / element_size(dtype))}, r.flat.storage,
          r.flat.offset));
      if (c.works.empty()) c.issued = Clock::now();
      c.works.push_back(node->group->all_reduce({c.flats.back()}, opts));
      c.works.back()->future()->add_callback([finished = c.finished](Future&) {
        const Clock::rep now = Clock::now().time_since_epoch().count();
        Clock::rep seen = finished->load();
        while (seen < now && !finished->compare_exchange_weak(seen, now)) {
        }
      });
    }
    collectives_.push_back(std::move(c));
    if (!overlap_) complete(static_cast<std::size_t>(index));
  }

  void complete(std::size_t index) {
    Collective& c = collectives_[index];
    if (c.done) return;
    c.done = true;
    const auto start = Clock::now();
    for (const auto& w : c.works) w->wait();
    const auto end = Clock::now();
    const Clock::time_point finished{Clock::duration(c.finished->load())};
    t_collectives.collectives += 1;
    t_collectives.seconds +=
        std::chrono::duration<double>(std::min(std::max(finished, c.issued), end) - c.issued)
            .count();
    t_collectives.wait_seconds += std::chrono::duration<double>(end - start).count();
    if (c.post_scale == 1.0) return;
    for (Tensor& t : c.flats)
      scaled_copy(t.dtype(), t.raw_data(), t.raw_data(), t.numel(), c.post_scale);
  }

  Program& p_;
  const Graph& g_;
  bool reuse_;
  std::vector<Buf> bufs_;
  std::vector<std::shared_ptr<Storage>> ws_;
  bool overlap_ = overlap_collectives();
  std::vector<Collective> collectives_;  // this run's all_reduce nodes, in issue order
  std::vector<std::pair<int, std::vector<FlatRun>>> layouts_;  // by all_reduce entry
  // Slot -> the collective that will fill it, or -1; sized at the run's first collective, so
  // a run without one (every eager op) allocates nothing for it.
  std::vector<int> pending_;
};

}  // namespace

CollectiveTime collective_time() { return t_collectives; }

std::vector<Buf> execute(Program& program, const Graph& graph, bool reuse) {
  Run run(program, graph, reuse);
  return run.go();
}

}  // namespace c10d::inline v1::lazy
