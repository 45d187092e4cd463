// Ring pattern arithmetic: which peer, which block, at which step. Pure functions, tested alone.
//
// Words used by the ring algorithms:
//  - order: the ring, a permutation of the ranks; the rank at position p sends to the rank at
//    position p+1 (mod n), its right neighbour. A torus or a topology-aware backend passes its
//    own order; the default is 0, 1, ..., n-1.
//  - block: the buffer is cut into n blocks of consecutive elements, one per rank, block r
//    starting before block r+1; they differ in size by at most one element. Or the caller names
//    each rank's block (offset and count) itself: then they may differ in size, be empty, and
//    lie anywhere in the buffer, apart and in any order (the hierarchical collectives, and a
//    split weighted by link rate, do so). The ring visits them by position: "block at position
//    q" is the block of rank order[q].
//  - step: reduce-scatter runs n-1 steps. At step s the rank at position p sends the block at
//    position p-s-1 to its right neighbour, and receives the block at position p-s-2 from its
//    left neighbour and reduces its own elements into it. A block's reduction starts one
//    position after its owner and travels once round the ring, so after n-1 steps each rank holds
//    the full reduction of its own block. All-gather runs n-1 steps: at step s, position p
//    sends the block at position p-s (starting with its own) and receives the one at p-s-1.
#pragma once

#include <cstdint>
#include <vector>

namespace c10d::inline v1::algorithms {

struct Block {
  std::int64_t offset = 0;  // first element
  std::int64_t count = 0;   // elements
};

// Block r of `count` elements cut into `n` blocks: the first count % n blocks have one more.
Block block_of(std::int64_t count, int n, int r);

class RingPattern {
 public:
  // `order` must be a permutation of 0..n-1 holding `rank` (InvalidArgument otherwise).
  RingPattern(std::vector<int> order, int rank, std::int64_t count);
  // The same with each rank's block named: blocks[r] is rank r's (n of them, counts >= 0,
  // offsets >= 0; InvalidArgument otherwise). They must not overlap, which is not checked.
  RingPattern(std::vector<int> order, int rank, std::vector<Block> blocks);
  static RingPattern identity(int world_size, int rank, std::int64_t count);

  int size() const { return static_cast<int>(order_.size()); }
  int position() const { return position_; }
  int right() const;  // the rank this one sends to
  int left() const;   // the rank this one receives from

  // The block at ring position q (any integer; taken mod n).
  Block block_at(int q) const;
  // Reduce-scatter step s, 0 <= s < n-1.
  Block reduce_scatter_send(int step) const { return block_at(position_ - step - 1); }
  Block reduce_scatter_recv(int step) const { return block_at(position_ - step - 2); }
  // All-gather step s, 0 <= s < n-1.
  Block all_gather_send(int step) const { return block_at(position_ - step); }
  Block all_gather_recv(int step) const { return block_at(position_ - step - 1); }
  // This rank's own block: what it holds fully reduced after reduce-scatter.
  Block own() const { return block_at(position_); }

 private:
  std::vector<int> order_;
  int position_ = 0;
  std::vector<Block> blocks_;  // by rank
};

// The blocks of `counts` (one per rank, each >= 0) laid end to end in rank order from `offset`.
std::vector<Block> adjacent_blocks(const std::vector<std::int64_t>& counts,
                                   std::int64_t offset = 0);

}  // namespace c10d::inline v1::algorithms
