#include "algorithms/halving_doubling_pattern.h"

#include "core/check.h"

namespace c10d::inline v1::algorithms {

HalvingDoublingPattern::HalvingDoublingPattern(int world_size, int rank, std::int64_t count)
    : n_(world_size), rank_(rank), count_(count) {
  C10D_CHECK(world_size > 0 && rank >= 0 && rank < world_size,
             "halving-doubling: rank {} out of range for world size {}", rank, world_size);
  C10D_CHECK(count >= 0, "halving-doubling over a negative count {}", count);
  pof2_ = 1;
  steps_ = 0;
  while (pof2_ * 2 <= n_) {
    pof2_ *= 2;
    ++steps_;
  }
  rem_ = n_ - pof2_;
  if (rank_ < 2 * rem_) {
    vrank_ = rank_ % 2 == 1 ? rank_ / 2 : -1;
  } else {
    vrank_ = rank_ - rem_;
  }
}

HalvingDoublingPattern::FoldRole HalvingDoublingPattern::fold_role() const {
  if (rank_ >= 2 * rem_) return FoldRole::kNone;
  return rank_ % 2 == 0 ? FoldRole::kSendAndSitOut : FoldRole::kReceive;
}

int HalvingDoublingPattern::fold_peer() const {
  switch (fold_role()) {
    case FoldRole::kSendAndSitOut:
      return rank_ + 1;
    case FoldRole::kReceive:
      return rank_ - 1;
    case FoldRole::kNone:
      break;
  }
  return -1;
}

int HalvingDoublingPattern::real_rank(int vrank) const {
  C10D_CHECK(vrank >= 0 && vrank < pof2_, "vrank {} out of range for {} ranks", vrank, pof2_);
  return vrank < rem_ ? vrank * 2 + 1 : vrank + rem_;
}

Block HalvingDoublingPattern::segment(int first_block, int blocks) const {
  const Block first = block_of(count_, pof2_, first_block);
  const Block last = block_of(count_, pof2_, first_block + blocks - 1);
  return {first.offset, last.offset + last.count - first.offset};
}

HalvingDoublingPattern::Exchange HalvingDoublingPattern::halving_step(int k) const {
  C10D_CHECK(participates() && k >= 0 && k < steps_, "halving step {} of rank {}", k, rank_);
  // Before step k the segment held is the 2^(steps-k) blocks sharing vrank's top k bits.
  const int blocks = pof2_ >> k;
  const int first = vrank_ & ~(blocks - 1);
  const int half = blocks / 2;
  const int mask = half;
  const bool upper = (vrank_ & mask) != 0;
  Exchange e;
  e.peer = real_rank(vrank_ ^ mask);
  e.recv = segment(upper ? first + half : first, half);  // the half kept, reduced in
  e.send = segment(upper ? first : first + half, half);  // the partner's half
  return e;
}

HalvingDoublingPattern::Exchange HalvingDoublingPattern::doubling_step(int k) const {
  const Exchange h = halving_step(steps_ - 1 - k);
  // Doubling sends what halving kept (now complete) and receives what halving gave away.
  return {h.peer, h.recv, h.send};
}

Block HalvingDoublingPattern::owned() const {
  C10D_CHECK(participates(), "rank {} sits out the halving and owns no block", rank_);
  return block_of(count_, pof2_, vrank_);
}

}  // namespace c10d::inline v1::algorithms
