// TransportProcessGroup's construction (options, C10D_ALGO, the ring order, the worker),
// destruction, subgroups (new_group: the same transport through a rank-mapping view, a child
// group id that every rank derives alike) and abort; and make_transport_process_group and
// transport_of. The class and the map of its other parts are in transport_process_group_impl.h.
#include "backends/common/transport_process_group.h"

#include <cstdlib>
#include <numeric>

#include "algorithms/host_shares.h"
#include "backends/common/flight_recorder.h"
#include "backends/common/inline_schedule.h"
#include "backends/common/transport_process_group_impl.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "core/host.h"
#include "core/parse.h"
#include "core/spin_wait.h"
#include "transport/sub_transport.h"

namespace c10d::inline v1::backends::tpg_detail {

namespace {

std::string env_or(const char* name, const std::string& fallback) {
  if (!fallback.empty()) return fallback;
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

std::uint32_t child_group_id(std::uint32_t parent, std::uint32_t index) {
  // splitmix64 of (parent, index), folded into 1..kMaxGroups-1: the same on every rank.
  std::uint64_t z = (static_cast<std::uint64_t>(parent) << 32 | index) + 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return 1 + static_cast<std::uint32_t>(z % (transport::kMaxGroups - 1));
}

algorithms::HostLayout layout_of(const transport::Transport& t) {
  const std::vector<int> hosts = t.host_of_rank();
  C10D_CHECK(static_cast<int>(hosts.size()) == t.size(),
             "rank {}: the transport's host map lists {} ranks for a group of {}", t.rank(),
             hosts.size(), t.size());
  return algorithms::HostLayout(hosts);
}

// The flight recorder's ring of the group; null when the recorder is off.
std::shared_ptr<TraceRing> trace_ring(const TransportProcessGroupOptions& o, int rank, int size) {
  std::vector<int> ranks = o.global_ranks;
  if (ranks.empty()) {
    ranks.resize(static_cast<std::size_t>(size));
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  return trace::make_ring({.name = std::to_string(o.group_id),
                           .desc = o.desc,
                           .id = o.group_id,
                           .ranks = std::move(ranks),
                           .rank = rank,
                           .backend = o.backend_name});
}

}  // namespace

TransportProcessGroup::TransportProcessGroup(std::shared_ptr<transport::Transport> transport,
                                             TransportProcessGroupOptions options)
    : ProcessGroup(transport->rank(), transport->size()),
      transport_(std::move(transport)),
      options_(std::move(options)),
      checks_(rank(), size()),
      detail_(options_.detail < 0 ? detail_from_env() : options_.detail > 0),
      layout_(layout_of(*transport_)),
      runner_(*this, {.name = fmt::format("group {}", options_.group_id),
                      .rank = rank(),
                      .inline_ops = !options_.hooks && inline_from_env(),
                      .serial = true,
                      .waiter_waits_long = true,
                      .poll_queue = true,
                      .trace = trace_ring(options_, rank(), size())}) {
  const std::string algo = env_or("C10D_ALGO", options_.algo);
  forced_ = algorithms::parse_algo_override(
      algo, options_.algo.empty() ? "C10D_ALGO" : "the algo option");
  C10D_CHECK(options_.group_id < transport::kMaxGroups, "group id {} is not below {}",
             options_.group_id, transport::kMaxGroups);
  core::check_timeout(options_.timeout, "the group");
  core::spin_window();   // a malformed C10D_SPIN_US fails the group's creation, not a wait
  core::has_own_core();  // and a malformed LOCAL_WORLD_SIZE too
  if (!options_.ring_order.empty()) {
    C10D_CHECK(static_cast<int>(options_.ring_order.size()) == size(),
               "ring order lists {} ranks for a group of {}", options_.ring_order.size(), size());
  }
  ring_.order = options_.ring_order;
  // Host by host, so that the flat ring crosses between hosts as seldom as it can.
  if (ring_.order.empty() && layout_.hosts() > 1 && layout_.hosts() < size()) {
    ring_.order = layout_.ring_order();
  }
  // The cross rings' shares (algorithms/host_shares.h): equal unless C10D_HOST_RATES gives the
  // links' rates, or says `probe` (the group measures them: on a loaded machine the probe's
  // noise can pick unequal shares for equal links, so it is not the default).
  host_shares_fixed_ = true;
  if (const auto rates = core::env_text("C10D_HOST_RATES"); rates && layout_.hierarchical()) {
    if (*rates == "probe") {
      host_shares_fixed_ = false;
    } else {
      host_shares_ = algorithms::balanced_shares(algorithms::ring_edge_rates(
          algorithms::parse_host_rates("C10D_HOST_RATES", *rates, layout_.hosts())));
    }
  }
  hier_pieces_ = static_cast<int>(core::env_int("C10D_HIER_PIECES", 0, 64).value_or(0));
  hooks_ = options_.hooks;
  if (auto* slots = transport_->shared_slots(); slots != nullptr && !hooks_ && slots->claim()) {
    slots_ = slots;
  }
  apart_ring_ = ring_;
  apart_ring_.segment_bytes = algorithms::kApartSegmentBytes;
  runner_.start_worker();
}

TransportProcessGroup::~TransportProcessGroup() {
  const auto reason = std::make_exception_ptr(Error(fmt::format(
      "rank {}: group {} was destroyed with this op pending", rank(), options_.group_id)));
  runner_.stop(reason);  // fails what is queued, joins the worker
  p2p_cv_.notify_all();
  if (completer_.joinable()) completer_.join();
  for (auto& p : posted_) p.op->fail(reason);
}

std::shared_ptr<ProcessGroup> TransportProcessGroup::new_group(const std::vector<int>& ranks) {
  const bool member = checks_.new_group(ranks);
  std::uint32_t index;
  {
    std::lock_guard lock(mu_);
    index = next_child_++;
  }
  if (!member) return nullptr;
  TransportProcessGroupOptions child = options_;
  child.group_id = child_group_id(options_.group_id, index);
  child.ring_order.clear();
  child.detail = detail_ ? 1 : 0;
  child.algo = options_.algo;
  child.hooks = hooks_ ? hooks_->for_subgroup(ranks) : nullptr;
  child.desc = fmt::format("{}.{}", options_.desc, index);
  child.global_ranks.clear();
  for (int r : ranks) {
    child.global_ranks.push_back(options_.global_ranks.empty() ? r : options_.global_ranks[r]);
  }
  return std::make_shared<TransportProcessGroup>(
      std::make_shared<transport::SubTransport>(transport_, ranks), std::move(child));
}

void TransportProcessGroup::abort() {
  fail(std::make_exception_ptr(
      Error(fmt::format("rank {}: group {} was aborted", rank(), options_.group_id))));
}

}  // namespace c10d::inline v1::backends::tpg_detail

namespace c10d::inline v1::backends {

using tpg_detail::TransportProcessGroup;

std::shared_ptr<ProcessGroup> make_transport_process_group(
    std::shared_ptr<transport::Transport> transport, TransportProcessGroupOptions options) {
  C10D_CHECK(transport != nullptr, "make_transport_process_group: no transport");
  return std::make_shared<TransportProcessGroup>(std::move(transport), std::move(options));
}

std::shared_ptr<transport::Transport> transport_of(const ProcessGroup& group) {
  const auto* pg = dynamic_cast<const TransportProcessGroup*>(&group);
  return pg == nullptr ? nullptr : pg->transport();
}

}  // namespace c10d::inline v1::backends
