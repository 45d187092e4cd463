#include "backends/tpu_ici/plan_executor.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "algorithms/reduce_kernels.h"
#include "algorithms/scratch.h"
#include "core/check.h"

namespace c10d::inline v1::tpu_ici {
namespace {

// One lane being run: its next step, its tag, its part of the scratch, the requests of the step
// in flight.
struct LaneRun {
  const Lane* lane = nullptr;
  transport::Tag tag = 0;
  std::byte* scratch = nullptr;
  std::size_t step = 0;
  std::vector<std::unique_ptr<transport::Request>> requests;
  bool done() const { return step == lane->steps.size(); }
};

// The largest sum of reduced bytes of one step of `lane`: its scratch.
std::int64_t lane_scratch_bytes(const algorithms::Context& ctx, const Lane& lane,
                                std::span<std::byte> data, std::span<const std::byte> input) {
  std::int64_t most = 0;
  for (const Step& step : lane.steps) {
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
    most = std::max(most, step_bytes);
  }
  return most;
}

void post(const algorithms::Context& ctx, LaneRun& run, std::span<std::byte> data,
          std::span<const std::byte> input) {
  run.requests.clear();
  std::size_t at = 0;  // scratch bytes used by this step
  for (const Transfer& t : run.lane->steps[run.step].transfers) {
    const auto off = static_cast<std::size_t>(t.offset);
    const auto len = static_cast<std::size_t>(t.bytes);
    switch (t.kind) {
      case TransferKind::kSend:
        run.requests.push_back(ctx.transport.isend(
            t.peer, run.tag, t.from_input ? input.subspan(off, len) : data.subspan(off, len),
            ctx.call));
        break;
      case TransferKind::kRecv:
        run.requests.push_back(
            ctx.transport.irecv(t.peer, run.tag, data.subspan(off, len), ctx.call));
        break;
      case TransferKind::kRecvReduce:
        run.requests.push_back(ctx.transport.irecv(
            t.peer, run.tag, std::span<std::byte>(run.scratch + at, len), ctx.call));
        at += len;
        break;
    }
  }
}

void finish(const algorithms::Context& ctx, LaneRun& run, std::span<std::byte> data, DType dtype,
            const Reduction& reduction) {
  transport::wait_all(run.requests, ctx.deadline);
  const auto elem = static_cast<std::int64_t>(element_size(dtype));
  std::size_t at = 0;
  for (const Transfer& t : run.lane->steps[run.step].transfers) {
    if (t.kind != TransferKind::kRecvReduce) continue;
    algorithms::reduce_into(dtype, reduction, data.data() + t.offset, run.scratch + at,
                            t.bytes / elem);
    at += static_cast<std::size_t>(t.bytes);
  }
  ++run.step;
}

}  // namespace

void run_plan(const algorithms::Context& ctx, const Plan& plan, std::span<std::byte> data,
              std::span<const std::byte> input, DType dtype, const Reduction& reduction) {
  C10D_CHECK(plan.stages.size() <= transport::kMaxStages,
             "ICI plan on rank {}: {} stages, more than the {} tags have room for", ctx.rank(),
             plan.stages.size(), transport::kMaxStages);
  // Every transfer fits its buffer, and each lane's largest step's reductions fit its part of
  // the scratch (lane l of every stage shares part l): checked before the first message.
  std::vector<std::int64_t> lane_scratch;
  for (const Stage& stage : plan.stages) {
    C10D_CHECK(stage.lanes.size() <= transport::kMaxLanes,
               "ICI plan on rank {}: a stage of {} lanes, more than the {} tags have room for",
               ctx.rank(), stage.lanes.size(), transport::kMaxLanes);
    lane_scratch.resize(std::max(lane_scratch.size(), stage.lanes.size()), 0);
    for (std::size_t l = 0; l < stage.lanes.size(); ++l) {
      lane_scratch[l] =
          std::max(lane_scratch[l], lane_scratch_bytes(ctx, stage.lanes[l], data, input));
    }
  }
  std::vector<std::int64_t> scratch_at(lane_scratch.size() + 1, 0);
  for (std::size_t l = 0; l < lane_scratch.size(); ++l) {
    scratch_at[l + 1] = scratch_at[l] + lane_scratch[l];
  }
  const algorithms::Scratch scratch(algorithms::ScratchSlot::kSegments,
                                    static_cast<std::size_t>(scratch_at.back()));
  const bool plain = plan.stages.size() == 1 && plan.stages[0].lanes.size() == 1;
  std::vector<LaneRun> runs;
  for (std::size_t s = 0; s < plan.stages.size(); ++s) {
    const Stage& stage = plan.stages[s];
    runs.clear();
    runs.resize(stage.lanes.size());
    for (std::size_t l = 0; l < stage.lanes.size(); ++l) {
      LaneRun& run = runs[l];
      run.lane = &stage.lanes[l];
      run.tag =
          plain ? ctx.tag : transport::lane_tag(ctx.tag, static_cast<int>(s), static_cast<int>(l));
      run.scratch = scratch.data() + scratch_at[l];
      if (!run.done()) post(ctx, run, data, input);
    }
    for (bool busy = true; busy;) {
      busy = false;
      for (LaneRun& run : runs) {
        if (run.done()) continue;
        finish(ctx, run, data, dtype, reduction);
        if (!run.done()) post(ctx, run, data, input);
        busy = true;
      }
    }
  }
}

}  // namespace c10d::inline v1::tpu_ici
