// The algorithm choice: every threshold from both sides, each fabric, and C10D_ALGO's forms.
#include "algorithms/choice.h"

#include <gtest/gtest.h>

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
}

TEST(ChoiceTest, ImpossibleSizesAreABug) {
  EXPECT_THROW(choose_algorithm(Op::kAllReduce, -1, 2, Fabric::kTransport), Error);
  EXPECT_THROW(choose_algorithm(Op::kAllReduce, 8, 0, Fabric::kTransport), Error);
}

}  // namespace
}  // namespace c10d::algorithms
