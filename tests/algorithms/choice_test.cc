// The algorithm choice: every threshold from both sides, each fabric, and C10D_ALGO's forms.
#include "algorithms/choice.h"

#include <gtest/gtest.h>

#include "algorithms/ring_all_reduce.h"
#include "c10d/errors.h"

namespace c10d::algorithms {
namespace {

using A = Algorithm;
using Op = CollectiveOp;

TEST(ChoiceTest, AllReduceOverATransportTakesTheRingFromItsThreshold) {
  // Three ranks and more: halving-doubling below 256 KiB.
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, 8, 4, Fabric::kTransport), A::kHalvingDoubling);
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, kHalvingDoublingMaxBytes - 1, 3, Fabric::kTransport),
            A::kHalvingDoubling);
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, kHalvingDoublingMaxBytes, 3, Fabric::kTransport),
            A::kRing);
  // Two ranks: the ring only once its pipeline pays.
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, kHalvingDoublingMaxBytes, 2, Fabric::kTransport),
            A::kHalvingDoubling);
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, kTwoRankRingMinBytes - 1, 2, Fabric::kTransport),
            A::kHalvingDoubling);
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, kTwoRankRingMinBytes, 2, Fabric::kTransport),
            A::kRing);
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, 0, 1, Fabric::kTransport), A::kHalvingDoubling);
}

TEST(ChoiceTest, TwoRanksWhoseSlotRoundIsSlowAreApartAndTakeSingleCopySegments) {
  using namespace std::chrono_literals;
  EXPECT_FALSE(cores_apart(50ns));  // cores that share a cache
  EXPECT_FALSE(cores_apart(kApartRound - 1ns));
  EXPECT_TRUE(cores_apart(kApartRound));
  EXPECT_TRUE(cores_apart(300ns));  // cores that do not
  EXPECT_TRUE(cores_apart(5us));    // ranks that take turns on one core
  // The segments go single-copy (the shared-memory transport's default threshold) and are not
  // the near ring's.
  EXPECT_EQ(kApartSegmentBytes, std::int64_t{2} << 20);
  EXPECT_NE(kApartSegmentBytes, RingOptions{}.segment_bytes);
}

TEST(ChoiceTest, MpiNonblockingAllReduceSwitchesAt64KiBWhateverTheWorld) {
  for (int world : {2, 3, 8}) {
    EXPECT_EQ(
        choose_algorithm(Op::kAllReduce, kMpiNbcRingMinBytes - 1, world, Fabric::kMpiNonblocking),
        A::kHalvingDoubling);
    EXPECT_EQ(choose_algorithm(Op::kAllReduce, kMpiNbcRingMinBytes, world, Fabric::kMpiNonblocking),
              A::kRing);
  }
}

TEST(ChoiceTest, BroadcastTakesTheChainFrom512KiB) {
  EXPECT_EQ(choose_algorithm(Op::kBroadcast, kChainBroadcastMinBytes - 1, 4, Fabric::kTransport),
            A::kTree);
  EXPECT_EQ(choose_algorithm(Op::kBroadcast, kChainBroadcastMinBytes, 4, Fabric::kTransport),
            A::kChain);
}

TEST(ChoiceTest, TheTorusRunsItsOwnPlansUnlessAllReduceOrBroadcastIsForced) {
  for (Op op :
       {Op::kAllReduce, Op::kBroadcast, Op::kAllGather, Op::kReduceScatter, Op::kAllToAll}) {
    EXPECT_EQ(choose_algorithm(op, 1 << 20, 8, Fabric::kTorus), A::kTorus);
  }
  const AlgoOverride ring = parse_algo_override("ring", "C10D_ALGO");
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, 8, 8, Fabric::kTorus, ring), A::kRing);
  EXPECT_EQ(choose_algorithm(Op::kBroadcast, 8, 8, Fabric::kTorus, ring), A::kTorus);
  EXPECT_EQ(choose_algorithm(Op::kAllGather, 8, 8, Fabric::kTorus, ring), A::kTorus);
  const AlgoOverride chain = parse_algo_override("broadcast=chain", "C10D_ALGO");
  EXPECT_EQ(choose_algorithm(Op::kBroadcast, 8, 8, Fabric::kTorus, chain), A::kChain);
}

TEST(ChoiceTest, OtherCollectivesHaveOneAlgorithmEach) {
  EXPECT_EQ(choose_algorithm(Op::kAllGather, 8, 4, Fabric::kTransport), A::kRing);
  EXPECT_EQ(choose_algorithm(Op::kReduceScatter, 1 << 30, 4, Fabric::kTransport), A::kRing);
  EXPECT_EQ(choose_algorithm(Op::kAllToAll, 8, 4, Fabric::kTransport), A::kPairwise);
}

TEST(ChoiceTest, AForcedAlgorithmWinsOverEverySize) {
  const AlgoOverride hd = parse_algo_override("hd", "C10D_ALGO");
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, std::int64_t{1} << 30, 8, Fabric::kTransport, hd),
            A::kHalvingDoubling);
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, 8, 8, Fabric::kMpiNonblocking,
                             parse_algo_override("ring", "C10D_ALGO")),
            A::kRing);
  const AlgoOverride tree = parse_algo_override("broadcast=tree", "C10D_ALGO");
  EXPECT_EQ(choose_algorithm(Op::kBroadcast, std::int64_t{1} << 30, 4, Fabric::kTransport, tree),
            A::kTree);
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, std::int64_t{1} << 30, 4, Fabric::kTransport, tree),
            A::kRing);  // forcing broadcast leaves all_reduce automatic
}

TEST(ChoiceTest, TheOverrideParsesEveryForm) {
  EXPECT_EQ(parse_algo_override("", "x"), AlgoOverride{});
  EXPECT_EQ(parse_algo_override("ring", "x").all_reduce, A::kRing);
  EXPECT_EQ(parse_algo_override("hd", "x").all_reduce, A::kHalvingDoubling);
  EXPECT_EQ(parse_algo_override("halving_doubling", "x").all_reduce, A::kHalvingDoubling);
  const AlgoOverride both =
      parse_algo_override("all_reduce=hd,broadcast=pipelined", "the algo option");
  EXPECT_EQ(both.all_reduce, A::kHalvingDoubling);
  EXPECT_EQ(both.broadcast, A::kChain);
  // Later entries win, and auto clears.
  EXPECT_EQ(parse_algo_override("ring,all_reduce=auto", "x"), AlgoOverride{});
  EXPECT_EQ(parse_algo_override("broadcast=chain,broadcast=tree,", "x").broadcast, A::kTree);
}

TEST(ChoiceTest, AnUnreadableOverrideNamesItsSourceTheTextAndThePiece) {
  for (const char* spec : {"rin", "all_reduce=tree", "broadcast=ring", "gather=ring", "=ring"}) {
    try {
      parse_algo_override(spec, "C10D_ALGO");
      ADD_FAILURE() << spec << " was accepted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("C10D_ALGO"), std::string::npos) << what;
      EXPECT_NE(what.find(std::string("'") + spec + "'"), std::string::npos) << what;
    }
  }
  try {
    parse_algo_override("ring,broadcast=fast", "C10D_ALGO");
    ADD_FAILURE() << "accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("'broadcast=fast'"), std::string::npos) << e.what();
  }
}

TEST(ChoiceTest, NamesEveryAlgorithm) {
  EXPECT_EQ(algorithm_name(A::kRing), "ring");
  EXPECT_EQ(algorithm_name(A::kHalvingDoubling), "halving_doubling");
  EXPECT_EQ(algorithm_name(A::kTree), "tree");
  EXPECT_EQ(algorithm_name(A::kChain), "chain");
  EXPECT_EQ(algorithm_name(A::kPairwise), "pairwise");
  EXPECT_EQ(algorithm_name(A::kTorus), "torus");
  EXPECT_EQ(algorithm_name(A::kHierarchical), "hierarchical");
}

// 2 hosts of 2 ranks, 3 of 2, 2 of 3: the hierarchy; one host, one rank per host, or hosts of
// different sizes (per_host 0): none.
constexpr Topology kTwoByTwo{2, 2};
constexpr Topology kFlatTopologies[] = {{1, 4}, {4, 1}, {2, 0}, {1, 0}};

TEST(ChoiceTest, AHierarchicalTopologyTakesTheHierarchyWhereTheRingOrChainWouldRun) {
  for (const Topology topo : {kTwoByTwo, Topology{3, 2}, Topology{2, 3}}) {
    const int n = topo.hosts * topo.per_host;
    const auto at = [&](Op op, std::int64_t bytes) {
      return choose_algorithm(op, bytes, n, Fabric::kTransport, {}, topo);
    };
    // all_reduce at every size: through the leaders up to kHierLeadersMaxBytes, rings above.
    for (std::int64_t bytes : {std::int64_t{0}, std::int64_t{8}, kHierLeadersMaxBytes,
                               kHierLeadersMaxBytes + 1, kHalvingDoublingMaxBytes}) {
      EXPECT_EQ(at(Op::kAllReduce, bytes), A::kHierarchical) << bytes;
    }
    EXPECT_EQ(at(Op::kBroadcast, kHierarchicalBroadcastMinBytes - 1), A::kTree);
    EXPECT_EQ(at(Op::kBroadcast, kHierarchicalBroadcastMinBytes), A::kHierarchical);
    for (std::int64_t bytes : {std::int64_t{0}, std::int64_t{8}, std::int64_t{1} << 30}) {
      EXPECT_EQ(at(Op::kAllGather, bytes), A::kHierarchical);
      EXPECT_EQ(at(Op::kReduceScatter, bytes), A::kHierarchical);
    }
    EXPECT_EQ(at(Op::kAllToAll, 1 << 20), A::kPairwise);
  }
  // Not on the torus or under MPI, whose own algorithms know their fabric.
  EXPECT_EQ(choose_algorithm(Op::kAllGather, 8, 4, Fabric::kTorus, {}, kTwoByTwo), A::kTorus);
  EXPECT_EQ(choose_algorithm(Op::kAllReduce, 1 << 20, 4, Fabric::kMpiNonblocking, {}, kTwoByTwo),
            A::kRing);
}

TEST(ChoiceTest, WithoutAHierarchyTheFlatAlgorithmsRunEvenWhenHierIsForced) {
  const AlgoOverride hier = parse_algo_override("hier", "C10D_ALGO");
  for (const Topology topo : kFlatTopologies) {
    for (const AlgoOverride& forced : {AlgoOverride{}, hier}) {
      const auto at = [&](Op op, std::int64_t bytes) {
        return choose_algorithm(op, bytes, 4, Fabric::kTransport, forced, topo);
      };
      EXPECT_EQ(at(Op::kAllReduce, 1 << 20), A::kRing);
      EXPECT_EQ(at(Op::kAllReduce, 8), A::kHalvingDoubling);
      EXPECT_EQ(at(Op::kBroadcast, 1 << 20), A::kChain);
      EXPECT_EQ(at(Op::kAllGather, 8), A::kRing);
      EXPECT_EQ(at(Op::kReduceScatter, 8), A::kRing);
    }
  }
}

TEST(ChoiceTest, ForcingChoosesBetweenFlatAndHierarchicalAtEverySize) {
  const auto at = [&](const char* spec, Op op, std::int64_t bytes) {
    return choose_algorithm(op, bytes, 4, Fabric::kTransport, parse_algo_override(spec, "x"),
                            kTwoByTwo);
  };
  for (Op op : {Op::kAllReduce, Op::kBroadcast, Op::kAllGather, Op::kReduceScatter}) {
    EXPECT_EQ(at("hier", op, 8), A::kHierarchical);
    EXPECT_EQ(at("hierarchical", op, 0), A::kHierarchical);
  }
  EXPECT_EQ(at("ring", Op::kAllReduce, std::int64_t{1} << 30), A::kRing);
  EXPECT_EQ(at("hd", Op::kAllReduce, std::int64_t{1} << 30), A::kHalvingDoubling);
  // "ring" and "hd" force all_reduce alone: the others stay hierarchical...
  EXPECT_EQ(at("ring", Op::kAllGather, 8), A::kHierarchical);
  // ...unless "flat" turns the automatic choice away from the hosts.
  EXPECT_EQ(at("flat", Op::kAllGather, 8), A::kRing);
  EXPECT_EQ(at("flat", Op::kReduceScatter, 8), A::kRing);
  EXPECT_EQ(at("flat", Op::kAllReduce, 1 << 20), A::kRing);
  EXPECT_EQ(at("flat", Op::kBroadcast, 1 << 20), A::kChain);
  EXPECT_EQ(at("flat,broadcast=hier", Op::kBroadcast, 8), A::kHierarchical);
  EXPECT_EQ(at("all_gather=ring", Op::kAllGather, 8), A::kRing);
  EXPECT_EQ(at("all_gather=ring", Op::kReduceScatter, 8), A::kHierarchical);
  EXPECT_EQ(at("reduce_scatter=ring", Op::kReduceScatter, 8), A::kRing);
  EXPECT_EQ(at("all_reduce=hier", Op::kAllReduce, 8), A::kHierarchical);
  EXPECT_EQ(at("all_reduce=hier", Op::kAllGather, 8), A::kHierarchical);  // automatic anyway
  // "auto" clears what came before: all_reduce is hierarchical at every size anyway.
  EXPECT_EQ(at("all_reduce=hd,all_reduce=auto", Op::kAllReduce, 8), A::kHierarchical);
  EXPECT_EQ(at("flat,all_reduce=auto", Op::kAllReduce, 8), A::kHalvingDoubling);
}

TEST(ChoiceTest, TheHierarchicalFormsParse) {
  const AlgoOverride hier = parse_algo_override("hier", "x");
  EXPECT_EQ(hier.all_reduce, A::kHierarchical);
  EXPECT_EQ(hier.broadcast, A::kHierarchical);
  EXPECT_EQ(hier.all_gather, A::kHierarchical);
  EXPECT_EQ(hier.reduce_scatter, A::kHierarchical);
  EXPECT_FALSE(hier.flat);
  EXPECT_TRUE(parse_algo_override("flat", "x").flat);
  const AlgoOverride mixed =
      parse_algo_override("all_gather=hier,reduce_scatter=ring,broadcast=hierarchical", "x");
  EXPECT_EQ(mixed.all_gather, A::kHierarchical);
  EXPECT_EQ(mixed.reduce_scatter, A::kRing);
  EXPECT_EQ(mixed.broadcast, A::kHierarchical);
  EXPECT_FALSE(mixed.all_reduce);
  for (const char* spec : {"hier=ring", "all_gather=hd", "reduce_scatter=tree", "flat=1",
                           "all_gather=flat", "hierarchy"}) {
    try {
      parse_algo_override(spec, "C10D_ALGO");
      ADD_FAILURE() << spec << " was accepted";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("'") + spec + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("all_gather=ring|hier|auto"), std::string::npos) << what;
    }
  }
}

TEST(ChoiceTest, ImpossibleSizesAreABug) {
  EXPECT_THROW(choose_algorithm(Op::kAllReduce, -1, 2, Fabric::kTransport), Error);
  EXPECT_THROW(choose_algorithm(Op::kAllReduce, 8, 0, Fabric::kTransport), Error);
}

}  // namespace
}  // namespace c10d::algorithms
