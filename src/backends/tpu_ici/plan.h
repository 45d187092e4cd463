// Plan: a collective as a data-independent schedule of one chip's messages, written once and run
// two ways: with real bytes over any Transport (plan_executor.h) or, for every chip of a slice at
// once, without data by the timing-only simulator (timing_sim.h). So the times the simulator
// reports are those of the very schedules the ICI process group runs.
//
// Words used here:
//  - transfer: one message this chip sends to or receives from `peer`, of `bytes` bytes at byte
//    `offset` of a buffer. A send reads the op's data buffer (or its separate input, for
//    all_to_all); a receive writes the data buffer, or is reduced into it (kRecvReduce: received
//    into scratch, then combined with the reduction kernels).
//  - step: transfers posted together and all awaited before the next step; reductions run at
//    the end of the step, in transfer order, so a block received in step s is sent on in step
//    s+1. Every chip lists the transfers of a step in the same canonical order, so the k-th
//    message from A to B in a step is the k-th receive B posts from A (FIFO matching).
//  - part: an independent slice of the buffer with its own list of steps; parts are merged
//    step by step (step t of the plan holds step t of every part), so parts that use different
//    axes keep every axis busy at once.
// Every transfer of a plan has bytes > 0 except all_to_all's, which keep zero-byte messages so
// that a size mismatch between ranks fails instead of hanging.
#pragma once

#include <cstdint>
#include <vector>

namespace c10d::inline v1::tpu_ici {

enum class TransferKind : std::uint8_t { kSend, kRecv, kRecvReduce };

struct Transfer {
  TransferKind kind = TransferKind::kSend;
  std::uint8_t from_input = 0;  // kSend only: read the separate input buffer, not the data
  int peer = 0;
  std::int64_t offset = 0;  // bytes
  std::int64_t bytes = 0;
};

struct Step {
  std::vector<Transfer> transfers;
};

struct Plan {
  std::vector<Step> steps;
};

// A range of elements of the op's buffer.
struct Range {
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

// Appends step t of every part to step t of `into`.
void merge_parts(const std::vector<std::vector<Step>>& parts, Plan& into);

}  // namespace c10d::inline v1::tpu_ici
