// How the multi-axis all_reduce (torus_plans.h) splits its vector among its lanes, one lane per
// axis of more than one chip, so that the axes' links finish their large phases together. Pure.
//
// Words used here:
//  - lane i of m starts on axis i: it reduce-scatters its share along axes i, i+1, ..., i-1
//    (mod m), each phase over 1/X of what the phase before left (X the chips of that axis), then
//    all-gathers back along the same axes in reverse. For large vectors the lanes move from
//    phase to phase together (a stage per phase, plan.h), and in every phase each lane is on an
//    axis of its own, so no two lanes share a link.
//  - cost of an axis: the time one byte of a phase's range keeps the axis's links busy, in units
//    of 1/W (W = 2B, both ways of one link): (X-1)/X for a bidirectional ring (a wrapping axis
//    of more than 2 chips: each link carries (X-1)/(2X) of the range each way), twice that for
//    a folded one-way ring (no wraparound, or 2 chips: it runs at half the bandwidth).
//  - capacity of an axis: 1 / cost, the bytes per unit of time its ring reduce-scatters.
//  - hops of an axis: the hop latencies one phase on it waits: X/2 steps of one hop for a
//    bidirectional ring, X-1 steps of up to 2 hops for a folded one (1 step of 1 for 2 chips).
// A lane's first and last phases carry its whole share, the others at most 1/X of it, so the
// time is set by the first and last phases: they end together when each lane's share is in
// proportion to its first axis's capacity. On equal axes the shares are equal; on 16x16x24 the
// long axis's lane takes a little less (its ring costs 23/24 a byte against 15/16).
//
// Small vectors: a stage per phase waits, in every phase, for the lane with the most hops in
// it; merging the lanes step by step into one lane (lock step, the lanes' steps side by side)
// waits, at every step, for the step with the most hops. The stages cost E more hop latencies
// (16x16x24: 72 against 56; E can be negative, as where folded rings' 2-hop steps meet others),
// while lock step loses bandwidth wherever the lanes' rings differ, and more the larger the
// vector. Measured on eleven unequal slices (v5p 16x16x24, 8x8x12, 4x4x8, 4x4x6, 2x2x8, 16x24,
// 4x6, 3x5, 2x8; v4 4x8x12, 8x16), the two cross where the staged plan's bandwidth term is 1-4
// E L: a stage per phase from 2 E L, lock step (with equal shares, as the rings' steps are then
// what counts) below.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace c10d::inline v1::tpu_ici {

struct AxisRing {
  int chips = 2;      // more than 1
  bool wraps = true;  // a bidirectional ring (with more than 2 chips), else a folded one
};

double ring_cost(const AxisRing& axis);
int ring_steps(const AxisRing& axis);
int step_hops(const AxisRing& axis);  // the most hops of one step's messages

// The share of the vector each lane takes, in axes' order, summing to 1. InvalidArgument for an
// axis of fewer than 2 chips (the caller leaves those out: they have no ring).
std::vector<double> axis_shares(std::span<const AxisRing> axes);

// Whether `bytes` all-reduced by lanes of `shares` over `axes` should run a stage per phase
// (above) rather than in lock step, on links of `bandwidth` bytes per second one way and
// `hop_latency` seconds per hop. True for equal axes (the stages then cost nothing).
bool stage_per_phase(std::span<const AxisRing> axes, std::span<const double> shares, double bytes,
                     double bandwidth, double hop_latency);

// `count` elements cut by `shares` into whole counts summing to `count`: the floors, then one
// more to the lanes with the largest remainders (the lowest lane first on a tie).
std::vector<std::int64_t> split_by_shares(std::int64_t count, std::span<const double> shares);

}  // namespace c10d::inline v1::tpu_ici
