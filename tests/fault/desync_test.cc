// Ranks that disagree on a collective, under c10drun with real processes and C10D_DEBUG unset:
// after five matching all_reduces rank 2 calls broadcast while the others call a sixth
// all_reduce (as a receiver, or as the root, which only sends), or passes half the size, or
// broadcasts from another root than the others. No rank may return success, and every rank must
// fail within moments (not at its 60 s timeout) with an error that names both calls and both ranks,
// whichever way the bytes go: shared-memory slots (4 KiB), shared-memory ring messages, TCP
// frames (C10D_SHM=0). desync_child.cc is one rank; it ignores the launcher's SIGTERM, so each
// rank reports how its op ended even after the first failure stops the job.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../store/child_process.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::Clock;
using test::TempDir;

constexpr int kRanks = 4;

struct Desync {
  std::string scenario;  // desync_child's: "call", "size", "root" or "rootof"
  int count;             // floats the other ranks all_reduce
  bool shm;              // C10D_SHM
  std::string name;
};

std::string all_reduce_of(int count) {
  return "all_reduce(float32, count " + std::to_string(count) + ", sum) #5";
}

std::string broadcast_of(int count, int root) {
  return "broadcast(float32, count " + std::to_string(count) + ", root " + std::to_string(root) +
         ") #5";
}

// What the ranks but 2 call as their sixth op, and what rank 2 calls.
std::string others_call(const Desync& d) {
  return d.scenario == "rootof" ? broadcast_of(d.count, 0) : all_reduce_of(d.count);
}
std::string rank2_call(const Desync& d) {
  if (d.scenario == "size") return all_reduce_of(d.count / 2);
  return broadcast_of(d.count, d.scenario == "root" ? 2 : d.scenario == "rootof" ? 1 : 0);
}

// The words of a rank that found the mismatch, in either direction: a receive that met a frame
// of the other call (the data's, or a rooted op's entry check's: algorithms/entry_check.h), or a
// shared-slot round that met the other op.
std::vector<std::string> findings(const Desync& d) {
  std::vector<std::string> out;
  for (const std::string verb : {"received a frame of", "does not match"}) {
    for (int r : {0, 1, 3}) {
      out.push_back("rank " + std::to_string(r) + ": its " + others_call(d) + " " + verb +
                    " rank 2's " + rank2_call(d));
      out.push_back("rank 2: its " + rank2_call(d) + " " + verb + " rank " + std::to_string(r) +
                    "'s " + others_call(d));
    }
  }
  return out;
}

class DesyncTest : public ::testing::TestWithParam<Desync> {};

TEST_P(DesyncTest, EveryRankFailsAtOnceNamingBothCallsAndBothRanks) {
  const Desync& d = GetParam();
  TempDir dir;
  ChildProcess launcher({(test::build_dir() / "tools" / "c10drun").string(), "--nproc-per-node",
                         std::to_string(kRanks), "--grace-period-ms", "20000",
                         (test::build_dir() / "tests" / "desync_child").string(), d.scenario,
                         std::to_string(d.count)},
                        {{"C10D_SHM", d.shm ? "1" : "0"}, {"C10D_DEBUG", std::nullopt}}, dir.path(),
                        "c10drun");
  const auto exit = launcher.wait(Clock::now() + 90s);
  ASSERT_FALSE(exit.timed_out) << launcher.out() << launcher.err();
  EXPECT_NE(exit.code, 0) << launcher.describe();
  const std::string out = launcher.out();
  EXPECT_EQ(out.find("SUCCEEDED"), std::string::npos) << out;
  EXPECT_EQ(out.find("UNEXPECTED"), std::string::npos) << out;
  const std::vector<std::string> found = findings(d);
  for (int r = 0; r < kRanks; ++r) {
    const std::string head = "[rank " + std::to_string(r) + "]: DESYNC ";
    const std::size_t at = out.find(head);
    ASSERT_NE(at, std::string::npos) << "rank " << r << " did not fail:\n" << out << launcher.err();
    const std::string line = out.substr(at, out.find('\n', at) - at);
    // Found by the check, not by the op's 60 s timeout.
    EXPECT_LT(std::stol(line.substr(head.size())), 20000) << line;
    bool named = false;
    for (const std::string& f : found) named = named || line.find(f) != std::string::npos;
    EXPECT_TRUE(named) << "rank " << r << " does not name both calls and ranks: " << line;
  }
  // Every rank ended on its own (exit 3), none was killed.
  EXPECT_EQ(launcher.err().find("signal"), std::string::npos) << launcher.err();
}

INSTANTIATE_TEST_SUITE_P(
    , DesyncTest,
    ::testing::Values(
        // 1024 floats: the others' all_reduce meets in shared slots, rank 2's broadcast in ring
        // messages; over TCP both are frames.
        Desync{"call", 1024, true, "BroadcastAmongSlotAllReducesOverSharedMemory"},
        Desync{"call", 1024, false, "BroadcastAmongAllReducesOverTcp"},
        // Above the 4 KiB slots: messages on both sides.
        Desync{"call", 4096, true, "BroadcastAmongAllReducesInSharedMemoryRings"},
        Desync{"size", 4096, true, "HalfSizeAllReduceInSharedMemoryRings"},
        Desync{"size", 4096, false, "HalfSizeAllReduceOverTcp"},
        // Rank 2 is the broadcast's root: it only sends, and must not finish before the others
        // failed.
        Desync{"root", 1024, true, "SendOnlyRootAmongSlotAllReduces"},
        Desync{"root", 4096, false, "SendOnlyRootAmongAllReducesOverTcp"},
        // Every rank broadcasts; only the root differs.
        Desync{"rootof", 1024, true, "OtherRootOverSharedMemory"},
        Desync{"rootof", 4096, false, "OtherRootOverTcp"}),
    [](const ::testing::TestParamInfo<Desync>& p) { return p.param.name; });

}  // namespace
}  // namespace c10d::inline v1
