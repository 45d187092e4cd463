// Multi-axis all_reduce (torus_plans.h): one lane per axis, each over its share of the vector
// (axis_shares.h), reduce-scattering along the axes in its own rotated order and all-gathering
// back. Large vectors run phase p of every lane as stage p; small ones merge the lanes step by
// step into one (axis_shares.h says which).
#include "backends/tpu_ici/axis_shares.h"
#include "backends/tpu_ici/line_ring.h"
#include "backends/tpu_ici/torus_plans.h"
#include "transport/transport.h"

namespace c10d::inline v1::tpu_ici {
namespace {

// Step t of the merged lane holds step t of every lane, the lanes' phases one after another.
Lane merged(const std::vector<std::vector<std::vector<Step>>>& phases) {
  Lane into;
  for (const auto& lane : phases) {
    std::size_t t = 0;
    for (const auto& phase : lane) {
      for (const Step& step : phase) {
        if (into.steps.size() <= t) into.steps.resize(t + 1);
        auto& to = into.steps[t++].transfers;
        to.insert(to.end(), step.transfers.begin(), step.transfers.end());
      }
    }
  }
  return into;
}

}  // namespace

Plan multi_axis_all_reduce(const Torus& torus, int rank, std::int64_t count,
                           std::size_t element_bytes) {
  std::vector<int> axes;
  std::vector<AxisRing> rings;
  for (int a = 0; a < torus.ndims(); ++a) {
    if (torus.dim(a) == 1) continue;
    axes.push_back(a);
    rings.push_back({torus.dim(a), torus.wraps(a)});
  }
  const auto m = axes.size();
  if (m == 0 || count == 0) return {};
  const std::vector<double> shares = axis_shares(rings);
  const double bytes = static_cast<double>(count) * static_cast<double>(element_bytes);
  const bool staged =
      m > 1 && 2 * m <= static_cast<std::size_t>(transport::kMaxStages) &&
      stage_per_phase(rings, shares, bytes, torus.link_bandwidth(), torus.hop_latency());
  std::vector<std::int64_t> counts = split_by_shares(count, shares);
  if (!staged) {  // lock step: equal shares (axis_shares.h)
    for (std::size_t i = 0; i < m; ++i) {
      counts[i] = line_block({0, count}, static_cast<int>(m), static_cast<int>(i)).count;
    }
  }
  // phases[i][p]: the steps of lane i's phase p.
  std::vector<std::vector<std::vector<Step>>> phases(m, std::vector<std::vector<Step>>(2 * m));
  std::int64_t offset = 0;
  for (std::size_t i = 0; i < m; ++i) {
    Range range{offset, counts[i]};
    offset += range.count;
    std::vector<Range> before(m);
    std::vector<LineRing> lines(m);
    for (std::size_t k = 0; k < m; ++k) {
      const int axis = axes[(i + k) % m];
      lines[k] = {torus.line(rank, axis), torus.coord(rank, axis), torus.wraps(axis)};
      before[k] = range;
      append_reduce_scatter(lines[k], range, element_bytes, phases[i][k]);
      range = line_block(range, torus.dim(axis), lines[k].coord);
    }
    for (std::size_t k = 0; k < m; ++k) {
      append_all_gather(lines[m - 1 - k], before[m - 1 - k], element_bytes, phases[i][m + k]);
    }
  }
  if (!staged) return {{Stage{{merged(phases)}}}};
  Plan plan;
  plan.stages.resize(2 * m);
  for (std::size_t p = 0; p < 2 * m; ++p) {
    for (std::size_t i = 0; i < m; ++i) plan.stages[p].lanes.push_back({std::move(phases[i][p])});
  }
  return plan;
}

}  // namespace c10d::inline v1::tpu_ici
