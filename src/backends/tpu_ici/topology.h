// Torus: the N-dimensional torus of a simulated TPU slice, its links and its routes. Pure and
// immutable once built (the down links are part of the value); thread-safe to share.
//
// Words used by the ICI backend:
//  - chip: one rank. Rank r has coordinates (c0, c1, ...) with axis 0 the fastest:
//    r = c0 + X0 * (c1 + X1 * (c2 + ...)), X_a the size of axis a.
//  - link: a directed link from a chip to its neighbour one step along an axis, in direction +
//    (c+1) or - (c-1). An axis that wraps (and has more than 2 chips) links its last chip to
//    its first; an axis of 2 chips has one link each way and never wraps.
//  - hop: one link of a route; a route is the list of hops a message takes.
//  - dimension-order route: fix axis 0 first, then axis 1, ...; on a wrapping axis the shorter
//    way round (+ on a tie). A route that would cross a down link is replaced by the shortest
//    route over live links (breadth-first, neighbours tried in axis order, + before -).
//  - line: the chips that differ from one chip only along one axis, by coordinate.
//
// Presets (public figures; every value can be overridden):
//   v4   3-D, 4.5e10 B/s per link one way, wraparound on axes whose size is a multiple of 4
//   v5e  2-D up to 16x16, 4.5e10 B/s, wraparound only on axes of 16
//   v5p  3-D, 9e10 B/s, wraparound on axes whose size is a multiple of 4
//   (none) any number of axes, 4.5e10 B/s, wraparound on every axis
// and a hop latency of 1 us for all.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace c10d::inline v1::tpu_ici {

// One hop: the axis and the direction, as axis * 2 + (0 for +, 1 for -).
using Hop = std::uint8_t;
inline constexpr Hop make_hop(int axis, int dir) {
  return static_cast<Hop>(axis * 2 + (dir > 0 ? 0 : 1));
}
inline constexpr int hop_axis(Hop h) { return h / 2; }
inline constexpr int hop_dir(Hop h) { return (h & 1) ? -1 : 1; }

// What a user says about a slice. Empty strings and zeros take the preset's values.
struct TopologySpec {
  std::string preset;         // "", "v4", "v5e", "v5p"
  std::string topology;       // "8", "2x4", "4x4x4"; empty: a 1-D ring of the world size
  std::string wrap;           // "": the preset's rule; "all", "none", or per axis "1,0,1"
  double link_bandwidth = 0;  // bytes per second, one way
  double hop_latency = 0;     // seconds
  std::string down_links;     // "1-2,5-6": links between neighbouring ranks marked down
};

class Torus {
 public:
  Torus(std::vector<int> dims, std::vector<bool> wrap, double link_bandwidth, double hop_latency);

  int size() const { return size_; }
  int ndims() const { return static_cast<int>(dims_.size()); }
  int dim(int axis) const { return dims_[static_cast<std::size_t>(axis)]; }
  // True when the axis has a wraparound link (never for axes of 1 or 2 chips).
  bool wraps(int axis) const { return wrap_[static_cast<std::size_t>(axis)]; }
  double link_bandwidth() const { return bandwidth_; }
  double hop_latency() const { return latency_; }
  std::string describe() const;  // "4x4 (wrap 1,1), 4.5e+10 B/s per link, 1 us per hop"

  std::vector<int> coords(int rank) const;
  int coord(int rank, int axis) const;
  int rank_of(const std::vector<int>& coords) const;
  int stride(int axis) const { return strides_[static_cast<std::size_t>(axis)]; }

  // The chip one hop from `rank` along `axis` in direction `dir` (+1/-1), or -1 at an edge.
  int neighbour(int rank, int axis, int dir) const;
  int neighbour(int rank, Hop hop) const { return neighbour(rank, hop_axis(hop), hop_dir(hop)); }

  // Links are numbered rank * 2 * ndims + hop: the link leaving `rank` by `hop`.
  int link_count() const { return size_ * 2 * ndims(); }
  int link_id(int rank, Hop hop) const { return rank * 2 * ndims() + hop; }
  int link_source(int link) const { return link / (2 * ndims()); }
  Hop link_hop(int link) const { return static_cast<Hop>(link % (2 * ndims())); }
  bool link_exists(int link) const { return neighbour(link_source(link), link_hop(link)) >= 0; }
  // "link (1,0)->(2,0) (rank 1 -> rank 2, axis 0 +)".
  std::string link_name(int link) const;
  std::string chip_name(int rank) const;  // "(1,0)"

  // Marks the link between neighbouring ranks a and b down, both ways. InvalidArgument when
  // they are not neighbours.
  void set_link_down(int a, int b);
  bool link_up(int link) const { return !down_[static_cast<std::size_t>(link)]; }
  bool any_link_down() const { return any_down_; }

  // The hops from src to dst (empty when src == dst). Throws NetworkError naming the down link
  // that cut the dimension-order route when no live route exists.
  std::vector<Hop> route(int src, int dst) const;

  // The ranks of the line through `rank` along `axis`, by coordinate.
  std::vector<int> line(int rank, int axis) const;
  // A ring through every chip in which consecutive chips are neighbours (the reflected
  // mixed-radix Gray code, axis 0 fastest); the closing edge may take several hops.
  std::vector<int> ring_order() const;

 private:
  std::vector<Hop> dimension_order_route(int src, int dst) const;

  std::vector<int> dims_;
  std::vector<bool> wrap_;
  std::vector<int> strides_;
  int size_ = 1;
  double bandwidth_;
  double latency_;
  std::vector<bool> down_;  // per link id
  bool any_down_ = false;
};

// Parses "4", "2x4", "4x4x4" into axis sizes; an error message instead when it cannot.
std::string parse_dims(std::string_view text, std::vector<int>& dims);

// The torus `spec` describes for `world_size` ranks, with the preset's values for what the
// spec leaves out. Throws InvalidArgument naming the field (unknown preset, a topology whose
// chips do not match the world size, a v5e slice above 16x16, a bad wrap list or link).
Torus make_torus(const TopologySpec& spec, int world_size);

}  // namespace c10d::inline v1::tpu_ici
