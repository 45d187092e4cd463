#include "backends/tpu_ici/link_model.h"

#include <algorithm>

namespace c10d::inline v1::tpu_ici {

MessageTimes LinkClock::cross(double bandwidth, double latency, std::uint64_t bytes,
                              MessageTimes in) {
  const double duration = static_cast<double>(bytes) / bandwidth;
  auto& iv = busy_intervals_;
  // The first interval that ends after the head arrives; gaps before it are in the past.
  auto it = std::upper_bound(iv.begin(), iv.end(), in.head,
                             [](double t, const auto& interval) { return t < interval.second; });
  double start = in.head;
  double finish = 0;
  for (;;) {
    if (it != iv.end() && it->first <= start) {  // busy at `start`: try after this interval
      start = it->second;
      ++it;
      continue;
    }
    finish = std::max(start + duration, in.tail);
    if (it == iv.end() || finish <= it->first) break;  // fits in the gap before *it
    start = it->second;
    ++it;
  }
  // Insert [start, finish], merging with touching neighbours.
  if (finish > start) {
    auto at = iv.insert(it, {start, finish});
    if (at + 1 != iv.end() && (at + 1)->first <= finish) {
      at->second = (at + 1)->second;
      iv.erase(at + 1);
    }
    if (at != iv.begin() && (at - 1)->second >= start) {
      (at - 1)->second = at->second;
      iv.erase(at);
    }
    if (iv.size() > kMaxIntervals) iv.erase(iv.begin());
  }
  busy_ += finish - start;
  bytes_ += bytes;
  ++messages_;
  last_finish_ = finish;
  return {start + latency, finish + latency};
}

void LinkClock::forget_before(double t) {
  auto it = std::upper_bound(busy_intervals_.begin(), busy_intervals_.end(), t,
                             [](double x, const auto& interval) { return x < interval.second; });
  busy_intervals_.erase(busy_intervals_.begin(), it);
}

}  // namespace c10d::inline v1::tpu_ici
