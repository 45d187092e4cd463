#include "backends/tpu_ici/timing_sim.h"

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/check.h"

namespace c10d::inline v1::tpu_ici {
namespace {

struct Arrival {
  double tail = 0;
  std::int64_t bytes = 0;
};

struct Fifo {
  std::vector<Arrival> items;
  std::size_t head = 0;
  bool empty() const { return head == items.size(); }
};

struct Chip {
  Plan plan;
  std::size_t step = 0;
  std::size_t cursor = 0;  // next transfer of the step to match, when waiting
  double step_end = 0;
  bool waiting = false;
  bool done = false;
  std::unordered_map<int, Fifo> inbox;  // by source rank
};

class Simulation {
 public:
  Simulation(const Torus& torus, const std::function<Plan(int)>& plan_of)
      : torus_(torus), chips_(static_cast<std::size_t>(torus.size())) {
    result_.links.resize(static_cast<std::size_t>(torus.link_count()));
    result_.chip_seconds.assign(chips_.size(), 0);
    for (int r = 0; r < torus.size(); ++r) chip(r).plan = plan_of(r);
  }

  SimResult run() {
    for (int r = 0; r < torus_.size(); ++r) events_.push({0.0, r});
    std::int64_t handled = 0;
    while (!events_.empty()) {
      const auto [time, rank] = events_.top();
      events_.pop();
      // No message asks a link for time before the earliest pending event: the calendars
      // forget it, so they stay short.
      if (++handled % 65536 == 0) {
        for (auto& link : result_.links) link.forget_before(time);
      }
      start_step(rank, time);
    }
    for (int r = 0; r < torus_.size(); ++r) {
      const Chip& c = chip(r);
      if (c.done) continue;
      const Transfer& t = c.plan.steps[c.step].transfers[c.cursor];
      C10D_THROW(InvalidArgument,
                 "ICI simulation: rank {} waits forever at step {} for a {}-byte message from "
                 "rank {} (the plans do not match)",
                 r, c.step, t.bytes, t.peer);
    }
    result_.seconds = *std::max_element(result_.chip_seconds.begin(), result_.chip_seconds.end());
    return std::move(result_);
  }

 private:
  Chip& chip(int r) { return chips_[static_cast<std::size_t>(r)]; }

  void start_step(int rank, double time) {
    Chip& c = chip(rank);
    if (c.step == c.plan.steps.size()) {
      c.done = true;
      result_.chip_seconds[static_cast<std::size_t>(rank)] = time;
      return;
    }
    c.step_end = time;
    for (const Transfer& t : c.plan.steps[c.step].transfers) {
      if (t.kind != TransferKind::kSend) continue;
      MessageTimes m{time, time};
      int at = rank;
      bool first = true;
      for (Hop hop : torus_.route(rank, t.peer)) {
        LinkClock& link = result_.links[static_cast<std::size_t>(torus_.link_id(at, hop))];
        m = link.cross(torus_.link_bandwidth(), torus_.hop_latency(),
                       static_cast<std::uint64_t>(t.bytes), m);
        if (first) c.step_end = std::max(c.step_end, link.last_finish());
        first = false;
        at = torus_.neighbour(at, hop);
      }
      ++result_.messages;
      deliver(t.peer, rank, {m.tail, t.bytes});
    }
    c.cursor = 0;
    try_finish(rank);
  }

  void deliver(int dst, int src, Arrival a) {
    Chip& c = chip(dst);
    c.inbox[src].items.push_back(a);
    if (c.waiting) try_finish(dst);
  }

  void try_finish(int rank) {
    Chip& c = chip(rank);
    const auto& transfers = c.plan.steps[c.step].transfers;
    for (; c.cursor < transfers.size(); ++c.cursor) {
      const Transfer& t = transfers[c.cursor];
      if (t.kind == TransferKind::kSend) continue;
      auto it = c.inbox.find(t.peer);
      if (it == c.inbox.end() || it->second.empty()) {
        c.waiting = true;
        return;
      }
      Fifo& fifo = it->second;
      const Arrival a = fifo.items[fifo.head++];
      if (fifo.empty()) {
        fifo.items.clear();
        fifo.head = 0;
      }
      C10D_CHECK(a.bytes == t.bytes,
                 "ICI simulation: rank {} step {} expects {} bytes from rank {} but {} were sent "
                 "(the plans do not match)",
                 rank, c.step, t.bytes, t.peer, a.bytes);
      c.step_end = std::max(c.step_end, a.tail);
    }
    c.waiting = false;
    ++c.step;
    events_.push({c.step_end, rank});
  }

  struct Event {
    double time;
    int rank;
    bool operator>(const Event& o) const { return time != o.time ? time > o.time : rank > o.rank; }
  };

  const Torus& torus_;
  std::vector<Chip> chips_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  SimResult result_;
};

}  // namespace

SimResult simulate(const Torus& torus, const std::function<Plan(int rank)>& plan_of) {
  return Simulation(torus, plan_of).run();
}

std::vector<AxisUsage> axis_usage(const Torus& torus, const SimResult& result) {
  std::vector<AxisUsage> out(static_cast<std::size_t>(torus.ndims()));
  std::vector<double> busy(out.size(), 0);
  for (int a = 0; a < torus.ndims(); ++a) out[static_cast<std::size_t>(a)].axis = a;
  for (int l = 0; l < torus.link_count(); ++l) {
    if (!torus.link_exists(l)) continue;
    const auto a = static_cast<std::size_t>(hop_axis(torus.link_hop(l)));
    const LinkClock& link = result.links[static_cast<std::size_t>(l)];
    busy[a] += link.busy_seconds();
    out[a].bytes += link.bytes();
    out[a].links += 1;
  }
  for (std::size_t a = 0; a < out.size(); ++a) {
    if (out[a].links > 0 && result.seconds > 0) {
      out[a].utilization = busy[a] / (out[a].links * result.seconds);
    }
  }
  return out;
}

}  // namespace c10d::inline v1::tpu_ici
