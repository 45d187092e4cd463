// c10d-trace timeline: the dumps of three ranks, written by the recorder's JSON and read back,
// become a trace that parses as JSON, with one process track per rank named after it and a span
// per started op, the running one drawn to the last time the dumps hold.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "backends/common/trace_json.h"
#include "trace/trace_timeline.h"

namespace c10d::inline v1::tools {
namespace {

using backends::OpRecord;
using State = OpRecord::State;

// Rank r's dump: all_reduce #0 and #1 completed, #2 started on rank 0 only, and a send of rank 1
// that never started; the times are rank r's, 1 ms apart.
backends::trace::RankDump dump_of(int r) {
  backends::TraceRing ring({.name = "0", .desc = "world", .ranks = {0, 1, 2}, .rank = r}, 8);
  const auto at = [&](int ms) {
    return OpRecord::Clock::time_point(std::chrono::milliseconds(1000 + 10 * ms + r));
  };
  const auto t = Tensor::empty({16}, DType::kFloat32);
  for (int s = 0; s < (r == 0 ? 3 : 2); ++s) {
    OpRecord rec = OpRecord::of("all_reduce", t, ReduceOp::kSum, -1, 16);
    rec.sequence = static_cast<std::uint64_t>(s);
    rec.queued = at(2 * s);
    const auto id = ring.add(rec, 0, std::chrono::milliseconds(100));
    rec.started = at(2 * s);
    rec.state_ = State::kStarted;
    if (s < 2) {
      rec.ended = at(2 * s + 1);
      rec.state_ = State::kCompleted;
    }
    ring.update(id, rec);
  }
  if (r == 1) {
    OpRecord send = OpRecord::point_to_point("send", t, 2, 16);
    send.queued = at(5);
    ring.add(send, 2, std::chrono::milliseconds(100));
  }
  return backends::trace::parse_dump(
      backends::trace::write_dump(r, "test", {{ring.group(), ring.snapshot()}}, 0), "test");
}

TEST(TraceTimelineTest, OneTrackPerRankAndASpanPerStartedOp) {
  const std::string text = timeline_json({dump_of(0), dump_of(1), dump_of(2)});
  const auto trace = nlohmann::json::parse(text);  // throws when it is not JSON
  ASSERT_TRUE(trace.at("traceEvents").is_array());
  std::map<int, std::string> process_names;
  std::set<int> pids;
  std::map<int, int> spans;  // by rank
  for (const auto& e : trace["traceEvents"]) {
    pids.insert(e.at("pid").get<int>());
    if (e.at("ph") == "M" && e.at("name") == "process_name") {
      process_names[e["pid"].get<int>()] = e.at("args").at("name").get<std::string>();
    }
    if (e.at("ph") != "X") continue;
    ++spans[e["pid"].get<int>()];
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_EQ(e.at("cat"), "world");
    if (e.at("name") == "all_reduce #1") {
      EXPECT_EQ(e.at("dur").get<double>(), 10000.0);  // 10 ms, in us
      EXPECT_EQ(e.at("args").at("state"), "completed");
    }
    if (e.at("name") == "all_reduce #2") {
      // Still running: drawn to the last time the dumps hold (rank 1's send, queued at 1051 ms).
      EXPECT_EQ(e.at("args").at("state"), "started");
      EXPECT_EQ(e.at("dur").get<double>(), 11000.0);
    }
  }
  EXPECT_EQ(pids, (std::set<int>{0, 1, 2}));
  EXPECT_EQ(process_names,
            (std::map<int, std::string>{{0, "rank 0"}, {1, "rank 1"}, {2, "rank 2"}}));
  EXPECT_EQ(spans, (std::map<int, int>{{0, 3}, {1, 2}, {2, 2}}));  // the unstarted send: none
  // Times count from the earliest start (rank 0's all_reduce #0).
  EXPECT_EQ(trace.at("otherData").at("t0_ns").get<std::int64_t>(), 1'000'000'000);
}

}  // namespace
}  // namespace c10d::inline v1::tools
