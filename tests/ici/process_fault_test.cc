// The ICI backend with one chip per process: a chip killed with SIGKILL in the middle of an
// all_reduce is noticed by its neighbours (its pid is gone while its segment still says
// running), and the abort floods the torus, so every other rank fails within 5 s with an error
// naming it. A healthy run of the same program passes.
#include <gtest/gtest.h>

#include <string>

#include "../fault/fault_ranks.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::EnvChanges;
using test::Ranks;

// One chip per rank, on a torus of `topology`.
EnvChanges ici_chips(const std::string& topology) {
  return {{"C10D_BACKEND", "ici"}, {"C10D_ICI_TOPOLOGY", topology}};
}

TEST(IciProcessFaultTest, AKilledChipFailsEveryOtherChipQuicklyNamingIt) {
  constexpr int kVictim = 2;
  Ranks chips(4, {"kill", std::to_string(kVictim)}, ici_chips("2x2"));
  test::expect_killed_rank_named_by_the_others(chips, kVictim);
}

TEST(IciProcessFaultTest, AHealthyRunPasses) {
  Ranks chips(4, {"ok"}, ici_chips("4"));
  for (auto& child : chips.children) {
    const auto exit = child->wait(std::chrono::steady_clock::now() + 60s);
    EXPECT_EQ(exit.code, 0) << child->describe();
    EXPECT_NE(child->out().find("OK"), std::string::npos) << child->out();
  }
}

}  // namespace
}  // namespace c10d::inline v1
