// Torus reduce_scatter (torus_plans.h): the mirror of torus_all_gather, one axis at a time from
// the last, each phase keeping this chip's slice of the super-block.
#include "backends/tpu_ici/line_ring.h"
#include "backends/tpu_ici/torus_plans.h"

namespace c10d::inline v1::tpu_ici {

Plan torus_reduce_scatter(const Torus& torus, int rank, std::int64_t count,
                          std::size_t element_bytes) {
  std::vector<Step> steps;
  for (int a = torus.ndims() - 1; a >= 0; --a) {
    if (torus.dim(a) == 1) continue;
    const LineRing line{torus.line(rank, a), torus.coord(rank, a), torus.wraps(a)};
    append_reduce_scatter(line, super_block(torus, rank, a, count), element_bytes, steps);
  }
  return single_lane(std::move(steps));
}

}  // namespace c10d::inline v1::tpu_ici
