// Torus broadcast (torus_plans.h): flood axis by axis, along each line two pipelined chains.
//
// Words used here:
//  - phase a: the chips whose coordinates above axis a equal the root's hold the data; each
//    sends it along its line on axis a, so afterwards every chip matching the root above a - 1
//    holds it.
//  - chain: from the line's source (the chip at the root's coordinate) one way along the line:
//    on a wrapping line ceil((n-1)/2) chips going + and floor((n-1)/2) going -, otherwise every
//    chip to each end. Distance d counts from the source (d = 0).
//  - segment: the data in pieces of at most `segment_bytes`; at step t the chip at distance d
//    sends segment t - d on and receives segment t - d + 1, so a phase takes segments + chain
//    length - 1 steps.
#include <algorithm>

#include "backends/tpu_ici/torus_plans.h"

namespace c10d::inline v1::tpu_ici {
namespace {

struct Chain {
  int length = 0;  // receivers
  int dir = 1;
};

}  // namespace

Plan torus_broadcast(const Torus& torus, int rank, int root, std::int64_t bytes,
                     std::int64_t segment_bytes) {
  std::vector<Step> steps;
  if (bytes == 0 || torus.size() == 1) return {};
  const std::int64_t segments = (bytes + segment_bytes - 1) / segment_bytes;
  const auto segment = [&](std::int64_t j) {
    const std::int64_t off = j * segment_bytes;
    return std::pair{off, std::min(segment_bytes, bytes - off)};
  };
  for (int a = 0; a < torus.ndims(); ++a) {
    const int n = torus.dim(a);
    if (n == 1) continue;
    bool holder_line = true;  // this chip's line on axis a takes part in phase a
    for (int b = a + 1; b < torus.ndims(); ++b) {
      holder_line = holder_line && torus.coord(rank, b) == torus.coord(root, b);
    }
    if (!holder_line) continue;
    const int r = torus.coord(root, a);
    const int c = torus.coord(rank, a);
    Chain plus, minus;
    minus.dir = -1;
    if (torus.wraps(a)) {
      plus.length = n / 2;
      minus.length = (n - 1) / 2;
    } else {
      plus.length = n - 1 - r;
      minus.length = r;
    }
    const int longest = std::max(plus.length, minus.length);
    const std::int64_t phase_steps = segments + longest - 1;
    // This chip's distance along each chain, or -1 when it is not on it.
    const auto distance = [&](const Chain& ch) {
      const int d = torus.wraps(a) ? (((c - r) * ch.dir) % n + n) % n : (c - r) * ch.dir;
      return d >= 0 && d <= ch.length ? d : -1;
    };
    for (std::int64_t t = 0; t < phase_steps; ++t) {
      Step step;
      for (const Chain* ch : {&plus, &minus}) {
        const int d = distance(*ch);
        if (d < 0 || ch->length == 0) continue;
        const std::int64_t out = t - d;
        if (d < ch->length && out >= 0 && out < segments) {
          const auto [off, len] = segment(out);
          step.transfers.push_back(
              {TransferKind::kSend, 0, torus.neighbour(rank, a, ch->dir), off, len});
        }
      }
      for (const Chain* ch : {&plus, &minus}) {
        const int d = distance(*ch);
        if (d <= 0) continue;  // the source receives nothing
        const std::int64_t in = t - d + 1;
        if (in >= 0 && in < segments) {
          const auto [off, len] = segment(in);
          step.transfers.push_back(
              {TransferKind::kRecv, 0, torus.neighbour(rank, a, -ch->dir), off, len});
        }
      }
      if (!step.transfers.empty()) steps.push_back(std::move(step));
    }
  }
  return single_lane(std::move(steps));
}

}  // namespace c10d::inline v1::tpu_ici
