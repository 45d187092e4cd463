#include "lazy/executor.h"

#include <cstring>

#include "c10d/process_group.h"
#include "c10d/work.h"
#include "core/check.h"

namespace c10d::lazy {
namespace {

constexpr std::size_t kMaxPooledWorkspaces = 4;

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
        for (const auto& st : s.kernel.stores) alloc(st.second);
        if (s.kernel.reduce_slot >= 0) alloc(s.kernel.reduce_slot);
        run_fused(s.kernel, bufs_);
      } else {
        node_step(s.entry);
      }
    }
    std::vector<Buf> out;
    out.reserve(p_.root_slots.size());
    for (int slot : p_.root_slots) out.push_back(bufs_[static_cast<std::size_t>(slot)]);
    return out;
  }

 private:
  const Buf& alloc(int slot) {
    const auto i = static_cast<std::size_t>(slot);
    const std::size_t bytes = p_.slot_bytes[i];
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

  void node_step(int e) {
    const ProgramEntry& x = p_.entries[static_cast<std::size_t>(e)];
    const int out = p_.slot({e, 0});
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
      case OpKind::kMatmul:
        run_matmul(type(x.operands[0]), !x.ints.empty() && x.ints[0] != 0, type(x.operands[1]),
                   !x.ints.empty() && x.ints[1] != 0, x.outputs[0], in(x.operands[0]),
                   in(x.operands[1]), alloc(out));
        return;
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

  void all_reduce(int e, const ProgramEntry& x) {
    const Node* node = g_.params[static_cast<std::size_t>(x.param)];
    std::vector<Tensor> tensors;
    for (std::size_t i = 0; i < x.operands.size(); ++i) {
      const Buf& src = in(x.operands[i]);
      const Buf& dst = alloc(p_.slot({e, static_cast<int>(i)}));
      const ValueType& t = x.outputs[i];
      std::memcpy(dst.data(), src.data(),
                  static_cast<std::size_t>(t.numel()) * element_size(t.dtype));
      tensors.emplace_back(std::make_shared<TensorImpl>(t.dtype, t.shape, dst.storage, dst.offset));
    }
    AllreduceOptions opts;
    opts.reduce.op = static_cast<ReduceOp>(x.ints[0]);
    // One collective per tensor (they may differ in shape and dtype), all issued before any
    // is waited on, in the same order on every rank.
    std::vector<std::shared_ptr<Work>> works;
    for (const Tensor& t : tensors) works.push_back(node->group->all_reduce({t}, opts));
    for (const auto& w : works) w->wait();
    const double scale = x.reals[0];
    if (scale == 1.0) return;
    for (Tensor& t : tensors) {
      const std::int64_t n = t.numel();  // hoisted: the stores below could alias the tensor
      if (t.dtype() == DType::kFloat32) {
        float* p = t.data<float>();
        for (std::int64_t i = 0; i < n; ++i) p[i] = static_cast<float>(p[i] * scale);
      } else if (t.dtype() == DType::kFloat64) {
        double* p = t.data<double>();
        for (std::int64_t i = 0; i < n; ++i) p[i] *= scale;
      } else {
        C10D_THROW(InvalidArgument, "all_reduce: scale {} needs a floating tensor, not {}", scale,
                   t.to_string());
      }
    }
  }

  Program& p_;
  const Graph& g_;
  bool reuse_;
  std::vector<Buf> bufs_;
  std::vector<std::shared_ptr<Storage>> ws_;
};

}  // namespace

std::vector<Buf> execute(Program& program, const Graph& graph, bool reuse) {
  Run run(program, graph, reuse);
  return run.go();
}

}  // namespace c10d::lazy
