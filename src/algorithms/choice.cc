#include "algorithms/choice.h"

#include <string>

#include "core/check.h"

namespace c10d::inline v1::algorithms {

AlgoOverride parse_algo_override(std::string_view spec, std::string_view source) {
  const std::string whole(spec);
  AlgoOverride forced;
  const auto bad = [&](std::string_view entry) {
    C10D_THROW(InvalidArgument,
               "{} '{}': cannot read '{}'; expected 'ring', 'hd', or a list like "
               "'all_reduce=ring|hd|auto,broadcast=tree|chain|auto'",
               source, whole, entry);
  };
  while (!spec.empty()) {
    const auto comma = spec.find(',');
    const std::string_view entry = spec.substr(0, comma);
    spec = comma == std::string_view::npos ? std::string_view() : spec.substr(comma + 1);
    if (entry.empty()) continue;
    const auto eq = entry.find('=');
    const std::string_view op = eq == std::string_view::npos ? "all_reduce" : entry.substr(0, eq);
    const std::string_view algo = eq == std::string_view::npos ? entry : entry.substr(eq + 1);
    if (op == "all_reduce") {
      if (algo == "ring") {
        forced.all_reduce = Algorithm::kRing;
      } else if (algo == "hd" || algo == "halving_doubling") {
        forced.all_reduce = Algorithm::kHalvingDoubling;
      } else if (algo == "auto") {
        forced.all_reduce.reset();
      } else {
        bad(entry);
      }
    } else if (op == "broadcast") {
      if (algo == "tree") {
        forced.broadcast = Algorithm::kTree;
      } else if (algo == "chain" || algo == "pipelined") {
        forced.broadcast = Algorithm::kChain;
      } else if (algo == "auto") {
        forced.broadcast.reset();
      } else {
        bad(entry);
      }
    } else {
      bad(entry);
    }
  }
  return forced;
}

Algorithm choose_algorithm(CollectiveOp op, std::int64_t bytes, int world, Fabric fabric,
                           const AlgoOverride& forced) {
  C10D_CHECK(bytes >= 0 && world >= 1, "choose_algorithm: {} bytes over {} ranks", bytes, world);
  switch (op) {
    case CollectiveOp::kAllReduce:
      if (forced.all_reduce) return *forced.all_reduce;
      switch (fabric) {
        case Fabric::kTorus:
          return Algorithm::kTorus;
        case Fabric::kMpiNonblocking:
          return bytes >= kMpiNbcRingMinBytes ? Algorithm::kRing : Algorithm::kHalvingDoubling;
        case Fabric::kTransport:
          return bytes >= (world > 2 ? kHalvingDoublingMaxBytes : kTwoRankRingMinBytes)
                     ? Algorithm::kRing
                     : Algorithm::kHalvingDoubling;
      }
      break;
    case CollectiveOp::kBroadcast:
      if (forced.broadcast) return *forced.broadcast;
      if (fabric == Fabric::kTorus) return Algorithm::kTorus;
      return bytes >= kChainBroadcastMinBytes ? Algorithm::kChain : Algorithm::kTree;
    case CollectiveOp::kAllGather:
    case CollectiveOp::kReduceScatter:
      return fabric == Fabric::kTorus ? Algorithm::kTorus : Algorithm::kRing;
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
  }
  return "unknown";
}

}  // namespace c10d::inline v1::algorithms
