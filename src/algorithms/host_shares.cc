#include "algorithms/host_shares.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "core/check.h"
#include "core/parse.h"

namespace c10d::inline v1::algorithms {
namespace {

std::size_t next(std::size_t p, std::size_t h) { return (p + 1) % h; }

void check_rates(const std::vector<double>& rates, const char* what) {
  for (double r : rates) {
    C10D_CHECK(std::isfinite(r) && r > 0, "{} rate {} (each must be finite and > 0)", what, r);
  }
}

double time_of(const std::vector<double>& s, const std::vector<double>& e) {
  double t = 0;
  for (std::size_t p = 0; p < e.size(); ++p) {
    t = std::max(t, (2 - s[p] - s[next(p, e.size())]) / e[p]);
  }
  return t;
}

// The least s (s >= 0, s_p + s_{p+1} >= need_p) with s_0 = x: each next share as small as the
// edge before it allows, the last also covering the edge that closes the ring. (Any feasible s
// with the same s_0 can move its excess forward to this one without growing its sum.)
std::vector<double> least_cover(const std::vector<double>& need, double x) {
  const std::size_t h = need.size();
  std::vector<double> s(h);
  s[0] = x;
  for (std::size_t p = 1; p < h; ++p) s[p] = std::max(0.0, need[p - 1] - s[p - 1]);
  s[h - 1] = std::max(s[h - 1], need[h - 1] - x);
  return s;
}

double sum(const std::vector<double>& s) { return std::accumulate(s.begin(), s.end(), 0.0); }

// The least-sum cover for time t (its sum is convex in s_0: ternary search on [0, 1]).
std::vector<double> cover_for(const std::vector<double>& e, double t) {
  std::vector<double> need(e.size());
  for (std::size_t p = 0; p < e.size(); ++p) need[p] = 2 - t * e[p];
  double lo = 0, hi = 1;
  for (int i = 0; i < 100; ++i) {
    const double a = lo + (hi - lo) / 3, b = hi - (hi - lo) / 3;
    if (sum(least_cover(need, a)) <= sum(least_cover(need, b))) {
      hi = b;
    } else {
      lo = a;
    }
  }
  return least_cover(need, (lo + hi) / 2);
}

std::vector<double> fractions(const std::vector<std::int64_t>& shares, std::size_t h) {
  if (shares.empty()) return std::vector<double>(h, 1.0 / static_cast<double>(h));
  C10D_CHECK(shares.size() == h, "{} shares for {} edge rates", shares.size(), h);
  const double total =
      static_cast<double>(std::accumulate(shares.begin(), shares.end(), std::int64_t{0}));
  C10D_CHECK(total > 0, "shares that sum to {}", total);
  std::vector<double> s;
  for (std::int64_t x : shares) s.push_back(static_cast<double>(x) / total);
  return s;
}

}  // namespace

std::vector<double> ring_edge_rates(const std::vector<double>& host_rates) {
  check_rates(host_rates, "host");
  std::vector<double> e(host_rates.size());
  for (std::size_t p = 0; p < e.size(); ++p) {
    e[p] = std::min(host_rates[p], host_rates[next(p, e.size())]);
  }
  return e;
}

double ring_time(const std::vector<std::int64_t>& shares, const std::vector<double>& edge_rates) {
  check_rates(edge_rates, "edge");
  C10D_CHECK(!edge_rates.empty(), "ring_time of a ring without edges");
  return time_of(fractions(shares, edge_rates.size()), edge_rates);
}

std::vector<std::int64_t> balanced_shares(const std::vector<double>& edge_rates) {
  check_rates(edge_rates, "edge");
  const std::size_t h = edge_rates.size();
  // H <= 2: every edge carries one chunk whatever the shares; equal rates: equal is optimal.
  if (h <= 2 || std::equal(edge_rates.begin() + 1, edge_rates.end(), edge_rates.begin())) {
    return {};
  }
  const double equal = ring_time({}, edge_rates);
  double lo = 0, hi = equal;  // hi: feasible (equal shares), lo: not (no time at all)
  for (int i = 0; i < 100; ++i) {
    const double mid = (lo + hi) / 2;
    if (sum(cover_for(edge_rates, mid)) <= 1) {
      hi = mid;
    } else {
      lo = mid;
    }
  }
  std::vector<double> s = cover_for(edge_rates, hi);
  // The cover sums to at most 1; the rest spread evenly only lightens edges.
  const double rest = std::max(0.0, 1 - sum(s)) / static_cast<double>(h);
  std::vector<std::int64_t> shares;
  for (double x : s) {
    shares.push_back(std::llround((x + rest) * static_cast<double>(kShareUnit)));
  }
  if (std::all_of(shares.begin(), shares.end(), [](std::int64_t x) { return x == 0; })) return {};
  if (ring_time(shares, edge_rates) > equal * (1 - kMinShareGain)) return {};
  return shares;
}

std::vector<std::int64_t> next_shares(const std::vector<std::int64_t>& current,
                                      const std::vector<double>& edge_rates) {
  std::vector<std::int64_t> best = balanced_shares(edge_rates);
  if (best == current) return current;
  const double now = ring_time(current, edge_rates);
  return ring_time(best, edge_rates) < now * (1 - kMinShareGain) ? best : current;
}

std::vector<double> parse_host_rates(std::string_view name, std::string_view text, int hosts) {
  static constexpr std::pair<std::string_view, double> kUnits[] = {
      {"tbit", 1e12}, {"gbit", 1e9}, {"mbit", 1e6}, {"kbit", 1e3}, {"bit", 1.0}};
  std::vector<double> rates;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = std::min(text.find(',', start), text.size());
    std::string_view item = text.substr(start, comma - start);
    double scale = 1.0;
    for (const auto& [unit, factor] : kUnits) {
      if (item.size() > unit.size() && item.ends_with(unit)) {
        item.remove_suffix(unit.size());
        scale = factor;
        break;
      }
    }
    const auto v = core::parse_double(item, 0, 1e15);
    if (!v.value || *v.value <= 0) {
      C10D_THROW(InvalidArgument, "{}={}: rate {} of host {}: {}", name, core::printable(text),
                 core::printable(text.substr(start, comma - start)), rates.size(),
                 v.value ? std::string("must be > 0") : v.error);
    }
    rates.push_back(*v.value * scale);
    start = comma + 1;
  }
  if (static_cast<int>(rates.size()) != hosts) {
    C10D_THROW(InvalidArgument, "{}={}: {} rates for a group over {} hosts (one per host)", name,
               core::printable(text), rates.size(), hosts);
  }
  return rates;
}

}  // namespace c10d::inline v1::algorithms
