#include "algorithms/host_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "algorithms/all_gather.h"
#include "core/check.h"
#include "transport/sub_transport.h"

namespace c10d::inline v1::algorithms {

std::vector<double> probe_edge_rates(const Context& ctx, const HostLayout& layout,
                                     std::int64_t bytes_per_host) {
  C10D_CHECK(layout.world() == ctx.size() && layout.hierarchical(),
             "probe_edge_rates on rank {}: a host map of {} ranks on {} hosts ({} per host) for a "
             "group of {}",
             ctx.rank(), layout.world(), layout.hosts(), layout.per_host(), ctx.size());
  C10D_CHECK(bytes_per_host > 0, "probe_edge_rates on rank {}: {} bytes per host", ctx.rank(),
             bytes_per_host);
  const int hosts = layout.hosts();
  const int per_host = layout.per_host();
  const int host = layout.host_of(ctx.rank());
  const auto bytes = static_cast<std::size_t>(std::max<std::int64_t>(1, bytes_per_host / per_host));
  // The views borrow ctx's transport, which outlives them.
  transport::SubTransport cross({std::shared_ptr<void>(), &ctx.transport},
                                layout.cross_ranks(layout.local_of(ctx.rank())));
  std::vector<std::byte> out(bytes), in(bytes);
  // Each receiver tells its left neighbour to go once its receive is posted and its clock
  // runs, so no byte arrives before the clock starts (a late receiver would find bytes waiting
  // and overstate the rate); the clock then also holds the token's one-way trip.
  const int left = (host + hosts - 1) % hosts;
  const int right = (host + 1) % hosts;
  std::byte go{1}, go_in{0};
  auto recv = cross.irecv(left, ctx.tag, in, ctx.call);
  auto go_recv = cross.irecv(right, ctx.tag, std::span(&go_in, 1), ctx.call);
  const auto start = std::chrono::steady_clock::now();
  cross.isend(left, ctx.tag, std::span(&go, 1), ctx.call)->wait(ctx.deadline);
  go_recv->wait(ctx.deadline);
  auto send = cross.isend(right, ctx.tag, out, ctx.call);
  recv->wait(ctx.deadline);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  send->wait(ctx.deadline);
  // Durations, not rates: the L streams of an edge need not overlap exactly (the barrier lets
  // ranks go a little apart), and a sum of each stream's own rate would count their link up to
  // L times; L streams' bytes over the longest of their times never overstates it.
  std::vector<double> all(static_cast<std::size_t>(ctx.size()));
  all_gather(ctx, std::as_bytes(std::span(&seconds, 1)), std::as_writable_bytes(std::span(all)));
  std::vector<double> longest(static_cast<std::size_t>(hosts), 0.0);
  for (int r = 0; r < ctx.size(); ++r) {
    auto& edge = longest[static_cast<std::size_t>((layout.host_of(r) + hosts - 1) % hosts)];
    edge = std::max(edge, all[static_cast<std::size_t>(r)]);
  }
  std::vector<double> edges;
  for (double t : longest) {
    edges.push_back(static_cast<double>(bytes) * per_host / std::max(t, 1e-9));
  }
  return edges;
}

}  // namespace c10d::inline v1::algorithms
