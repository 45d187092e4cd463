#include "backends/tpu_ici/plan_executor.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "algorithms/reduce_kernels.h"
#include "algorithms/scratch.h"
#include "core/check.h"

namespace c10d::inline v1::tpu_ici {

void run_plan(const algorithms::Context& ctx, const Plan& plan, std::span<std::byte> data,
              std::span<const std::byte> input, DType dtype, const Reduction& reduction) {
  // Every transfer fits its buffer, and the largest step's reductions fit the scratch: checked
  // before the first message.
  std::int64_t scratch_bytes = 0;
  for (const Step& step : plan.steps) {
    std::int64_t step_bytes = 0;
    for (const Transfer& t : step.transfers) {
      const std::size_t size =
          t.kind == TransferKind::kSend && t.from_input ? input.size() : data.size();
      C10D_CHECK(
          t.offset >= 0 && t.bytes >= 0 && static_cast<std::size_t>(t.offset + t.bytes) <= size,
          "ICI plan on rank {}: a transfer of {} bytes at offset {} with peer {} does not "
          "fit its {}-byte buffer",
          ctx.rank(), t.bytes, t.offset, t.peer, size);
      if (t.kind == TransferKind::kRecvReduce) step_bytes += t.bytes;
    }
    scratch_bytes = std::max(scratch_bytes, step_bytes);
  }
  const algorithms::Scratch scratch(algorithms::ScratchSlot::kSegments,
                                    static_cast<std::size_t>(scratch_bytes));
  const std::size_t elem = element_size(dtype);
  auto& transport = ctx.transport;
  std::vector<std::unique_ptr<transport::Request>> requests;
  for (const Step& step : plan.steps) {
    requests.clear();
    std::size_t at = 0;  // scratch bytes used by this step
    for (const Transfer& t : step.transfers) {
      const auto off = static_cast<std::size_t>(t.offset);
      const auto len = static_cast<std::size_t>(t.bytes);
      switch (t.kind) {
        case TransferKind::kSend:
          requests.push_back(transport.isend(
              t.peer, ctx.tag, t.from_input ? input.subspan(off, len) : data.subspan(off, len)));
          break;
        case TransferKind::kRecv:
          requests.push_back(transport.irecv(t.peer, ctx.tag, data.subspan(off, len)));
          break;
        case TransferKind::kRecvReduce:
          requests.push_back(transport.irecv(t.peer, ctx.tag, scratch.span().subspan(at, len)));
          at += len;
          break;
      }
    }
    transport::wait_all(requests, ctx.deadline);
    at = 0;
    for (const Transfer& t : step.transfers) {
      if (t.kind != TransferKind::kRecvReduce) continue;
      algorithms::reduce_into(dtype, reduction, data.data() + t.offset, scratch.data() + at,
                              t.bytes / static_cast<std::int64_t>(elem));
      at += static_cast<std::size_t>(t.bytes);
    }
  }
}

}  // namespace c10d::inline v1::tpu_ici
