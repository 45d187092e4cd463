// Torus all_gather (torus_plans.h): one axis at a time, axis 0 first, over contiguous
// super-blocks of the rank-order layout.
#include "backends/tpu_ici/line_ring.h"
#include "backends/tpu_ici/torus_plans.h"

namespace c10d::inline v1::tpu_ici {
Plan torus_all_gather(const Torus& torus, int rank, std::int64_t block_bytes) {
  std::vector<Step> steps;
  for (int a = 0; a < torus.ndims(); ++a) {
    if (torus.dim(a) == 1) continue;
    const LineRing line{torus.line(rank, a), torus.coord(rank, a), torus.wraps(a)};
    append_all_gather(line, super_block(torus, rank, a, block_bytes), 1, steps);
  }
  return single_lane(std::move(steps));
}

}  // namespace c10d::inline v1::tpu_ici
