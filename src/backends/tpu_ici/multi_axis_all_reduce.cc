// Multi-axis all_reduce (torus_plans.h): one part per axis, each reduce-scattering along the
// axes in its own rotated order and all-gathering back.
#include "backends/tpu_ici/line_ring.h"
#include "backends/tpu_ici/torus_plans.h"

namespace c10d::inline v1::tpu_ici {

void merge_parts(const std::vector<std::vector<Step>>& parts, Plan& into) {
  for (const auto& part : parts) {
    if (into.steps.size() < part.size()) into.steps.resize(part.size());
    for (std::size_t t = 0; t < part.size(); ++t) {
      auto& to = into.steps[t].transfers;
      to.insert(to.end(), part[t].transfers.begin(), part[t].transfers.end());
    }
  }
}

Plan multi_axis_all_reduce(const Torus& torus, int rank, std::int64_t count,
                           std::size_t element_bytes) {
  std::vector<int> axes;
  for (int a = 0; a < torus.ndims(); ++a) {
    if (torus.dim(a) > 1) axes.push_back(a);
  }
  Plan plan;
  const int m = static_cast<int>(axes.size());
  if (m == 0 || count == 0) return plan;
  std::vector<std::vector<Step>> parts(static_cast<std::size_t>(m));
  for (int i = 0; i < m; ++i) {
    auto& steps = parts[static_cast<std::size_t>(i)];
    Range range = line_block({0, count}, m, i);
    std::vector<Range> before(static_cast<std::size_t>(m));
    std::vector<LineRing> lines(static_cast<std::size_t>(m));
    for (int k = 0; k < m; ++k) {
      const int axis = axes[static_cast<std::size_t>((i + k) % m)];
      LineRing& line = lines[static_cast<std::size_t>(k)];
      line = {torus.line(rank, axis), torus.coord(rank, axis), torus.wraps(axis)};
      before[static_cast<std::size_t>(k)] = range;
      append_reduce_scatter(line, range, element_bytes, steps);
      range = line_block(range, torus.dim(axis), line.coord);
    }
    for (int k = m - 1; k >= 0; --k) {
      append_all_gather(lines[static_cast<std::size_t>(k)], before[static_cast<std::size_t>(k)],
                        element_bytes, steps);
    }
  }
  merge_parts(parts, plan);
  return plan;
}

}  // namespace c10d::inline v1::tpu_ici
