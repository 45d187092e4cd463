#include "backends/tpu_ici/axis_shares.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"

namespace c10d::inline v1::tpu_ici {

double ring_cost(const AxisRing& axis) {
  C10D_CHECK(axis.chips > 1, "axis_shares: an axis of {} chips has no ring", axis.chips);
  const double x = axis.chips;
  return (x - 1) / x * (axis.wraps && axis.chips > 2 ? 1.0 : 2.0);
}

int ring_steps(const AxisRing& axis) {
  C10D_CHECK(axis.chips > 1, "axis_shares: an axis of {} chips has no ring", axis.chips);
  return axis.wraps && axis.chips > 2 ? axis.chips / 2 : axis.chips - 1;
}

int step_hops(const AxisRing& axis) {
  C10D_CHECK(axis.chips > 1, "axis_shares: an axis of {} chips has no ring", axis.chips);
  return (axis.wraps && axis.chips > 2) || axis.chips == 2 ? 1 : 2;
}

std::vector<double> axis_shares(std::span<const AxisRing> axes) {
  std::vector<double> shares;
  double sum = 0;
  for (const AxisRing& a : axes) {
    shares.push_back(1 / ring_cost(a));
    sum += shares.back();
  }
  for (double& s : shares) s /= sum;
  return shares;
}

bool stage_per_phase(std::span<const AxisRing> axes, std::span<const double> shares, double bytes,
                     double bandwidth, double hop_latency) {
  const std::size_t m = axes.size();
  C10D_CHECK(shares.size() == m, "stage_per_phase: {} shares for {} axes", shares.size(), m);
  // Lane i's phase p < m reduce-scatters on axis i+p over its share / (the chips of the axes
  // before); phase 2m-1-p all-gathers the same.
  const auto axis_of = [&](std::size_t lane, std::size_t p) -> const AxisRing& {
    return axes[(lane + (p < m ? p : 2 * m - 1 - p)) % m];
  };
  double staged_hops = 0, bandwidth_term = 0;
  std::vector<double> range(m);
  for (std::size_t i = 0; i < m; ++i) range[i] = shares[i] * bytes;
  for (std::size_t p = 0; p < m; ++p) {
    int hops = 0;
    double busy = 0;
    for (std::size_t i = 0; i < m; ++i) {
      const AxisRing& axis = axis_of(i, p);
      hops = std::max(hops, ring_steps(axis) * step_hops(axis));
      busy = std::max(busy, range[i] * ring_cost(axis) / (2 * bandwidth));
      range[i] /= axis.chips;
    }
    staged_hops += 2 * hops;  // the reduce-scatter phase and its all-gather
    bandwidth_term += 2 * busy;
  }
  // Lock step: step t waits for the most hops among the lanes' steps t.
  std::vector<std::vector<int>> lane_steps(m);
  for (std::size_t i = 0; i < m; ++i) {
    for (std::size_t p = 0; p < 2 * m; ++p) {
      const AxisRing& axis = axis_of(i, p);
      lane_steps[i].insert(lane_steps[i].end(), static_cast<std::size_t>(ring_steps(axis)),
                           step_hops(axis));
    }
  }
  double merged_hops = 0;
  for (std::size_t t = 0;; ++t) {
    int hops = -1;
    for (const auto& steps : lane_steps) {
      if (t < steps.size()) hops = std::max(hops, steps[t]);
    }
    if (hops < 0) break;
    merged_hops += hops;
  }
  const double extra = (staged_hops - merged_hops) * hop_latency;
  return bandwidth_term >= 2 * extra;
}

std::vector<std::int64_t> split_by_shares(std::int64_t count, std::span<const double> shares) {
  C10D_CHECK(count >= 0, "split_by_shares: count {} is negative", count);
  const std::size_t m = shares.size();
  std::vector<std::int64_t> out(m, 0);
  if (m == 0) return out;
  std::vector<double> rest(m, 0);
  std::int64_t given = 0;
  for (std::size_t i = 0; i < m; ++i) {
    C10D_CHECK(shares[i] >= 0 && shares[i] <= 1, "split_by_shares: share {} of lane {}", shares[i],
               i);
    const double exact = static_cast<double>(count) * shares[i];
    out[i] = std::min(count - given, static_cast<std::int64_t>(std::floor(exact)));
    rest[i] = exact - static_cast<double>(out[i]);
    given += out[i];
  }
  std::vector<std::size_t> order(m);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return rest[a] > rest[b]; });
  for (std::size_t k = 0; given < count; k = (k + 1) % m, ++given) ++out[order[k]];
  return out;
}

}  // namespace c10d::inline v1::tpu_ici
