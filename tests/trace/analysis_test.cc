// c10d-trace analyze's verdicts on crafted dumps: a skipped collective, a mismatched op,
// mismatched sizes and dtypes, a rank without a dump, and a clean job; and the dumps' files
// written by the recorder's JSON, read back from a directory.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>

#include "../store/child_process.h"
#include "backends/common/trace_json.h"
#include "trace/trace_analysis.h"

namespace c10d::inline v1::tools {
namespace {

using backends::trace::DumpEntry;
using backends::trace::RankDump;

// A job's dumps, written op by op: each rank's collectives of group "world" (id "0").
class Job {
 public:
  explicit Job(int n) : dumps_(static_cast<std::size_t>(n)) {
    std::vector<int> ranks;
    for (int r = 0; r < n; ++r) ranks.push_back(r);
    for (int r = 0; r < n; ++r) {
      dumps_[r].rank = r;
      dumps_[r].version = "2.10";
      dumps_[r].groups["0"] = {"0", "world", ranks};
    }
  }
  // Rank r called `op` as collective #seq on `numel` elements of `dtype` (PyTorch's name).
  Job& call(int r, std::int64_t seq, const std::string& op, const std::string& state,
            std::int64_t numel = 1024, const std::string& dtype = "Float") {
    auto& d = dumps_[r];
    DumpEntry e;
    e.record_id = d.entries.size();
    e.pg_name = "0";
    e.pg_desc = "world";
    e.collective_seq_id = seq;
    e.profiling_name = "gloo:" + op;
    e.op = op;
    e.input_sizes = {{numel}};
    e.input_dtypes = {dtype};
    e.state = state;
    d.entries.push_back(e);
    return *this;
  }
  // Every rank completed all_reduce #0..#n-1.
  Job& completed(int n) {
    for (int s = 0; s < n; ++s) {
      for (std::size_t r = 0; r < dumps_.size(); ++r) {
        call(static_cast<int>(r), s, "all_reduce", "completed");
      }
    }
    return *this;
  }
  Job& without(int r) {
    dumps_.erase(dumps_.begin() + r);
    return *this;
  }
  Verdict verdict(const std::map<int, std::string>& no_dump_because = {}) const {
    return analyze(dumps_, no_dump_because);
  }

 private:
  std::vector<RankDump> dumps_;
};

// The verdict's text, one line each, for the failure message and the checks.
std::string text(const Verdict& v) {
  std::string out;
  for (const auto& line : v.lines) out += line + "\n";
  return out;
}

bool has_line(const Verdict& v, const std::string& line) {
  return std::find(v.lines.begin(), v.lines.end(), line) != v.lines.end();
}

TEST(TraceAnalysisTest, EveryRankCompletingEveryCollectiveIsNoProblem) {
  const auto v = Job(3).completed(5).verdict();
  EXPECT_FALSE(v.problem) << text(v);
  ASSERT_EQ(v.lines.size(), 1u);
  EXPECT_NE(v.lines[0].find("no problem found"), std::string::npos) << text(v);
}

TEST(TraceAnalysisTest, NamesTheRankThatSkippedACollective) {
  Job job(3);
  job.completed(2).call(0, 2, "all_reduce", "started").call(1, 2, "all_reduce", "started");
  const auto v = job.verdict();
  EXPECT_TRUE(v.problem);
  EXPECT_TRUE(has_line(v,
                       "first collective not completed by every rank: all_reduce #2 of group "
                       "world"))
      << text(v);
  EXPECT_TRUE(has_line(v,
                       "rank 2 never called all_reduce #2 of group world; its last op was "
                       "all_reduce #1 (completed)"))
      << text(v);
  EXPECT_TRUE(has_line(v, "ranks 0,1 called it: started, not completed")) << text(v);
}

TEST(TraceAnalysisTest, NamesTheRankThatCalledAnotherOp) {
  Job job(3);
  job.call(0, 57, "all_reduce", "started")
      .call(1, 57, "all_reduce", "started")
      .call(2, 57, "broadcast", "started");
  const auto v = job.verdict();
  EXPECT_TRUE(v.problem);
  EXPECT_TRUE(has_line(v,
                       "rank 2 never called all_reduce #57 of group world; its last op was "
                       "broadcast #57 (started)"))
      << text(v);
  EXPECT_TRUE(has_line(v, "ranks 0,1 called it: started, not completed")) << text(v);
}

TEST(TraceAnalysisTest, NamesTheRankThatCalledWithOtherSizesOrDtypes) {
  Job job(4);
  job.call(0, 12, "all_reduce", "started", 1048576)
      .call(1, 12, "all_reduce", "started", 1048576)
      .call(2, 12, "all_reduce", "started", 1048576, "Double")
      .call(3, 12, "all_reduce", "started", 524288);
  const auto v = job.verdict();
  EXPECT_TRUE(v.problem);
  EXPECT_TRUE(has_line(v,
                       "ranks 0,1 called all_reduce #12 of group world with 1048576 float32; "
                       "rank 3 with 524288"))
      << text(v);
  EXPECT_TRUE(has_line(v,
                       "ranks 0,1 called all_reduce #12 of group world with 1048576 float32; "
                       "rank 2 with float64"))
      << text(v);
}

TEST(TraceAnalysisTest, AFailedRankIsNamedWithItsError) {
  Job job(2);
  job.completed(1).call(0, 1, "all_reduce", "failed").call(1, 1, "all_reduce", "completed");
  const auto v = job.verdict();
  EXPECT_TRUE(v.problem);
  EXPECT_TRUE(has_line(v, "rank 0 failed in it: (no error recorded)")) << text(v);
}

TEST(TraceAnalysisTest, AMemberWithoutADumpIsAProblem) {
  const auto v = Job(3).completed(2).without(2).verdict();
  EXPECT_TRUE(v.problem);
  EXPECT_TRUE(has_line(v, "rank 2 of group world left no dump")) << text(v);
}

// What the caller knows of why a rank left no dump (a launcher: how the process ended) is said
// with it.
TEST(TraceAnalysisTest, ARankWithoutADumpIsNamedWithWhatTheCallerKnows) {
  const auto v = Job(4).completed(2).without(3).without(2).verdict(
      {{2, "killed by signal 9 (SIGKILL)"}, {0, "not asked"}});
  EXPECT_TRUE(v.problem);
  EXPECT_TRUE(has_line(v, "rank 2 of group world left no dump: killed by signal 9 (SIGKILL)"))
      << text(v);
  EXPECT_TRUE(has_line(v, "rank 3 of group world left no dump")) << text(v);
  EXPECT_EQ(text(v).find("not asked"), std::string::npos) << text(v);  // rank 0 left one
}

// A member without a dump where the others stopped is named with the first collective not
// completed, not after it.
TEST(TraceAnalysisTest, ARankWithoutADumpIsNamedWithTheCollectiveTheOthersSitIn) {
  Job job(3);
  job.completed(3).call(0, 3, "all_reduce", "started").call(1, 3, "all_reduce", "failed");
  const auto v = job.without(2).verdict({{2, "it was killed by signal 9 (SIGKILL)"}});
  EXPECT_TRUE(v.problem);
  ASSERT_GE(v.lines.size(), 2u) << text(v);
  EXPECT_EQ(v.lines[0],
            "first collective not completed by every rank: all_reduce #3 of group world");
  EXPECT_EQ(v.lines[1], "rank 2 left no dump: it was killed by signal 9 (SIGKILL)") << text(v);
  EXPECT_TRUE(has_line(v, "rank 0 called it: started, not completed")) << text(v);
  EXPECT_EQ(text(v).find("of group world left no dump"), std::string::npos) << text(v);
}

TEST(TraceAnalysisTest, OpsOlderThanARingReachesAreTakenAsCompleted) {
  // Rank 1's ring kept #3 on only; #0-#2 of rank 0 are not a problem.
  Job job(2);
  for (int s = 0; s < 5; ++s) job.call(0, s, "all_reduce", "completed");
  for (int s = 3; s < 5; ++s) job.call(1, s, "all_reduce", "completed");
  const auto v = job.verdict();
  EXPECT_FALSE(v.problem) << text(v);
}

TEST(TraceAnalysisTest, ReadsTheRecordersDumpsFromADirectory) {
  test::TempDir dir;
  for (int r = 0; r < 2; ++r) {
    backends::TraceRing ring({.name = "0", .desc = "world", .ranks = {0, 1}, .rank = r}, 8);
    for (std::uint64_t s = 0; s < (r == 0 ? 3u : 2u); ++s) {
      auto t = Tensor::empty({16}, DType::kFloat32);
      auto rec = backends::OpRecord::of("all_reduce", t, ReduceOp::kSum, -1, 16);
      rec.sequence = s;
      const auto id = ring.add(rec, 0, std::chrono::milliseconds(100));
      rec.move_to(s < 2 ? backends::OpRecord::State::kCompleted
                        : backends::OpRecord::State::kStarted);
      ring.update(id, rec);
    }
    std::ofstream(dir.path() / fmt::format("c10d_trace_rank_{}.json", r))
        << backends::trace::write_dump(r, "test", {{ring.group(), ring.snapshot()}}, 0);
  }
  const auto v = analyze(read_dumps(dir.path().string()));
  EXPECT_TRUE(has_line(v,
                       "rank 1 never called all_reduce #2 of group world; its last op was "
                       "all_reduce #1 (completed)"))
      << text(v);
}

}  // namespace
}  // namespace c10d::inline v1::tools
