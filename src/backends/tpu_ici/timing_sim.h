// The timing-only simulator: runs the plans (plan.h) of every chip of a torus in one process,
// without data, under the time model of link_model.h, as a discrete-event simulation. It is how
// c10d-icisim times a 16x16x24 slice that no host could run with real bytes, and the tests
// check that it gives the fabric's own times.
//
// Words used here:
//  - event: a lane of a chip starting a step at a virtual time. Events run in time order (ties
//    by rank, then lane), so links serve the messages of different chips in the order they were
//    posted.
//  - a lane's step: its sends are handed to their routes' links at the step's start time (a
//    send is done when it has left its first link); the step ends when every send is done and
//    every receive has arrived, at the latest of those times; the lane's next step starts then.
//    A chip's next stage (plan.h) starts when the last lane of its stage ends; the chip is done
//    when its last stage is.
//  - inbox: per (destination, source, stage, lane), the arrival times and sizes of messages not
//    yet received, oldest first, matched to receives in order as the fabric matches them.
//
// Every chip starts at time 0. Not thread-safe; one simulation per object.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "backends/tpu_ici/link_model.h"
#include "backends/tpu_ici/plan.h"
#include "backends/tpu_ici/topology.h"

namespace c10d::inline v1::tpu_ici {

struct SimResult {
  double seconds = 0;                // the last chip's finish time
  std::vector<double> chip_seconds;  // each chip's finish time
  std::vector<LinkClock> links;      // per link id (topology.h)
  std::int64_t messages = 0;
};

// Simulates plan_of(r) for every rank r of `torus`. Throws InvalidArgument when the plans do
// not fit together (a message of one size received as another, or a chip left waiting for a
// message nobody sends: named with the rank, step and peer).
SimResult simulate(const Torus& torus, const std::function<Plan(int rank)>& plan_of);

// Per-axis link utilization of a result: the busy time of every existing link of the axis
// (both directions) divided by (links x seconds), and the bytes they carried.
struct AxisUsage {
  int axis = 0;
  double utilization = 0;
  std::uint64_t bytes = 0;
  int links = 0;
};
std::vector<AxisUsage> axis_usage(const Torus& torus, const SimResult& result);

}  // namespace c10d::inline v1::tpu_ici
