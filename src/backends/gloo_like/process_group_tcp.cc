// make_process_group_tcp (include/c10d/init.h): the TCP transport, with shared memory between
// the ranks of one host (routed_transport.h), under the shared TransportProcessGroup.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>

#include "backends/common/transport_process_group.h"
#include "backends/gloo_like/host_map.h"
#include "backends/gloo_like/routed_transport.h"
#include "backends/gloo_like/shm_transport.h"
#include "backends/gloo_like/tcp_transport.h"
#include "c10d/init.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1 {
namespace {

std::shared_ptr<ProcessGroup> set_up(std::shared_ptr<Store> store, int rank, int world_size,
                                     const ProcessGroupTCPOptions& options,
                                     const std::shared_ptr<backends::SetupWatch>& watch) {
  core::check_timeout(options.timeout, "make_process_group_tcp");
  gloo_like::TCPTransportOptions transport_options;
  transport_options.host = options.host;
  if (const char* env = std::getenv("C10D_HOST");
      transport_options.host.empty() && env != nullptr && *env != '\0') {
    transport_options.host = env;
  }
  if (transport_options.host.empty() && !options.store_host.empty()) {
    transport_options.host = gloo_like::local_address_towards(options.store_host);
  }
  if (transport_options.host.empty()) transport_options.host = "127.0.0.1";
  transport_options.timeout = options.timeout;
  transport_options.token = options.token;
  transport_options.fail_all_on_peer_loss = true;
  transport_options.setup_watch = watch;
  std::shared_ptr<gloo_like::ShmTransport> shm;
  if (options.shared_memory && gloo_like::shm_enabled_from_env() && world_size > 1) {
    // Under the routed transport both channels stamp arrivals from one clock.
    auto arrivals = std::make_shared<transport::ArrivalClock>();
    shm = std::make_shared<gloo_like::ShmTransport>(
        store, rank, world_size,
        gloo_like::ShmTransportOptions{.group_name = options.group_name,
                                       .timeout = options.timeout,
                                       .setup_watch = watch,
                                       .arrivals = arrivals});
    transport_options.host_of_rank = shm->host_of_rank();
    C10D_LOG_DEBUG("rank {} of group {}: {} same-host peers through shared memory (hosts {})", rank,
                   options.group_name, shm->same_host_peers(),
                   fmt::join(transport_options.host_of_rank, " "));
    if (shm->same_host_peers() == 0) {
      shm.reset();
    } else {
      transport_options.on_abort = [weak = std::weak_ptr(shm)](std::exception_ptr e) {
        if (auto s = weak.lock()) s->abort(std::move(e));
      };
      // Same-host peers may have no TCP connection between them: the TCP transport looks for
      // a failure record while either channel has requests pending.
      transport_options.pending_elsewhere = [weak = std::weak_ptr(shm)] {
        const auto s = weak.lock();
        return s && s->has_pending();
      };
      transport_options.arrivals = std::move(arrivals);
    }
  } else {
    // Without shared memory the group still learns its hosts, for the hierarchical collectives:
    // the TCP set-up exchanges the keys (host_map.h).
    transport_options.host_key = gloo_like::shm_host_key();
  }
  auto tcp = std::make_shared<gloo_like::TCPTransport>(std::move(store), rank, world_size,
                                                       options.group_name, transport_options);
  if (!shm) {
    C10D_LOG_DEBUG("rank {} of group {}: no shared memory (hosts {})", rank, options.group_name,
                   fmt::join(tcp->host_of_rank(), " "));
  }
  std::shared_ptr<transport::Transport> transport = tcp;
  if (shm) transport = std::make_shared<gloo_like::RoutedTransport>(shm, std::move(tcp));
  backends::TransportProcessGroupOptions pg_options;
  pg_options.backend_name = "tcp";
  pg_options.timeout = options.timeout;
  pg_options.algo = options.algo;
  return backends::make_transport_process_group(std::move(transport), std::move(pg_options));
}

}  // namespace

std::shared_ptr<ProcessGroup> make_process_group_tcp(std::shared_ptr<Store> store, int rank,
                                                     int world_size,
                                                     const ProcessGroupTCPOptions& options) {
  C10D_CHECK(store != nullptr, "make_process_group_tcp: needs a store");
  // Every step below waits through it, and a failure of any step is recorded there, so that a
  // rank that fails its set-up fails the others' at once, naming it.
  auto watch = std::make_shared<backends::SetupWatch>(store, options.group_name, rank);
  try {
    return set_up(std::move(store), rank, world_size, options, watch);
  } catch (...) {
    watch->fail(std::current_exception());
  }
}

}  // namespace c10d::inline v1
