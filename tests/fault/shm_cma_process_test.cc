// Single-copy messages between rank processes (backends/gloo_like/shm_cma.cc), where the kernel's
// permission check is real: pg_fault_child "large" (all_reduce, broadcast, send/recv around the
// threshold and of several MiB, checked) with the set-up's debug lines. By default every pair
// goes single-copy; C10D_SHM_CMA=0 turns it off; a probe that fails on one rank (the fault point
// shm:cma_probe:fail, standing for a kernel that refuses) leaves only the direction that rank
// cannot read on the ring, with a line saying why. The values are exact every way.
#include <gtest/gtest.h>

#include <string>

#include "fault_ranks.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::EnvChanges;
using test::Ranks;

const EnvChanges kJob = {{"C10D_BACKEND", "tcp"}, {"C10D_SHM", "1"}, {"C10D_LOG_LEVEL", "debug"}};

// Runs "large" on two ranks; each rank's output (stdout and stderr), after checking it passed.
std::vector<std::string> run_large(const EnvChanges& env, int victim = -1,
                                   const EnvChanges& victim_env = {}) {
  EnvChanges all = kJob;
  for (const auto& [k, v] : env) all[k] = v;
  Ranks ranks(2, {"large"}, all, victim, victim_env);
  std::vector<std::string> out;
  for (int r = 0; r < 2; ++r) {
    auto& child = ranks.rank(r);
    const auto exit = child.wait(test::Clock::now() + 120s);
    EXPECT_TRUE(exit.exited && exit.code == 0) << child.describe();
    EXPECT_NE(child.out().find("OK"), std::string::npos) << child.describe();
    out.push_back(child.out() + child.err());
  }
  return out;
}

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

TEST(ShmSingleCopyProcessTest, RankProcessesReadEachOtherSingleCopy) {
  const auto out = run_large({});
  EXPECT_TRUE(has(out[0], "to rank 1 go single-copy")) << out[0];
  EXPECT_TRUE(has(out[1], "to rank 0 go single-copy")) << out[1];
}

TEST(ShmSingleCopyProcessTest, OffWithTheVariableEverythingGoesThroughTheRing) {
  const auto out = run_large({{"C10D_SHM_CMA", "0"}});
  for (const std::string& o : out) {
    EXPECT_TRUE(has(o, "single-copy messages are off")) << o;
    EXPECT_FALSE(has(o, "go single-copy")) << o;
  }
}

TEST(ShmSingleCopyProcessTest, AProbeThatFailsLeavesThatDirectionOnTheRingSayingWhy) {
  const auto out = run_large({}, 1, {{"C10D_TEST_FAULT_AT", "shm:cma_probe:fail"}});
  // Rank 1 cannot read rank 0: rank 0 sends it everything through the ring.
  EXPECT_TRUE(has(out[1], "rank 0 (pid")) << out[1];
  EXPECT_TRUE(has(out[1],
                  "sends through the ring, not single-copy: process_vm_readv: Operation "
                  "not permitted"))
      << out[1];
  EXPECT_FALSE(has(out[0], "to rank 1 go single-copy")) << out[0];
  // Rank 0 can read rank 1: that direction stays single-copy.
  EXPECT_TRUE(has(out[1], "to rank 0 go single-copy")) << out[1];
}

}  // namespace
}  // namespace c10d::inline v1
