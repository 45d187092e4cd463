// Routed all_to_all (torus_plans.h): every block goes straight to its destination in one step;
// the fabric carries it hop by hop along the dimension-order route, so the links near the
// middle of each line carry the most and set the time.
#include "backends/tpu_ici/torus_plans.h"

namespace c10d::inline v1::tpu_ici {

Plan routed_all_to_all(int rank, int n, std::span<const std::int64_t> send_counts,
                       std::span<const std::int64_t> send_offsets,
                       std::span<const std::int64_t> recv_counts,
                       std::span<const std::int64_t> recv_offsets) {
  if (n == 1) return {};
  Step step;
  for (int k = 1; k < n; ++k) {
    const auto from = static_cast<std::size_t>((rank - k + n) % n);
    step.transfers.push_back(
        {TransferKind::kRecv, 0, static_cast<int>(from), recv_offsets[from], recv_counts[from]});
  }
  for (int k = 1; k < n; ++k) {
    const auto to = static_cast<std::size_t>((rank + k) % n);
    step.transfers.push_back(
        {TransferKind::kSend, 1, static_cast<int>(to), send_offsets[to], send_counts[to]});
  }
  return single_lane({std::move(step)});
}

}  // namespace c10d::inline v1::tpu_ici
