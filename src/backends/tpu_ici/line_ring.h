// Rings over one line of chips (topology.h): the steps of a reduce-scatter and of an all-gather
// of a range of elements, appended to a part's step list (plan.h).
//
// Words used here:
//  - block: the range is cut into n blocks with algorithms::block_of, block c belonging to the
//    chip at coordinate c of the line. After a reduce-scatter chip c holds block c fully reduced;
//    an all-gather starts from that and leaves every block everywhere.
//  - distance: how far along the line, going + (clockwise, cw) or - (counterclockwise, ccw).
//  - bidirectional ring (the line wraps): every block travels both ways, each half the ring.
//    With S = floor(n/2): all-gather step s (1..S) sends cw the block at distance s-1 behind
//    (this chip's own at s=1) and receives the one at distance s behind, and mirrored ccw; each
//    link carries (n-1)/2 blocks, so the time is S hop latencies + (n-1)/(2n) of the range over
//    one link. For even n the block at distance n/2 would come both ways: its first half (L)
//    comes ccw and its second half (R) cw, on the last step. The reduce-scatter is the same in
//    reverse: a block's partial sums start S chips away on either side and travel towards its
//    owner, one hop a step, each chip adding its own contribution; for even n the chip n/2 away
//    contributes only half R cw and half L ccw.
//  - folded ring (the line does not wrap): the order 0, 2, 4, ..., then the odd coordinates
//    back down, so every ring edge is one or two hops and every link is used once each way; a
//    plain one-way ring runs on it (n-1 steps, algorithms/ring_pattern.h's words). It uses both
//    directions of every link for one ring, so it moves half what a wrapping line moves.
#pragma once

#include <cstddef>
#include <vector>

#include "backends/tpu_ici/plan.h"

namespace c10d::inline v1::tpu_ici {

struct LineRing {
  std::vector<int> ranks;  // by coordinate
  int coord = 0;           // this chip's coordinate
  bool wrap = false;       // the line closes through a wraparound link
};

void append_reduce_scatter(const LineRing& line, Range range, std::size_t element_bytes,
                           std::vector<Step>& steps);
void append_all_gather(const LineRing& line, Range range, std::size_t element_bytes,
                       std::vector<Step>& steps);

// Block c of `range` on a line of n chips.
Range line_block(Range range, int n, int c);
// The folded ring order of a line of n chips, by coordinate.
std::vector<int> folded_order(int n);

}  // namespace c10d::inline v1::tpu_ici
