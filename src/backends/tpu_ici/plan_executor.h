// Runs a plan (plan.h) with real bytes over any Transport: for each step, posts every transfer
// in plan order (receives into the data buffer, or into scratch when they are to be reduced;
// sends from the data buffer or the separate input), waits for all of them against the op's
// deadline, then reduces the scratch into the data buffer in transfer order.
//
// Stages run one after another. In a stage, every lane's first step is posted before anything
// is awaited; then the lanes are served round robin (wait for lane l's step, reduce, post its
// next step, go on to lane l+1), every chip in the same order, so a wait only needs steps that
// every chip serves before it and the lanes cannot deadlock. Lane l of stage s carries
// transport::lane_tag(ctx.tag, s, l) (a plan of one stage of one lane: ctx.tag), and each lane
// has its own part of the scratch.
//
// The plan must come from the same builder with the same arguments on every rank. Scratch comes
// from algorithms::Scratch's kSegments slot. Throws what the transport throws (TimeoutError,
// NetworkError, InvalidArgument on a size mismatch); InvalidArgument before any message when a
// transfer does not fit its buffer, or the plan has more stages or lanes than tags have room for.
#pragma once

#include <cstddef>
#include <span>

#include "algorithms/context.h"
#include "backends/tpu_ici/plan.h"
#include "c10d/types.h"

namespace c10d::inline v1::tpu_ici {

// `reduction` is used as reduce_into takes it (AVG and PREMUL_SUM accumulate as sums); it is
// read only when the plan has kRecvReduce transfers.
void run_plan(const algorithms::Context& ctx, const Plan& plan, std::span<std::byte> data,
              std::span<const std::byte> input, DType dtype, const Reduction& reduction);

}  // namespace c10d::inline v1::tpu_ici
