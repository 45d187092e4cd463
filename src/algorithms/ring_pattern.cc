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
    : RingPattern(std::move(order), rank, std::vector<Block>{}) {
  C10D_CHECK(count >= 0, "ring over a negative count {}", count);
  const int n = size();
  blocks_.reserve(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) blocks_.push_back(block_of(count, n, r));
}

RingPattern::RingPattern(std::vector<int> order, int rank, std::vector<Block> blocks)
    : order_(std::move(order)), blocks_(std::move(blocks)) {
  const int n = static_cast<int>(order_.size());
  C10D_CHECK(n > 0, "ring of no ranks");
  // Empty: the delegating constructor above fills them in.
  C10D_CHECK(blocks_.empty() || static_cast<int>(blocks_.size()) == n,
             "ring of {} ranks given {} blocks", n, blocks_.size());
  for (std::size_t r = 0; r < blocks_.size(); ++r) {
    C10D_CHECK(blocks_[r].offset >= 0 && blocks_[r].count >= 0,
               "ring block of rank {}: offset {} count {}", r, blocks_[r].offset, blocks_[r].count);
  }
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
  return blocks_[static_cast<std::size_t>(order_[static_cast<std::size_t>(pos)])];
}

std::vector<Block> adjacent_blocks(const std::vector<std::int64_t>& counts, std::int64_t offset) {
  std::vector<Block> blocks;
  blocks.reserve(counts.size());
  for (std::int64_t c : counts) {
    C10D_CHECK(c >= 0, "a block of negative count {}", c);
    blocks.push_back({offset, c});
    offset += c;
  }
  return blocks;
}

}  // namespace c10d::inline v1::algorithms
