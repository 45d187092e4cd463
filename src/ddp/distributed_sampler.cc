// DistributedSampler (include/c10d/data.h). The permutation is a Fisher-Yates shuffle driven by
// splitmix64 of (seed, epoch), written out here rather than std::shuffle, whose algorithm the
// standard leaves to the library: every rank, on every machine, must draw the same order.
#include <cstdint>
#include <numeric>

#include "c10d/data.h"
#include "core/check.h"

namespace c10d::inline v1::data {
namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform in [0, bound): rejection of the top partial range, so there is no modulo bias.
std::uint64_t below(std::uint64_t& state, std::uint64_t bound) {
  const std::uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  std::uint64_t r = splitmix64(state);
  while (r >= limit) r = splitmix64(state);
  return r % bound;
}

}  // namespace

DistributedSampler::DistributedSampler(std::int64_t size, int replicas, int rank, bool shuffle,
                                       std::uint64_t seed, bool drop_last)
    : size_(size),
      replicas_(replicas),
      rank_(rank),
      shuffle_(shuffle),
      seed_(seed),
      drop_last_(drop_last) {
  C10D_CHECK(size >= 0, "DistributedSampler: data set size {} is negative", size);
  C10D_CHECK(replicas >= 1, "DistributedSampler: {} replicas (need at least 1)", replicas);
  C10D_CHECK(rank >= 0 && rank < replicas, "DistributedSampler: rank {} outside [0, {})", rank,
             replicas);
  num_samples_ = drop_last_ ? size_ / replicas_ : (size_ + replicas_ - 1) / replicas_;
  C10D_CHECK(num_samples_ > 0 || size_ == 0,
             "DistributedSampler: {} samples cannot give each of {} ranks one with drop_last",
             size_, replicas_);
}

std::vector<std::int64_t> DistributedSampler::indices() const {
  std::vector<std::int64_t> order(static_cast<std::size_t>(size_));
  std::iota(order.begin(), order.end(), std::int64_t{0});
  if (shuffle_) {
    std::uint64_t state = seed_ ^ (0xD1B54A32D192ED03ull * static_cast<std::uint64_t>(epoch_ + 1));
    for (std::size_t i = order.size(); i > 1; --i) {
      std::swap(order[i - 1], order[below(state, i)]);
    }
  }
  const std::size_t total = static_cast<std::size_t>(total_size());
  if (total > order.size() && !order.empty()) {  // pad by wrapping around
    const std::size_t n = order.size();
    for (std::size_t i = 0; order.size() < total; ++i) order.push_back(order[i % n]);
  }
  order.resize(total);  // drop_last: cut the tail
  std::vector<std::int64_t> mine;
  mine.reserve(static_cast<std::size_t>(num_samples_));
  for (std::size_t i = static_cast<std::size_t>(rank_); i < total;
       i += static_cast<std::size_t>(replicas_)) {
    mine.push_back(order[i]);
  }
  return mine;
}

}  // namespace c10d::inline v1::data
