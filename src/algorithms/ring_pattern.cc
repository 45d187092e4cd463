#include "algorithms/ring_pattern.h"

#include <algorithm>

#include "core/check.h"

namespace c10d::inline v1::algorithms {

Block block_of(std::int64_t count, int n, int r) {
  const std::int64_t base = count / n;
  const std::int64_t extra = count % n;
  const std::int64_t offset = r * base + std::min<std::int64_t>(r, extra);
  return {offset, base + (r < extra ? 1 : 0)};
}

RingPattern::RingPattern(std::vector<int> order, int rank, std::int64_t count)
    : order_(std::move(order)), count_(count) {
  const int n = static_cast<int>(order_.size());
  C10D_CHECK(n > 0, "ring of no ranks");
  C10D_CHECK(count >= 0, "ring over a negative count {}", count);
  std::vector<bool> seen(static_cast<std::size_t>(n), false);
  for (int r : order_) {
    C10D_CHECK(r >= 0 && r < n && !seen[static_cast<std::size_t>(r)],
               "ring order is not a permutation of 0..{}: rank {} out of range or repeated", n - 1,
               r);
    seen[static_cast<std::size_t>(r)] = true;
  }
  const auto it = std::find(order_.begin(), order_.end(), rank);
  C10D_CHECK(it != order_.end(), "rank {} is not in the ring order", rank);
  position_ = static_cast<int>(it - order_.begin());
}

RingPattern RingPattern::identity(int world_size, int rank, std::int64_t count) {
  std::vector<int> order(static_cast<std::size_t>(std::max(world_size, 0)));
  for (int i = 0; i < world_size; ++i) order[static_cast<std::size_t>(i)] = i;
  return RingPattern(std::move(order), rank, count);
}

int RingPattern::right() const {
  return order_[static_cast<std::size_t>((position_ + 1) % size())];
}

int RingPattern::left() const {
  return order_[static_cast<std::size_t>((position_ + size() - 1) % size())];
}

Block RingPattern::block_at(int q) const {
  const int n = size();
  const int pos = ((q % n) + n) % n;
  return block_of(count_, n, order_[static_cast<std::size_t>(pos)]);
}

}  // namespace c10d::inline v1::algorithms
