#include "algorithms/host_probe.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>

#include "algorithms/all_gather.h"
#include "algorithms/barrier.h"
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
  barrier(ctx);  // so that every rank's clock starts with its left neighbour's sending
  const auto start = std::chrono::steady_clock::now();
  auto recv = cross.irecv((host + hosts - 1) % hosts, ctx.tag, in);
  auto send = cross.isend((host + 1) % hosts, ctx.tag, out);
  recv->wait(ctx.deadline);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  send->wait(ctx.deadline);
  const double mine = static_cast<double>(bytes) / std::max(seconds, 1e-9);
  std::vector<double> all(static_cast<std::size_t>(ctx.size()));
  all_gather(ctx, std::as_bytes(std::span(&mine, 1)), std::as_writable_bytes(std::span(all)));
  std::vector<double> edges(static_cast<std::size_t>(hosts), 0.0);
  for (int r = 0; r < ctx.size(); ++r) {
    const int into = layout.host_of(r);
    edges[static_cast<std::size_t>((into + hosts - 1) % hosts)] += all[static_cast<std::size_t>(r)];
  }
  return edges;
}

}  // namespace c10d::inline v1::algorithms
