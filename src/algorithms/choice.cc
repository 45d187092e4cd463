#include "algorithms/choice.h"

#include <string>

#include "core/check.h"

namespace c10d::inline v1::algorithms {

AlgoOverride parse_algo_override(std::string_view spec, std::string_view source) {
  const std::string whole(spec);
  AlgoOverride forced;
  const auto bad = [&](std::string_view entry) {
    C10D_THROW(InvalidArgument,
               "{} '{}': cannot read '{}'; expected 'ring', 'hd', 'hier', 'flat', or a list like "
               "'all_reduce=ring|hd|hier|auto,broadcast=tree|chain|hier|auto,"
               "all_gather=ring|hier|auto,reduce_scatter=ring|hier|auto'",
               source, whole, entry);
  };
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    const std::string_view entry = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (entry.empty()) continue;
    const auto eq = entry.find('=');
    const std::string_view algo = eq == std::string_view::npos ? entry : entry.substr(eq + 1);
    const bool hier = algo == "hier" || algo == "hierarchical";
    if (eq == std::string_view::npos && hier) {
      forced.all_reduce = forced.broadcast = forced.all_gather = forced.reduce_scatter =
          Algorithm::kHierarchical;
      continue;
    }
    if (eq == std::string_view::npos && algo == "flat") {
      forced.flat = true;
      continue;
    }
    const std::string_view op = eq == std::string_view::npos ? "all_reduce" : entry.substr(0, eq);
    std::optional<Algorithm>* slot = nullptr;
    std::optional<Algorithm> value;
    if (op == "all_reduce") {
      slot = &forced.all_reduce;
      if (algo == "ring") value = Algorithm::kRing;
      if (algo == "hd" || algo == "halving_doubling") value = Algorithm::kHalvingDoubling;
    } else if (op == "broadcast") {
      slot = &forced.broadcast;
      if (algo == "tree") value = Algorithm::kTree;
      if (algo == "chain" || algo == "pipelined") value = Algorithm::kChain;
    } else if (op == "all_gather" || op == "reduce_scatter") {
      slot = op == "all_gather" ? &forced.all_gather : &forced.reduce_scatter;
      if (algo == "ring") value = Algorithm::kRing;
    } else {
      bad(entry);
    }
    if (hier) value = Algorithm::kHierarchical;
    if (!value && algo != "auto") bad(entry);
    *slot = value;  // "auto": nothing forced
  }
  return forced;
}

Algorithm choose_algorithm(CollectiveOp op, std::int64_t bytes, int world, Fabric fabric,
                           const AlgoOverride& forced, const Topology& topology) {
  C10D_CHECK(bytes >= 0 && world >= 1, "choose_algorithm: {} bytes over {} ranks", bytes, world);
  // A forced hierarchical algorithm needs the hierarchy; without it the op is chosen as if
  // nothing were forced.
  const auto forced_for = [&](const std::optional<Algorithm>& f) -> std::optional<Algorithm> {
    if (f == Algorithm::kHierarchical && !topology.hierarchical()) return std::nullopt;
    return f;
  };
  const bool hier = fabric == Fabric::kTransport && !forced.flat && topology.hierarchical();
  switch (op) {
    case CollectiveOp::kAllReduce:
      if (const auto f = forced_for(forced.all_reduce)) return *f;
      switch (fabric) {
        case Fabric::kTorus:
          return Algorithm::kTorus;
        case Fabric::kMpiNonblocking:
          return bytes >= kMpiNbcRingMinBytes ? Algorithm::kRing : Algorithm::kHalvingDoubling;
        case Fabric::kTransport:
          if (hier) return Algorithm::kHierarchical;
          return bytes >= (world > 2 ? kHalvingDoublingMaxBytes : kTwoRankRingMinBytes)
                     ? Algorithm::kRing
                     : Algorithm::kHalvingDoubling;
      }
      break;
    case CollectiveOp::kBroadcast:
      if (const auto f = forced_for(forced.broadcast)) return *f;
      if (fabric == Fabric::kTorus) return Algorithm::kTorus;
      if (hier && bytes >= kHierarchicalBroadcastMinBytes) return Algorithm::kHierarchical;
      return bytes >= kChainBroadcastMinBytes ? Algorithm::kChain : Algorithm::kTree;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter: {
      const auto& f = op == CollectiveOp::kAllGather ? forced.all_gather : forced.reduce_scatter;
      if (const auto g = forced_for(f)) return *g;
      if (fabric == Fabric::kTorus) return Algorithm::kTorus;
      return hier ? Algorithm::kHierarchical : Algorithm::kRing;
    }
    case CollectiveOp::kAllToAll:
      return fabric == Fabric::kTorus ? Algorithm::kTorus : Algorithm::kPairwise;
  }
  C10D_THROW(InvalidArgument, "choose_algorithm: unknown op {}", static_cast<int>(op));
}

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::kRing:
      return "ring";
    case Algorithm::kHalvingDoubling:
      return "halving_doubling";
    case Algorithm::kTree:
      return "tree";
    case Algorithm::kChain:
      return "chain";
    case Algorithm::kPairwise:
      return "pairwise";
    case Algorithm::kTorus:
      return "torus";
    case Algorithm::kHierarchical:
      return "hierarchical";
  }
  return "unknown";
}

}  // namespace c10d::inline v1::algorithms
