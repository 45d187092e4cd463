// All_reduce of a small vector among ranks that share memory (transport::SharedSlots): every
// rank publishes its vector in its slot, waits for everyone's, and reduces them all in rank
// order, so every rank computes the same bits. One round and no message, where halving-doubling
// takes log2(n) exchanges of a message each way.
#pragma once

#include <cstdint>

#include "algorithms/context.h"
#include "c10d/types.h"

namespace c10d::inline v1::algorithms {

// Reduces `count` elements of `data` across the ranks of ctx in place, through `slots` (the
// vector fits: slots.max_bytes()). `check` says what the op is (SharedSlots::gather). AVG
// divides once at the end; PREMUL_SUM scales this rank's input first.
void slot_all_reduce(const Context& ctx, transport::SharedSlots& slots, std::uint64_t check,
                     DType dtype, const Reduction& reduction, void* data, std::int64_t count);

}  // namespace c10d::inline v1::algorithms
