// Per-host shares for the cross-host rings of the hierarchical all_reduce (hier_pattern.h), when
// the hosts' links are not equally fast. Pure functions, tested alone (host_shares_test.cc).
//
// The model. Cross group l is a ring over the H hosts in host order: host p sends to host p+1
// (mod H) over "edge p". With host p owning the fraction s_p of each chunk (the shares, summing
// to 1), a ring all_reduce sends every block but the sender's own in its reduce-scatter half
// and every block but the receiver's in its all-gather half, so edge p carries
//     v_p = (1 - s_p) + (1 - s_{p+1}) = 2 - s_p - s_{p+1}
// chunks. The ring is pipelined, so it takes as long as its slowest edge: max_p v_p / e_p, with
// e_p the rate of edge p. A host whose link is shaped both ways at R_p bounds two edges: its own
// egress and its left neighbour's (e_p = min(R_p, R_{p+1})).
//
// The best shares minimise that maximum: a small linear programme, solved by bisection on the
// time T (feasible when some s >= 0 summing to 1 covers every s_p + s_{p+1} >= 2 - T e_p; the
// least sum of such an s is convex in s_0 and, for a given s_0, found greedily round the ring).
// Where the exact equaliser would make a share negative the bound s_p >= 0 holds it at 0:
// those edges then finish early. H = 2 cannot be helped: both edges carry exactly one chunk
// whatever the shares. Equal rates, or a gain under kMinShareGain, keep equal shares (empty),
// exactly today's cut.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

namespace c10d::inline v1::algorithms {

// Shares are integers (split_by_shares); a balanced split sums to about this.
inline constexpr std::int64_t kShareUnit = std::int64_t{1} << 20;
// Unequal shares only when they cut the predicted cross-ring time by at least this fraction;
// and a group switches from its current shares only for that much (hysteresis).
inline constexpr double kMinShareGain = 0.15;

// e_p = min(R_p, R_{p+1 mod H}): edge p leaves host p and enters host p+1, both links shaped.
std::vector<double> ring_edge_rates(const std::vector<double>& host_rates);

// The predicted time of the cross ring (in chunks per unit of rate): max_p v_p / e_p. `shares`
// empty: equal. InvalidArgument for sizes that differ or a rate <= 0.
double ring_time(const std::vector<std::int64_t>& shares, const std::vector<double>& edge_rates);

// The shares that minimise ring_time for `edge_rates` (one per host, each > 0), in units of
// kShareUnit; empty when equal shares are as good within kMinShareGain (equal rates, H <= 2).
std::vector<std::int64_t> balanced_shares(const std::vector<double>& edge_rates);

// The shares a group keeps after measuring `edge_rates` while running with `current`: the
// balanced ones when they beat `current` by kMinShareGain on those rates, else `current`.
// Deterministic: ranks that pass the same arguments get the same answer.
std::vector<std::int64_t> next_shares(const std::vector<std::int64_t>& current,
                                      const std::vector<double>& edge_rates);

// C10D_HOST_RATES: one rate per host, comma-separated, in host order: "2gbit,2gbit,500mbit"
// (bit, kbit, mbit, gbit, tbit: bits per second) or bare positive numbers (relative weights).
// `hosts` entries, else InvalidArgument naming `name`, the text and the fault.
std::vector<double> parse_host_rates(std::string_view name, std::string_view text, int hosts);

}  // namespace c10d::inline v1::algorithms
