// Dissemination barrier (Hensgen, Finkel and Manber): no rank leaves before every rank arrived.
//
// Words used here:
//  - round: rounds k = 0 .. ceil(log2 n) - 1. In round k each rank sends a one-byte token to
//    (rank + 2^k) mod n and receives one from (rank - 2^k) mod n, then moves to round k+1.
//  - why it works: after round k a rank has heard, directly or through the tokens of earlier
//    rounds, from the 2^(k+1) - 1 ranks before it; after the last round that covers all n - 1
//    others. Unlike a gather-then-broadcast tree no rank is a hot spot, and there are
//    ceil(log2 n) rounds for any n, not only powers of two.
// A rank that never arrives holds every other rank in the barrier until ctx.deadline, where each
// throws TimeoutError (or the transport's NetworkError if that rank is known to be gone).
#pragma once

#include "algorithms/context.h"

namespace c10d::inline v1::algorithms {

// Pattern arithmetic (pure; n >= 1, 0 <= rank < n, 0 <= round < dissemination_rounds(n)).
int dissemination_rounds(int n);  // ceil(log2 n); 0 for n = 1
int dissemination_send_peer(int n, int rank, int round);
int dissemination_recv_peer(int n, int rank, int round);

// Returns once every rank of ctx has entered the barrier.
void barrier(const Context& ctx);

}  // namespace c10d::inline v1::algorithms
