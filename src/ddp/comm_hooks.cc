// The built-in comm hooks (include/c10d/ddp.h). The compressing hooks send half the bytes:
// the bucket is converted to float16 or bfloat16, averaged (the reduction kernels accumulate
// 16-bit floats in float32 and divide once), and converted back into the bucket's buffer.
#include "ddp/comm_hooks.h"

#include "c10d/ddp.h"
#include "core/check.h"
#include "core/half.h"

namespace c10d::inline v1::ddp {
namespace {

std::shared_ptr<Future> average(ProcessGroup& group, const Tensor& t) {
  AllreduceOptions o;
  o.reduce.op = ReduceOp::kAvg;
  return group.all_reduce({t}, o)->future();
}

template <DType kWire, std::uint16_t (*kTo)(float), float (*kFrom)(std::uint16_t)>
CommHook compress_hook(const char* name) {
  return [name](ProcessGroup& group, GradBucket& bucket) {
    C10D_CHECK(bucket.buffer.dtype() == DType::kFloat32,
               "{}: bucket {} holds {} gradients; the hook compresses float32 only", name,
               bucket.index, dtype_name(bucket.buffer.dtype()));
    const std::int64_t n = bucket.buffer.numel();
    Tensor wire = Tensor::empty({n}, kWire);
    const float* from = bucket.buffer.data<float>();
    auto* to = wire.data<std::uint16_t>();
    for (std::int64_t i = 0; i < n; ++i) to[i] = kTo(from[i]);
    Tensor buffer = bucket.buffer;
    return average(group, wire)->then([buffer, wire, n](Future&) {
      const auto* w = wire.data<std::uint16_t>();
      float* out = buffer.data<float>();
      for (std::int64_t i = 0; i < n; ++i) out[i] = kFrom(w[i]);
      return std::vector<Tensor>{buffer};
    });
  };
}

}  // namespace

std::shared_ptr<Future> AllreduceHook::operator()(ProcessGroup& group, GradBucket& bucket) const {
  return average(group, bucket.buffer);
}

CommHook allreduce_hook() { return AllreduceHook{}; }

CommHook fp16_compress_hook() {
  return compress_hook<DType::kFloat16, &core::float_to_half, &core::half_to_float>(
      "fp16_compress_hook");
}

CommHook bf16_compress_hook() {
  return compress_hook<DType::kBFloat16, &core::float_to_bfloat16, &core::bfloat16_to_float>(
      "bf16_compress_hook");
}

}  // namespace c10d::inline v1::ddp
