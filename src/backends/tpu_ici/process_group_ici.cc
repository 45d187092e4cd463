// make_process_group_ici (include/c10d/init.h): the ICI fabric's transport under the shared
// TransportProcessGroup, with the torus algorithms and simulated timing of ici_hooks.h;
// ici_link_report() finds the fabric through backends::transport_of().
#include <cstdlib>

#include "backends/common/transport_process_group.h"
#include "backends/tpu_ici/ici_hooks.h"
#include "backends/tpu_ici/ici_transport.h"
#include "c10d/init.h"
#include "core/check.h"
#include "core/parse.h"

namespace c10d::inline v1 {
namespace {

using tpu_ici::IciTransport;

std::string env_or(const std::string& value, const char* name) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env == nullptr ? std::string() : std::string(env);
}

// The option when set (> 0), else the variable (checked against [lo, hi] in its own unit) times
// `scale`, else 0 (the preset's value).
double number_or(double value, const char* name, double lo, double hi, double scale) {
  if (value > 0) return value;
  return core::env_double(name, lo, hi).value_or(0) * scale;
}

}  // namespace

std::shared_ptr<ProcessGroup> make_process_group_ici(std::shared_ptr<Store> store, int rank,
                                                     int world_size,
                                                     const ProcessGroupICIOptions& options) {
  C10D_CHECK(store != nullptr, "make_process_group_ici: needs a store");
  C10D_CHECK(rank >= 0 && rank < world_size, "make_process_group_ici: rank {} of {}", rank,
             world_size);
  tpu_ici::TopologySpec spec;
  spec.preset = env_or(options.preset, "C10D_ICI_PRESET");
  spec.topology = env_or(options.topology, "C10D_ICI_TOPOLOGY");
  spec.wrap = env_or(options.wrap, "C10D_ICI_WRAP");
  // From 1 MB/s to 1 PB/s per link, and from 1 ns to 1 s per hop: beyond those the simulated
  // times lose their meaning (and 0 would mean "the preset's").
  spec.link_bandwidth = number_or(options.link_bandwidth, "C10D_ICI_LINK_GBPS", 1e-3, 1e6, 1e9);
  spec.hop_latency = number_or(options.hop_latency, "C10D_ICI_HOP_LATENCY_US", 1e-3, 1e6, 1e-6);
  spec.down_links = env_or(options.down_links, "C10D_ICI_DOWN_LINKS");
  tpu_ici::Torus torus = tpu_ici::make_torus(spec, world_size);
  const std::vector<int> ring = torus.ring_order();
  tpu_ici::FabricOptions fabric_options;
  fabric_options.group_name = options.group_name;
  fabric_options.timeout = options.timeout;
  auto fabric =
      std::make_shared<IciTransport>(std::move(store), rank, std::move(torus), fabric_options);
  backends::TransportProcessGroupOptions pg_options;
  pg_options.backend_name = "ici";
  pg_options.timeout = options.timeout;
  pg_options.algo = options.algo;
  pg_options.ring_order = ring;
  pg_options.hooks = std::make_shared<tpu_ici::IciHooks>(fabric, true);
  return backends::make_transport_process_group(std::move(fabric), std::move(pg_options));
}

std::optional<double> ici_simulated_seconds(const Work& work) {
  const auto* w = dynamic_cast<const tpu_ici::IciWork*>(&work);
  if (w == nullptr || !w->is_completed()) return std::nullopt;
  const double s = w->simulated.load(std::memory_order_acquire);
  if (s < 0) return std::nullopt;
  return s;
}

std::string ici_link_report(const ProcessGroup& group) {
  const auto fabric = std::dynamic_pointer_cast<IciTransport>(backends::transport_of(group));
  return fabric == nullptr ? std::string() : fabric->link_report();
}

}  // namespace c10d::inline v1
