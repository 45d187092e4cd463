// The flight recorder with real processes: three ranks (pg_fault_child) with C10D_TRACE_DIR set
// and a 3 s timeout, where rank 2 strays at collective #3, leave one dump each, and
// `c10d-trace analyze` on the directory names rank 2 and what it did instead; rank 2's dump comes
// from its group's failure (trace_mismatch) or from SIGUSR1 (trace_skip). `c10d-trace timeline`
// draws the same dumps as a trace with a track per rank.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "fault_ranks.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::Clock;
using test::Ranks;

// Runs the scenario on 3 ranks; returns c10d-trace analyze's output after checking it exits 1.
std::string analyze_after(const std::string& scenario, Ranks& ranks,
                          const std::filesystem::path& traces) {
  for (int r = 0; r < 3; ++r) {
    const auto exit = ranks.rank(r).wait(Clock::now() + 90s);
    EXPECT_FALSE(exit.timed_out) << ranks.rank(r).describe();
    EXPECT_TRUE(exit.code == 0 || exit.code == 3) << ranks.rank(r).describe();
    EXPECT_TRUE(std::filesystem::exists(traces / fmt::format("c10d_trace_rank_{}.json", r)))
        << scenario << ": no dump of rank " << r << "; " << ranks.rank(r).describe();
  }
  ChildProcess tool(
      {(test::build_dir() / "tools" / "c10d-trace").string(), "analyze", traces.string()}, {},
      ranks.dir.path(), "analyze");
  const auto exit = tool.wait(Clock::now() + 60s);
  EXPECT_EQ(exit.code, 1) << tool.describe();
  // The same dumps as a timeline: JSON, with a track (process) per rank.
  const auto json_path = ranks.dir.path() / "trace.json";
  ChildProcess timeline({(test::build_dir() / "tools" / "c10d-trace").string(), "timeline",
                         traces.string(), "-o", json_path.string()},
                        {}, ranks.dir.path(), "timeline");
  EXPECT_EQ(timeline.wait(Clock::now() + 60s).code, 0) << timeline.describe();
  std::set<int> pids;
  const auto trace = nlohmann::json::parse(test::read_file(json_path));
  for (const auto& e : trace.at("traceEvents")) {
    pids.insert(e.at("pid").get<int>());
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2}));
  return tool.out();
}

TEST(TraceFaultTest, AnalyzeNamesTheRankThatCalledAnotherCollective) {
  test::TempDir traces;
  Ranks ranks(3, {"trace_mismatch"},
              {{"C10D_TRACE_DIR", traces.path().string()}, {"C10D_TIMEOUT_MS", "3000"}});
  const std::string out = analyze_after("trace_mismatch", ranks, traces.path());
  EXPECT_NE(out.find("first collective not completed by every rank: all_reduce #3 of group "
                     "world"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("rank 2 never called all_reduce #3 of group world; its last op was "
                     "broadcast #3 ("),
            std::string::npos)
      << out;
}

TEST(TraceFaultTest, AnalyzeNamesTheRankThatSkippedACollectiveDumpedOnSigusr1) {
  test::TempDir traces;
  Ranks ranks(3, {"trace_skip"},
              {{"C10D_TRACE_DIR", traces.path().string()}, {"C10D_TIMEOUT_MS", "3000"}});
  const std::string out = analyze_after("trace_skip", ranks, traces.path());
  EXPECT_NE(ranks.rank(2).out().find("DUMPED"), std::string::npos) << ranks.rank(2).describe();
  EXPECT_NE(out.find("rank 2 never called all_reduce #3 of group world; its last op was "
                     "all_reduce #2 (completed)"),
            std::string::npos)
      << out;
}

}  // namespace
}  // namespace c10d::inline v1
