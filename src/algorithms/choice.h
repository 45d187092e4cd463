// Which algorithm runs a collective: one pure function of (op, bytes, world, fabric, override,
// topology), asked by every backend, so the thresholds live here and nowhere else.
//
//   op        the collective
//   bytes     the larger of one rank's input and output buffers (nccl-tests' "size")
//   world     the group's size
//   fabric    what carries the bytes: a Transport (TCP, shared memory, in-process), the
//             simulated torus (whose own plans know its links), or MPI's nonblocking
//             collectives (where we pick libnbc's all_reduce algorithm)
//   override  what C10D_ALGO (or a group's algo option) forces, parsed by parse_algo_override
//   topology  how many hosts the group spans and how many ranks each holds (hier_pattern.h:
//             HostLayout), as the transport reports them
//
// C10D_ALGO forces all_reduce, broadcast, all_gather and reduce_scatter; a forced one wins on
// every fabric, and on the torus it then runs over the torus's transport instead of the torus's
// own plans, except that a forced kHierarchical on a topology that has no hierarchy (one host,
// one rank per host, or hosts of different sizes) leaves the op to the automatic choice. The
// choice never depends on data, the rank or time, so every rank of a group makes the same one.
// One input is measured: the 2-rank ring's segment (kApartRound below) follows a shared-slot
// round's time, which the ranks agree on (slot_probe.h) before they use it.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

namespace c10d::inline v1::algorithms {

enum class CollectiveOp { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kAllToAll };

enum class Algorithm {
  kRing,             // bandwidth-optimal: 2(n-1) steps (all_reduce), n-1 (all_gather, ...)
  kHalvingDoubling,  // all_reduce in 2 log2(n) steps (libnbc: recursive doubling)
  kTree,             // broadcast over a binomial tree: log2(n) hops
  kChain,            // broadcast along a chain, pipelined in segments
  kPairwise,         // all_to_all: every pair exchanges directly
  kTorus,            // the simulated torus's own plans (src/backends/tpu_ici/torus_plans.h),
                     // which pick their schedule from the slice's axes and links as well
                     // (backends/tpu_ici/axis_shares.h)
  kHierarchical,     // within each host, across hosts in L parallel rings, within again
};

enum class Fabric { kTransport, kTorus, kMpiNonblocking };

struct AlgoOverride {
  std::optional<Algorithm> all_reduce;      // kRing, kHalvingDoubling or kHierarchical
  std::optional<Algorithm> broadcast;       // kTree, kChain or kHierarchical
  std::optional<Algorithm> all_gather;      // kRing or kHierarchical
  std::optional<Algorithm> reduce_scatter;  // kRing or kHierarchical
  // The automatic choice ignores the topology (never kHierarchical unless forced).
  bool flat = false;
  bool operator==(const AlgoOverride&) const = default;
};

// What the choice knows of the group's hosts (HostLayout's hosts() and per_host()).
struct Topology {
  int hosts = 1;
  int per_host = 0;  // ranks on every host; 0: hosts hold different numbers
  // The hierarchical collectives can run: several hosts, several ranks on each, alike.
  bool hierarchical() const { return hosts > 1 && per_host > 1; }
};

// Below this many bytes all_reduce over 3 or more ranks takes halving-doubling, from it the ring.
inline constexpr std::int64_t kHalvingDoublingMaxBytes = 256 << 10;
// Over two ranks both algorithms exchange the same two halves, and the ring's segments only add
// messages (DDP's 0.5 and 1.6 MB buckets: 5-9% off the step) until its pipeline pays: from this
// size it streams each reduced segment straight back (loopback TCP, 16 MiB: 4.5-5.1 against
// 5.6-6.9 ms for halving-doubling; at 8 MiB they are even).
inline constexpr std::int64_t kTwoRankRingMinBytes = 8 << 20;
// That ring's segment where the 2 ranks share memory (slot_probe.h says why): near cores move a
// 1 MiB segment (RingOptions' default) through shared memory fastest, and cores that share no
// cache move single-copy segments (process_vm_readv) fastest; kApartSegmentBytes is the
// shared-memory transport's default size from which a message goes single-copy. A shared-slot
// round is "apart" from kApartRound: rounds measured 40-100 ns near and 250-320 ns apart, and
// a 16 MiB all_reduce took 2.4-3.8 ms near either way, apart 5.8-7.4 ms single-copy against
// 12.9-14.2 ms through shared memory (2026-11-28, 8e841eb, 2-vCPU EPYC).
inline constexpr std::chrono::nanoseconds kApartRound{160};
inline constexpr std::int64_t kApartSegmentBytes = 2 << 20;
constexpr bool cores_apart(std::chrono::nanoseconds round) { return round >= kApartRound; }
// Below this a broadcast is latency-bound and the tree's log2(n) hops win; from it the chain's
// bandwidth wins.
inline constexpr std::int64_t kChainBroadcastMinBytes = 512 << 10;
// Over a hierarchical topology (Topology::hierarchical) all_reduce takes the hierarchical
// algorithm at every size, and broadcast where it would take the chain: each host's traffic over
// the network falls from 2(n-1)/n of the vector through one connection to 2(H-1)/H through L.
// all_gather and reduce_scatter take it at every size too (H-1 network steps instead of up to
// n-1). Up to kHierLeadersMaxBytes the hierarchical all_reduce runs through each host's leader
// (hierarchical.h): one network message per pair of leaders where the flat recursive doubling
// sends one per rank. Emulated hosts of 2 ranks (2 Gbit/s links, 2 cores): at 2 hosts 8 B took
// 27 against the flat algorithm's 41 us and the two ways tie from 32 KiB; at 3 hosts 32 KiB took
// 280 against the rings' 538 us, 64 KiB 549 against 409 (docs/perf-log.md).
inline constexpr std::int64_t kHierLeadersMaxBytes = 32 << 10;
inline constexpr std::int64_t kHierarchicalBroadcastMinBytes = kChainBroadcastMinBytes;
// libnbc's MPI_Iallreduce: recursive doubling below this, the ring from it (libnbc's own choice
// for an in-place all_reduce on fewer than 4 ranks is always a binomial reduce then broadcast).
inline constexpr std::int64_t kMpiNbcRingMinBytes = 64 << 10;

// Parses a comma-separated list of entries, later ones winning: "ring" or "hd" (all_reduce
// alone), "hier" (all_reduce, broadcast, all_gather and reduce_scatter hierarchical), "flat"
// (the automatic choice ignores the hosts), or op=algo: all_reduce=ring|hd|hier|auto,
// broadcast=tree|chain|hier|auto, all_gather=ring|hier|auto, reduce_scatter=ring|hier|auto
// ("halving_doubling", "pipelined" and "hierarchical" are accepted spellings). Empty: nothing
// forced. Anything else is an InvalidArgument naming `source` (the variable or option), the
// whole text and the piece it cannot read.
AlgoOverride parse_algo_override(std::string_view spec, std::string_view source);

// The algorithm for `op` of `bytes` (>= 0) over `world` (>= 1) ranks on `fabric`, whose ranks
// sit on hosts as `topology` says (default: no hierarchy). Pure: the same arguments give the
// same answer on every rank.
Algorithm choose_algorithm(CollectiveOp op, std::int64_t bytes, int world, Fabric fabric,
                           const AlgoOverride& forced = {}, const Topology& topology = {});

std::string_view algorithm_name(Algorithm a);

}  // namespace c10d::inline v1::algorithms
