// Recursive halving-doubling pattern arithmetic (Rabenseifner's all-reduce), for any world size.
// Pure functions, tested alone.
//
// Words used here:
//  - pof2: the largest power of two <= n; rem = n - pof2 ranks are extra.
//  - fold: with rem > 0, before the halving each even rank below 2*rem sends its whole vector to
//    the odd rank above it, which reduces it in, and then sits the exchange out; after the
//    doubling the odd rank sends the result back (unfold). The pof2 ranks left are numbered by
//    vrank: r/2 for odd r < 2*rem, r - rem above.
//  - block: the vector is cut into pof2 blocks (block_of); a segment is a run of whole blocks.
//  - step: halving runs log2(pof2) steps. At step k the partner is vrank ^ (pof2 >> (k+1)); the
//    current segment is split in two, this rank keeps the half its vrank's bit selects and sends
//    the other half, reducing the partner's copy of the kept half into its own. After the last
//    step vrank v owns block v fully reduced. Doubling runs the steps in reverse, exchanging
//    owned segments until every rank holds the whole vector.
#pragma once

#include <cstdint>

#include "algorithms/ring_pattern.h"

namespace c10d::inline v1::algorithms {

class HalvingDoublingPattern {
 public:
  HalvingDoublingPattern(int world_size, int rank, std::int64_t count);

  int pof2() const { return pof2_; }
  int rem() const { return rem_; }
  int steps() const { return steps_; }

  // Fold: this rank sends its vector to fold_peer() (and sits out), receives and reduces from
  // it, or takes no part.
  enum class FoldRole { kNone, kSendAndSitOut, kReceive };
  FoldRole fold_role() const;
  int fold_peer() const;  // the other rank of the fold pair; -1 when kNone

  bool participates() const { return vrank_ >= 0; }
  int vrank() const { return vrank_; }  // -1 when sitting out
  int real_rank(int vrank) const;

  struct Exchange {
    int peer = -1;  // real rank
    Block send;     // elements sent to peer
    Block recv;     // elements received from peer (reduced in while halving, copied while doubling)
  };
  // Halving step k, 0 <= k < steps(); only for ranks that participate.
  Exchange halving_step(int k) const;
  // Doubling step k, 0 <= k < steps(): the reverse of halving_step(steps() - 1 - k).
  Exchange doubling_step(int k) const;
  // The block this rank owns after halving.
  Block owned() const;

 private:
  Block segment(int first_block, int blocks) const;
  int n_, rank_, pof2_, rem_, steps_, vrank_;
  std::int64_t count_;
};

}  // namespace c10d::inline v1::algorithms
