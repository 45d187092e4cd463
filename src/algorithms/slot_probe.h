// How far apart the cores of ranks that share memory are, read through their shared slots
// (transport::SharedSlots): the time of one slot round, where every rank publishes and waits for
// the others. In step, a round costs about one cache line crossing between the ranks' cores.
//
// A hypervisor may run a guest's vCPUs on cores that share a cache or on cores that do not, and
// move them every few seconds; the two place a round far apart (40-100 ns against 250-320 on
// the guests of docs/perf-log.md), and with them which way a large message between the ranks
// moves fastest (choice.h: kApartRound).
#pragma once

#include <chrono>
#include <cstdint>

#include "algorithms/context.h"

namespace c10d::inline v1::algorithms {

// The least time of one slot round over a few short batches, the largest of the ranks' (every
// rank returns the same value). `check` says what the op is (SharedSlots::gather); about 20
// rounds, a few microseconds.
std::chrono::nanoseconds slot_round_time(const Context& ctx, transport::SharedSlots& slots,
                                         std::uint64_t check);

}  // namespace c10d::inline v1::algorithms
