#include "backends/tpu_ici/topology.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <deque>

#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::inline v1::tpu_ici {
namespace {

struct Preset {
  std::string_view name;
  int max_dims;
  double bandwidth;
  int wrap_multiple;  // wrap axes whose size is a multiple of this; 0: every axis
  int max_axis;       // 0: no limit
};

constexpr Preset kPresets[] = {
    {"", 8, 4.5e10, 0, 0},
    {"v4", 3, 4.5e10, 4, 0},
    {"v5e", 2, 4.5e10, 16, 16},
    {"v5p", 3, 9e10, 4, 0},
};
constexpr double kHopLatency = 1e-6;

const Preset& find_preset(std::string_view name) {
  for (const auto& p : kPresets) {
    if (p.name == name) return p;
  }
  C10D_THROW(InvalidArgument, "ICI: unknown preset '{}' (expected v4, v5e or v5p)", name);
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const auto at = s.find(sep);
    out.push_back(s.substr(0, at));
    if (at == std::string_view::npos) return out;
    s.remove_prefix(at + 1);
  }
}

bool parse_int(std::string_view s, int& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && end == s.data() + s.size();
}

}  // namespace

Torus::Torus(std::vector<int> dims, std::vector<bool> wrap, double link_bandwidth,
             double hop_latency)
    : dims_(std::move(dims)),
      wrap_(std::move(wrap)),
      bandwidth_(link_bandwidth),
      latency_(hop_latency) {
  C10D_CHECK(!dims_.empty() && dims_.size() == wrap_.size() && dims_.size() <= 8,
             "ICI torus: {} axes with {} wrap flags (1 to 8 axes)", dims_.size(), wrap_.size());
  C10D_CHECK(
      bandwidth_ > 0 && std::isfinite(bandwidth_) && hop_latency >= 0 && std::isfinite(hop_latency),
      "ICI torus: link bandwidth {} B/s and hop latency {} s must be finite, the bandwidth "
      "positive",
      bandwidth_, hop_latency);
  for (std::size_t a = 0; a < dims_.size(); ++a) {
    C10D_CHECK(dims_[a] >= 1, "ICI torus: axis {} has size {}", a, dims_[a]);
    C10D_CHECK(size_ <= (1 << 24) / dims_[a], "ICI torus: more than 2^24 chips");
    strides_.push_back(size_);
    size_ *= dims_[a];
    if (dims_[a] <= 2) wrap_[a] = false;
  }
  down_.assign(static_cast<std::size_t>(link_count()), false);
}

std::string Torus::describe() const {
  std::vector<std::string> d, w;
  for (int a = 0; a < ndims(); ++a) {
    d.push_back(std::to_string(dim(a)));
    w.push_back(wraps(a) ? "1" : "0");
  }
  return fmt::format("{} (wrap {}), {:g} B/s per link one way, {:g} us per hop", fmt::join(d, "x"),
                     fmt::join(w, ","), bandwidth_, latency_ * 1e6);
}

std::vector<int> Torus::coords(int rank) const {
  std::vector<int> c(dims_.size());
  for (std::size_t a = 0; a < dims_.size(); ++a) {
    c[a] = rank % dims_[a];
    rank /= dims_[a];
  }
  return c;
}

int Torus::coord(int rank, int axis) const { return (rank / stride(axis)) % dim(axis); }

int Torus::rank_of(const std::vector<int>& c) const {
  int r = 0;
  for (std::size_t a = 0; a < dims_.size(); ++a) r += c[a] * strides_[a];
  return r;
}

int Torus::neighbour(int rank, int axis, int dir) const {
  const int x = dim(axis);
  const int c = coord(rank, axis);
  int next = c + dir;
  if (next < 0 || next >= x) {
    if (!wraps(axis)) return -1;
    next = (next + x) % x;
  }
  return rank + (next - c) * stride(axis);
}

std::string Torus::chip_name(int rank) const {
  return fmt::format("({})", fmt::join(coords(rank), ","));
}

std::string Torus::link_name(int link) const {
  const int from = link_source(link);
  const Hop hop = link_hop(link);
  const int to = neighbour(from, hop);
  return fmt::format("link {}->{} (rank {} -> rank {}, axis {} {})", chip_name(from),
                     to < 0 ? std::string("nowhere") : chip_name(to), from, to, hop_axis(hop),
                     hop_dir(hop) > 0 ? '+' : '-');
}

void Torus::set_link_down(int a, int b) {
  C10D_CHECK(a >= 0 && a < size_ && b >= 0 && b < size_,
             "ICI: down link {}-{}: a rank is outside a torus of {} chips", a, b, size_);
  bool found = false;
  for (int axis = 0; axis < ndims(); ++axis) {
    for (int dir : {1, -1}) {
      if (neighbour(a, axis, dir) == b) {
        down_[static_cast<std::size_t>(link_id(a, make_hop(axis, dir)))] = true;
        found = true;
      }
      if (neighbour(b, axis, dir) == a) {
        down_[static_cast<std::size_t>(link_id(b, make_hop(axis, dir)))] = true;
      }
    }
  }
  C10D_CHECK(found, "ICI: down link {}-{}: ranks {} {} and {} {} are not neighbours", a, b, a,
             chip_name(a), b, chip_name(b));
  any_down_ = true;
}

std::vector<Hop> Torus::dimension_order_route(int src, int dst) const {
  std::vector<Hop> hops;
  for (int a = 0; a < ndims(); ++a) {
    const int x = dim(a);
    int delta = coord(dst, a) - coord(src, a);
    if (wraps(a)) {
      delta = ((delta % x) + x) % x;      // 0..x-1 going +
      if (delta > x - delta) delta -= x;  // the shorter way; + on a tie
    }
    const int dir = delta >= 0 ? 1 : -1;
    for (int i = 0; i < std::abs(delta); ++i) hops.push_back(make_hop(a, dir));
  }
  return hops;
}

std::vector<Hop> Torus::route(int src, int dst) const {
  std::vector<Hop> hops = dimension_order_route(src, dst);
  if (!any_down_) return hops;
  int at = src;
  int cut = -1;
  for (Hop h : hops) {
    const int link = link_id(at, h);
    if (!link_up(link)) {
      cut = link;
      break;
    }
    at = neighbour(at, h);
  }
  if (cut < 0) return hops;
  // Breadth-first over live links: the shortest detour, the same on every chip.
  std::vector<int> from_link(static_cast<std::size_t>(size_), -1);
  std::vector<bool> seen(static_cast<std::size_t>(size_), false);
  std::deque<int> queue{src};
  seen[static_cast<std::size_t>(src)] = true;
  while (!queue.empty() && !seen[static_cast<std::size_t>(dst)]) {
    const int r = queue.front();
    queue.pop_front();
    for (Hop h = 0; h < 2 * ndims(); ++h) {
      const int next = neighbour(r, h);
      if (next < 0 || seen[static_cast<std::size_t>(next)] || !link_up(link_id(r, h))) continue;
      seen[static_cast<std::size_t>(next)] = true;
      from_link[static_cast<std::size_t>(next)] = link_id(r, h);
      queue.push_back(next);
    }
  }
  if (!seen[static_cast<std::size_t>(dst)]) {
    C10D_THROW(NetworkError,
               "ICI: no route from rank {} {} to rank {} {}: {} is down and no detour over live "
               "links reaches it",
               src, chip_name(src), dst, chip_name(dst), link_name(cut));
  }
  std::vector<Hop> detour;
  for (int r = dst; r != src;) {
    const int link = from_link[static_cast<std::size_t>(r)];
    detour.push_back(link_hop(link));
    r = link_source(link);
  }
  return {detour.rbegin(), detour.rend()};
}

std::vector<int> Torus::line(int rank, int axis) const {
  std::vector<int> out(static_cast<std::size_t>(dim(axis)));
  const int base = rank - coord(rank, axis) * stride(axis);
  for (int c = 0; c < dim(axis); ++c) out[static_cast<std::size_t>(c)] = base + c * stride(axis);
  return out;
}

std::vector<int> Torus::ring_order() const {
  std::vector<int> order(static_cast<std::size_t>(size_));
  for (int i = 0; i < size_; ++i) {
    std::vector<int> c(dims_.size());
    long long below = 1;
    for (std::size_t a = 0; a < dims_.size(); ++a) {
      const int digit = static_cast<int>((i / below) % dims_[a]);
      const bool reflected = ((i / (below * dims_[a])) % 2) == 1;
      c[a] = reflected ? dims_[a] - 1 - digit : digit;
      below *= dims_[a];
    }
    order[static_cast<std::size_t>(i)] = rank_of(c);
  }
  return order;
}

std::string parse_dims(std::string_view text, std::vector<int>& dims) {
  dims.clear();
  if (text.empty()) return "the topology is empty";
  for (auto part : split(text, 'x')) {
    int v = 0;
    if (!parse_int(part, v) || v < 1) {
      return fmt::format("'{}' is not an axis size (expected e.g. 4, 2x4, 4x4x4)", part);
    }
    dims.push_back(v);
  }
  return "";
}

Torus make_torus(const TopologySpec& spec, int world_size) {
  const Preset& preset = find_preset(spec.preset);
  std::vector<int> dims;
  if (spec.topology.empty()) {
    dims = {world_size};
  } else if (auto error = parse_dims(spec.topology, dims); !error.empty()) {
    C10D_THROW(InvalidArgument, "ICI topology '{}': {}", spec.topology, error);
  }
  long long chips = 1;
  for (int d : dims) chips *= d;
  C10D_CHECK(chips == world_size, "ICI topology '{}' has {} chips but the world has {} ranks",
             spec.topology, chips, world_size);
  C10D_CHECK(static_cast<int>(dims.size()) <= preset.max_dims,
             "ICI topology '{}': preset {} has at most {} axes", spec.topology, preset.name,
             preset.max_dims);
  for (int d : dims) {
    C10D_CHECK(preset.max_axis == 0 || d <= preset.max_axis,
               "ICI topology '{}': preset {} slices are at most {} chips per axis", spec.topology,
               preset.name, preset.max_axis);
  }
  std::vector<bool> wrap(dims.size());
  if (spec.wrap.empty()) {
    for (std::size_t a = 0; a < dims.size(); ++a) {
      wrap[a] = preset.wrap_multiple == 0 || dims[a] % preset.wrap_multiple == 0;
    }
  } else if (spec.wrap == "all" || spec.wrap == "none") {
    wrap.assign(dims.size(), spec.wrap == "all");
  } else {
    const auto parts = split(spec.wrap, ',');
    C10D_CHECK(parts.size() == dims.size(),
               "ICI wrap '{}': {} flags for {} axes (expected all, none, or e.g. 1,0)", spec.wrap,
               parts.size(), dims.size());
    for (std::size_t a = 0; a < dims.size(); ++a) {
      C10D_CHECK(parts[a] == "0" || parts[a] == "1", "ICI wrap '{}': '{}' is not 0 or 1", spec.wrap,
                 parts[a]);
      wrap[a] = parts[a] == "1";
    }
  }
  Torus torus(std::move(dims), std::move(wrap),
              spec.link_bandwidth > 0 ? spec.link_bandwidth : preset.bandwidth,
              spec.hop_latency > 0 ? spec.hop_latency : kHopLatency);
  if (!spec.down_links.empty()) {
    for (auto item : split(spec.down_links, ',')) {
      const auto dash = item.find('-');
      int a = -1, b = -1;
      C10D_CHECK(dash != std::string_view::npos && parse_int(item.substr(0, dash), a) &&
                     parse_int(item.substr(dash + 1), b),
                 "ICI down links '{}': '{}' is not a pair of ranks like 1-2", spec.down_links,
                 item);
      torus.set_link_down(a, b);
    }
  }
  return torus;
}

}  // namespace c10d::inline v1::tpu_ici
