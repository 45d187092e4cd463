// Which algorithm runs a collective: one pure function of (op, bytes, world, fabric, override),
// asked by every backend, so the thresholds live here and nowhere else.
//
//   op        the collective
//   bytes     the larger of one rank's input and output buffers (nccl-tests' "size")
//   world     the group's size
//   fabric    what carries the bytes: a Transport (TCP, shared memory, in-process), the
//             simulated torus (whose own plans know its links), or MPI's nonblocking
//             collectives (where we pick libnbc's all_reduce algorithm)
//   override  what C10D_ALGO (or a group's algo option) forces, parsed by parse_algo_override
//
// C10D_ALGO forces all_reduce and broadcast only; a forced one wins on every fabric, and on the
// torus it then runs over the torus's transport instead of the torus's own plans. The choice never
// depends on data, the rank or time, so every rank of a group makes the same one.
#pragma once

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
  kTorus,            // the simulated torus's own plans (src/backends/tpu_ici/torus_plans.h)
};

enum class Fabric { kTransport, kTorus, kMpiNonblocking };

struct AlgoOverride {
  std::optional<Algorithm> all_reduce;  // kRing or kHalvingDoubling
  std::optional<Algorithm> broadcast;   // kTree or kChain
  bool operator==(const AlgoOverride&) const = default;
};

// Below this many bytes all_reduce over 3 or more ranks takes halving-doubling, from it the ring.
inline constexpr std::int64_t kHalvingDoublingMaxBytes = 256 << 10;
// Over two ranks both algorithms exchange the same two halves, and the ring's segments only add
// messages (DDP's 0.5 and 1.6 MB buckets: 5-9% off the step) until its pipeline pays: from this
// size it streams each reduced segment straight back (loopback TCP, 16 MiB: 4.5-5.1 against
// 5.6-6.9 ms for halving-doubling; at 8 MiB they are even).
inline constexpr std::int64_t kTwoRankRingMinBytes = 8 << 20;
// Below this a broadcast is latency-bound and the tree's log2(n) hops win; from it the chain's
// bandwidth wins.
inline constexpr std::int64_t kChainBroadcastMinBytes = 512 << 10;
// libnbc's MPI_Iallreduce: recursive doubling below this, the ring from it (libnbc's own choice
// for an in-place all_reduce on fewer than 4 ranks is always a binomial reduce then broadcast).
inline constexpr std::int64_t kMpiNbcRingMinBytes = 64 << 10;

// Parses "ring", "hd", or a list such as "all_reduce=ring,broadcast=chain" (values ring|hd|auto
// for all_reduce, tree|chain|auto for broadcast; "halving_doubling" and "pipelined" are
// accepted spellings). Empty: nothing forced. Anything else is an InvalidArgument naming
// `source` (the variable or option), the whole text and the piece it cannot read.
AlgoOverride parse_algo_override(std::string_view spec, std::string_view source);

// The algorithm for `op` of `bytes` (>= 0) over `world` (>= 1) ranks on `fabric`. Pure: the
// same arguments give the same answer on every rank.
Algorithm choose_algorithm(CollectiveOp op, std::int64_t bytes, int world, Fabric fabric,
                           const AlgoOverride& forced = {});

std::string_view algorithm_name(Algorithm a);

}  // namespace c10d::inline v1::algorithms
