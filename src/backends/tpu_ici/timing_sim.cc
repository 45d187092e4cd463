#include "backends/tpu_ici/timing_sim.h"

#include <fmt/format.h>

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/check.h"
#include "transport/transport.h"

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

// One lane of a chip's current stage.
struct LaneState {
  const Lane* lane = nullptr;
  std::size_t step = 0;
  std::size_t cursor = 0;  // next transfer of the step to match, when waiting
  double step_end = 0;
  bool waiting = false;
  bool done() const { return step == lane->steps.size(); }
};

struct Chip {
  Plan plan;
  std::size_t stage = 0;
  std::vector<LaneState> lanes;  // of `stage`
  std::size_t lanes_left = 0;    // not done yet
  double stage_end = 0;
  std::unordered_map<std::uint64_t, Fifo> inbox;  // by inbox_key
};

class Simulation {
 public:
  Simulation(const Torus& torus, const std::function<Plan(int)>& plan_of)
      : torus_(torus), chips_(static_cast<std::size_t>(torus.size())) {
    result_.links.resize(static_cast<std::size_t>(torus.link_count()));
    result_.chip_seconds.assign(chips_.size(), 0);
    for (int r = 0; r < torus.size(); ++r) {
      chip(r).plan = plan_of(r);
      C10D_CHECK(chip(r).plan.stages.size() <= transport::kMaxStages,
                 "ICI simulation: rank {}'s plan has {} stages, more than {}", r,
                 chip(r).plan.stages.size(), transport::kMaxStages);
    }
  }

  SimResult run() {
    for (int r = 0; r < torus_.size(); ++r) begin_stage(r, 0.0);
    std::int64_t handled = 0;
    while (!events_.empty()) {
      const auto [time, rank, lane] = events_.top();
      events_.pop();
      // No message asks a link for time before the earliest pending event: the calendars
      // forget it, so they stay short.
      if (++handled % 65536 == 0) {
        for (auto& link : result_.links) link.forget_before(time);
      }
      start_step(rank, lane, time);
    }
    for (int r = 0; r < torus_.size(); ++r) {
      const Chip& c = chip(r);
      if (c.stage == c.plan.stages.size()) continue;
      const bool several = c.plan.stages.size() > 1 || c.lanes.size() > 1;
      for (std::size_t l = 0; l < c.lanes.size(); ++l) {
        const LaneState& s = c.lanes[l];
        if (s.done()) continue;
        const Transfer& t = s.lane->steps[s.step].transfers[s.cursor];
        C10D_THROW(InvalidArgument,
                   "ICI simulation: rank {} waits forever at step {}{} for a {}-byte message "
                   "from rank {} (the plans do not match)",
                   r, s.step, several ? fmt::format(" of stage {} lane {}", c.stage, l) : "",
                   t.bytes, t.peer);
      }
    }
    result_.seconds = *std::max_element(result_.chip_seconds.begin(), result_.chip_seconds.end());
    return std::move(result_);
  }

 private:
  Chip& chip(int r) { return chips_[static_cast<std::size_t>(r)]; }
  static std::uint64_t inbox_key(int src, std::size_t stage, int lane) {
    return (static_cast<std::uint64_t>(src) << 32) | (stage << 8) | static_cast<unsigned>(lane);
  }

  // Starts chip r's stage c.stage at `time` (the end of the one before), or finishes the chip.
  void begin_stage(int rank, double time) {
    Chip& c = chip(rank);
    for (; c.stage < c.plan.stages.size(); ++c.stage) {
      const Stage& stage = c.plan.stages[c.stage];
      C10D_CHECK(stage.lanes.size() <= transport::kMaxLanes,
                 "ICI simulation: rank {}'s stage {} has {} lanes, more than {}", rank, c.stage,
                 stage.lanes.size(), transport::kMaxLanes);
      c.lanes.clear();
      for (const Lane& lane : stage.lanes) c.lanes.push_back({&lane});
      c.lanes_left = c.lanes.size();
      c.stage_end = time;
      if (c.lanes_left > 0) {
        for (std::size_t l = 0; l < c.lanes.size(); ++l) {
          events_.push({time, rank, static_cast<int>(l)});
        }
        return;
      }
    }
    c.lanes.clear();
    result_.chip_seconds[static_cast<std::size_t>(rank)] = time;
  }

  void start_step(int rank, int lane, double time) {
    Chip& c = chip(rank);
    LaneState& s = c.lanes[static_cast<std::size_t>(lane)];
    if (s.done()) {
      c.stage_end = std::max(c.stage_end, time);
      if (--c.lanes_left == 0) {
        ++c.stage;
        begin_stage(rank, c.stage_end);
      }
      return;
    }
    s.step_end = time;
    for (const Transfer& t : s.lane->steps[s.step].transfers) {
      if (t.kind != TransferKind::kSend) continue;
      MessageTimes m{time, time};
      int at = rank;
      bool first = true;
      for (Hop hop : torus_.route(rank, t.peer)) {
        LinkClock& link = result_.links[static_cast<std::size_t>(torus_.link_id(at, hop))];
        m = link.cross(torus_.link_bandwidth(), torus_.hop_latency(),
                       static_cast<std::uint64_t>(t.bytes), m);
        if (first) s.step_end = std::max(s.step_end, link.last_finish());
        first = false;
        at = torus_.neighbour(at, hop);
      }
      ++result_.messages;
      deliver(t.peer, inbox_key(rank, c.stage, lane), {m.tail, t.bytes});
    }
    s.cursor = 0;
    try_finish(rank, lane);
  }

  void deliver(int dst, std::uint64_t key, Arrival a) {
    Chip& c = chip(dst);
    c.inbox[key].items.push_back(a);
    // The receiver waits for it only when it is in the same stage and lane.
    const auto stage = static_cast<std::size_t>((key >> 8) & 0xffffff);
    const auto lane = static_cast<std::size_t>(key & 0xff);
    if (c.stage == stage && lane < c.lanes.size() && c.lanes[lane].waiting) {
      try_finish(dst, static_cast<int>(lane));
    }
  }

  void try_finish(int rank, int lane) {
    Chip& c = chip(rank);
    LaneState& s = c.lanes[static_cast<std::size_t>(lane)];
    const auto& transfers = s.lane->steps[s.step].transfers;
    for (; s.cursor < transfers.size(); ++s.cursor) {
      const Transfer& t = transfers[s.cursor];
      if (t.kind == TransferKind::kSend) continue;
      auto it = c.inbox.find(inbox_key(t.peer, c.stage, lane));
      if (it == c.inbox.end() || it->second.empty()) {
        s.waiting = true;
        return;
      }
      Fifo& fifo = it->second;
      const Arrival a = fifo.items[fifo.head++];
      if (fifo.empty()) c.inbox.erase(it);
      C10D_CHECK(a.bytes == t.bytes,
                 "ICI simulation: rank {} step {} expects {} bytes from rank {} but {} were sent "
                 "(the plans do not match)",
                 rank, s.step, t.bytes, t.peer, a.bytes);
      s.step_end = std::max(s.step_end, a.tail);
    }
    s.waiting = false;
    ++s.step;
    events_.push({s.step_end, rank, lane});
  }

  struct Event {
    double time;
    int rank;
    int lane;
    bool operator>(const Event& o) const {
      if (time != o.time) return time > o.time;
      return rank != o.rank ? rank > o.rank : lane > o.lane;
    }
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
