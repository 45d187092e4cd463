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
//  - lane: a list of steps that runs on its own: a step waits for the previous step of its own
//    lane only, so lanes on different axes each keep their axis busy at their own pace (rings
//    of different lengths take different numbers of steps; in lock step the shorter ones would
//    wait for the longer). Lanes work on disjoint parts of the buffer and carry their messages
//    under tags of their own (transport::lane_tag), so the messages of two lanes between the
//    same two chips never take each other's receives.
//  - stage: lanes that run at once; a chip starts a stage once every lane of the stage before
//    is done. Lanes of one stage that use different links never delay each other (a link
//    carries one message at a time, so a small message behind a lane's large one would wait
//    for all of it). A plan of one stage of one lane uses the op's tag.
// Every transfer of a plan has bytes > 0 except all_to_all's, which keep zero-byte messages so
// that a size mismatch between ranks fails instead of hanging.
#pragma once

#include <cstdint>
#include <utility>
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

struct Lane {
  std::vector<Step> steps;
};

struct Stage {
  std::vector<Lane> lanes;  // at most transport::kMaxLanes
};

struct Plan {
  std::vector<Stage> stages;  // at most transport::kMaxStages
};

// A range of elements of the op's buffer.
struct Range {
  std::int64_t offset = 0;
  std::int64_t count = 0;
};

// A plan of one lane.
inline Plan single_lane(std::vector<Step> steps) { return {{Stage{{Lane{std::move(steps)}}}}}; }

}  // namespace c10d::inline v1::tpu_ici
