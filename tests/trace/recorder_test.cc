// The flight recorder: the ring keeps the last ops and their transitions, the dump's JSON carries
// PyTorch's field names and reads back field for field, C10D_TRACE_BUFFER is checked, and a
// group's failure (abort) and dump_traces write one file per rank.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <thread>

#include "../rank_threads.h"
#include "../store/child_process.h"
#include "backends/common/flight_recorder.h"
#include "backends/common/trace_json.h"
#include "backends/common/transport_process_group.h"
#include "c10d/c10d.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::backends {
namespace {

using namespace std::chrono_literals;
using State = OpRecord::State;

OpRecord all_reduce_of(std::vector<std::int64_t> shape) {
  auto t = Tensor::empty(std::move(shape), DType::kFloat32);
  return OpRecord::of("all_reduce", t, ReduceOp::kSum, -1, t.numel());
}

TraceGroup world(int rank, int n) {
  TraceGroup g{.name = "0", .desc = "world", .id = 0, .rank = rank, .backend = "tcp"};
  for (int r = 0; r < n; ++r) g.ranks.push_back(r);
  return g;
}

// Restores an environment variable when the test ends.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() { old_ ? ::setenv(name_, old_->c_str(), 1) : ::unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

// A ring of 3 has room for 4 (a power of two): the ended ops there give way to later ones.
TEST(TraceRingTest, KeepsTheLastOpsOldestFirst) {
  TraceRing ring(world(0, 2), 3);
  EXPECT_EQ(ring.capacity(), 4u);
  OpRecord done = all_reduce_of({8});
  done.move_to(State::kCompleted);
  std::vector<std::uint64_t> ids;
  for (std::uint64_t seq = 0; seq < 6; ++seq) {
    OpRecord r = all_reduce_of({8});
    r.sequence = seq;
    ids.push_back(ring.add(r, 0, 1000ms));
    if (seq < 5) ring.update(ids.back(), done);
  }
  EXPECT_EQ(ids, (std::vector<std::uint64_t>{0, 1, 2, 3, 4, 5}));
  ring.update(0, done);  // overwritten: dropped
  const auto entries = ring.snapshot();
  ASSERT_EQ(entries.size(), 4u);
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(entries[i].id, i + 2);
    EXPECT_EQ(entries[i].record.sequence, i + 2);
  }
  EXPECT_EQ(entries[0].record.state(), State::kCompleted);
  EXPECT_EQ(entries[3].record.state(), State::kQueued);
}

// The op a rank hangs in stays: a later op that would take its slot goes unrecorded instead.
TEST(TraceRingTest, KeepsAnOpThatHasNotEndedOverLaterOnes) {
  TraceRing ring(world(0, 2), 2);
  OpRecord hung = all_reduce_of({8});
  hung.move_to(State::kStarted);
  OpRecord done = all_reduce_of({8});
  done.move_to(State::kCompleted);
  ring.update(ring.add(all_reduce_of({8}), 0, 1000ms), hung);  // id 0, slot 0
  ring.update(ring.add(all_reduce_of({8}), 0, 1000ms), done);  // id 1, slot 1
  ring.update(ring.add(all_reduce_of({8}), 0, 1000ms), done);  // id 2: slot 0 is busy
  ring.update(ring.add(all_reduce_of({8}), 0, 1000ms), done);  // id 3, slot 1
  auto entries = ring.snapshot();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].id, 0u);
  EXPECT_EQ(entries[0].record.state(), State::kStarted);
  EXPECT_EQ(entries[1].id, 3u);
  // Once it ended, the next op takes its slot.
  ring.update(0, done);
  ring.add(all_reduce_of({8}), 0, 1000ms);  // id 4, slot 0
  entries = ring.snapshot();
  ASSERT_EQ(entries.size(), 2u);
  EXPECT_EQ(entries[0].id, 3u);
  EXPECT_EQ(entries[1].id, 4u);
}

// A snapshot taken while one thread adds ops and another ends them never holds a torn entry:
// every field of an entry belongs to the same op and the same transition.
TEST(TraceRingTest, SnapshotsDuringWritesAreConsistent) {
  TraceRing ring(world(0, 2), 8);
  constexpr std::uint64_t kOps = 100000;
  const auto at = [](std::uint64_t ticks) {
    return OpRecord::Clock::time_point(OpRecord::Clock::duration(ticks));
  };
  std::atomic<std::uint64_t> started{0};  // ops started, for the thread that ends them
  std::atomic<bool> done{false};
  std::thread ender([&] {
    for (std::uint64_t id = 0; id < kOps; ++id) {
      while (started.load(std::memory_order_acquire) <= id) std::this_thread::yield();
      OpRecord r = all_reduce_of({static_cast<std::int64_t>(id % 100 + 1)});
      r.sequence = id;
      r.started = at(3 * id + 1);
      r.ended = at(3 * id + 2);
      r.state_ = State::kCompleted;
      ring.update(id, r);
    }
  });
  std::size_t checked = 0;
  std::thread reader([&] {
    while (!done.load()) {
      for (const auto& e : ring.snapshot()) {
        ++checked;
        ASSERT_EQ(e.record.sequence, e.id);
        ASSERT_EQ(e.other_sequence, 2 * e.id);
        ASSERT_EQ(e.record.count, static_cast<std::int64_t>(e.id % 100 + 1));
        ASSERT_EQ(e.record.queued, at(3 * e.id));
        const auto s = e.record.state();
        ASSERT_EQ(e.record.started, s == State::kQueued ? at(0) : at(3 * e.id + 1));
        ASSERT_EQ(e.record.ended, s == State::kCompleted ? at(3 * e.id + 2) : at(0));
      }
    }
  });
  for (std::uint64_t id = 0; id < kOps; ++id) {
    OpRecord r = all_reduce_of({static_cast<std::int64_t>(id % 100 + 1)});
    r.sequence = id;
    r.queued = at(3 * id);
    ASSERT_EQ(ring.add(r, 2 * id, 1000ms), id);
    r.started = at(3 * id + 1);
    r.state_ = State::kStarted;
    ring.update(id, r);
    started.store(id + 1, std::memory_order_release);
  }
  ender.join();
  done.store(true);
  reader.join();
  EXPECT_GT(checked, 0u);
}

TEST(TraceRingTest, RecordsTheShapeFoldingDimsBeyondTheFourth) {
  const OpRecord r = all_reduce_of({2, 3, 4, 5, 6});
  EXPECT_EQ(r.dims, 4);
  EXPECT_EQ(r.shape, (std::array<std::int64_t, 4>{2, 3, 4, 30}));
}

TEST(TraceJsonTest, PyTorchFieldsRoundTrip) {
  TraceRing ring(world(1, 3), 10);
  OpRecord a = all_reduce_of({4, 256});
  a.timed = true;
  a.queued = core::coarse_now();
  a.sequence = 7;
  const auto a_id = ring.add(a, 2, 5000ms);
  a.move_to(State::kStarted);
  ring.update(a_id, a);
  OpRecord s = OpRecord::point_to_point("send", Tensor::empty({16}, DType::kInt64), 2, 16);
  s.sequence = 3;
  const auto s_id = ring.add(s, 8, 1000ms);
  s.move_to(State::kFailed);
  ring.update(s_id, s, "rank 1: peer 2 is gone");

  const std::string text = trace::write_dump(1, "a test", {{ring.group(), ring.snapshot()}}, 0);
  for (const char* field : {"\"version\"",
                            "\"pg_config\"",
                            "\"pg_status\"",
                            "\"entries\"",
                            "\"record_id\"",
                            "\"pg_id\"",
                            "\"process_group\"",
                            "\"collective_seq_id\"",
                            "\"p2p_seq_id\"",
                            "\"op_id\"",
                            "\"profiling_name\"",
                            "\"input_sizes\"",
                            "\"input_dtypes\"",
                            "\"output_sizes\"",
                            "\"output_dtypes\"",
                            "\"state\"",
                            "\"time_created_ns\"",
                            "\"time_discovered_started_ns\"",
                            "\"time_discovered_completed_ns\"",
                            "\"timeout_ms\"",
                            "\"is_p2p\"",
                            "\"retired\""}) {
    EXPECT_NE(text.find(field), std::string::npos) << field;
  }
  const auto d = trace::parse_dump(text, "test");
  EXPECT_EQ(d.version, "2.10");
  EXPECT_EQ(d.rank, 1);
  EXPECT_EQ(d.reason, "a test");
  ASSERT_EQ(d.groups.count("0"), 1u);
  EXPECT_EQ(d.groups.at("0").desc, "world");
  EXPECT_EQ(d.groups.at("0").ranks, (std::vector<int>{0, 1, 2}));
  ASSERT_EQ(d.entries.size(), 2u);
  const auto& x = d.entries[0];
  EXPECT_EQ(x.record_id, a_id);
  EXPECT_EQ(x.pg_name, "0");
  EXPECT_EQ(x.pg_desc, "world");
  EXPECT_EQ(x.collective_seq_id, 7);
  EXPECT_EQ(x.p2p_seq_id, 2);
  EXPECT_FALSE(x.is_p2p);
  EXPECT_EQ(x.profiling_name, "gloo:all_reduce");
  EXPECT_EQ(x.op, "all_reduce");
  EXPECT_EQ(x.input_sizes, (std::vector<std::vector<std::int64_t>>{{4, 256}}));
  EXPECT_EQ(x.input_dtypes, (std::vector<std::string>{"Float"}));
  EXPECT_EQ(x.state, "started");
  EXPECT_GT(x.time_created_ns, 0);
  EXPECT_GE(x.started_ns, x.time_created_ns);
  EXPECT_EQ(x.ended_ns, 0);
  EXPECT_EQ(x.timeout_ms, 5000);
  EXPECT_EQ(x.numel(), 1024);
  const auto& y = d.entries[1];
  EXPECT_TRUE(y.is_p2p);
  EXPECT_EQ(y.p2p_seq_id, 3);
  EXPECT_EQ(y.collective_seq_id, 8);
  EXPECT_EQ(y.profiling_name, "gloo:send 1->2");
  EXPECT_EQ(y.op, "send");
  EXPECT_EQ(y.root, 2);
  EXPECT_EQ(y.state, "failed");
  EXPECT_EQ(y.error, "rank 1: peer 2 is gone");
  EXPECT_EQ(trace::dtype_from_torch(y.input_dtypes.at(0)), "int64");
}

TEST(TraceJsonTest, ADumpMissingAFieldIsRejectedNamingIt) {
  try {
    trace::parse_dump(R"({"version": "2.10", "rank": 0})", "dump.json");
    FAIL() << "parsed";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dump.json"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("pg_config"), std::string::npos) << e.what();
  }
}

TEST(FlightRecorderTest, BufferSizeComesFromTheEnvironment) {
  {
    ScopedEnv env("C10D_TRACE_BUFFER", nullptr);
    EXPECT_EQ(trace::buffer_from_env(), 2000u);
  }
  {
    ScopedEnv env("C10D_TRACE_BUFFER", "0");
    EXPECT_EQ(trace::make_ring(world(0, 1)), nullptr);
  }
  for (const char* bad : {"-1", "lots", "2000000"}) {
    ScopedEnv env("C10D_TRACE_BUFFER", bad);
    try {
      trace::buffer_from_env();
      FAIL() << bad;
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("C10D_TRACE_BUFFER"), std::string::npos) << e.what();
    }
  }
}

// An op that fails alone dumps once; the group's failure dumps once more, and nothing after.
TEST(FlightRecorderTest, FailuresDumpOncePerGroup) {
  test::TempDir dir;
  ScopedEnv env_dir("C10D_TRACE_DIR", dir.path().c_str());
  ScopedEnv env_buffer("C10D_TRACE_BUFFER", "4");
  auto ring = trace::make_ring({.name = "9", .desc = "world.9", .ranks = {7}, .rank = 0});
  ASSERT_NE(ring, nullptr);
  const auto file = dir.path() / "c10d_trace_rank_7.json";
  const auto dumped = [&] {
    const bool there = std::filesystem::exists(file);
    std::filesystem::remove(file);
    return there;
  };
  trace::op_failed(*ring, "mismatch");
  ASSERT_TRUE(dumped());
  trace::op_failed(*ring, "mismatch again");
  EXPECT_FALSE(dumped());
  trace::group_failed(*ring, "peer gone");
  ASSERT_TRUE(std::filesystem::exists(file));
  EXPECT_EQ(trace::read_dump(file.string()).reason, "group world.9 failed: peer gone");
  EXPECT_TRUE(dumped());
  trace::group_failed(*ring, "peer gone");
  trace::op_failed(*ring, "after");
  EXPECT_FALSE(dumped());
}

Tensor four_ones() { return Tensor::from_vector(std::vector<float>(4, 1.0f), DType::kFloat32); }

// Two thread ranks' groups over the in-process transport, with the recorder on; `first`: what
// each rank does first.
std::vector<std::shared_ptr<ProcessGroup>> two_ranks(
    Milliseconds timeout, const std::function<void(ProcessGroup&)>& first) {
  auto inproc = std::make_shared<transport::InProcWorld>(2);
  std::vector<std::shared_ptr<ProcessGroup>> groups(2);
  test::run_rank_threads(2, [&](int r) {
    groups[r] = make_transport_process_group(
        std::make_shared<transport::InProcTransport>(inproc, r), {.timeout = timeout});
    first(*groups[r]);
  });
  return groups;
}

// Two thread ranks: an abort dumps both ranks' rings before the pending op fails, and dump_traces
// writes them when asked.
TEST(FlightRecorderTest, AbortDumpsEveryRankOfTheProcess) {
  test::TempDir dir;
  ScopedEnv env_dir("C10D_TRACE_DIR", dir.path().c_str());
  ScopedEnv env_buffer("C10D_TRACE_BUFFER", "16");
  auto groups = two_ranks(30s, [](ProcessGroup& pg) { pg.all_reduce({four_ones()})->wait(30s); });
  // Rank 0 alone calls a second all_reduce and aborts while it waits for rank 1.
  auto pending = groups[0]->all_reduce({four_ones()});
  groups[0]->abort();
  EXPECT_THROW(pending->wait(30s), Error);
  for (int r = 0; r < 2; ++r) {
    const auto path = dir.path() / fmt::format("c10d_trace_rank_{}.json", r);
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const auto d = trace::read_dump(path.string());
    EXPECT_EQ(d.rank, r);
    EXPECT_NE(d.reason.find("group world failed"), std::string::npos) << d.reason;
    ASSERT_EQ(d.entries.size(), r == 0 ? 2u : 1u);
    EXPECT_EQ(d.entries[0].state, "completed");
    // The dump made at the failure shows the op it failed as failed, with the error.
    if (r == 0) {
      EXPECT_EQ(d.entries[1].state, "failed");
      EXPECT_NE(d.entries[1].error.find("abort"), std::string::npos) << d.entries[1].error;
    }
  }
  std::filesystem::remove_all(dir.path() / "again");
  const auto paths = dump_traces((dir.path() / "again").string());
  EXPECT_EQ(paths.size(), 2u);
  const auto again = trace::read_dump((dir.path() / "again" / "c10d_trace_rank_0.json").string());
  EXPECT_EQ(again.entries.at(1).state, "failed");
  EXPECT_NE(again.entries.at(1).error.find("aborted"), std::string::npos);
}

// An op that times out: the dump written when its group fails (before its Work fails) shows it
// failed, with the error its caller gets.
TEST(FlightRecorderTest, AnOpThatTimesOutIsDumpedFailedWithItsError) {
  test::TempDir dir;
  ScopedEnv env_dir("C10D_TRACE_DIR", dir.path().c_str());
  ScopedEnv env_buffer("C10D_TRACE_BUFFER", "16");
  auto groups = two_ranks(300ms, [](ProcessGroup&) {});
  std::string error;
  try {
    groups[0]->all_reduce({four_ones()})->wait(30s);  // rank 1 never calls it
  } catch (const Error& e) {
    error = e.what();
  }
  ASSERT_FALSE(error.empty());
  const auto d = trace::read_dump((dir.path() / "c10d_trace_rank_0.json").string());
  ASSERT_EQ(d.entries.size(), 1u);
  EXPECT_EQ(d.entries[0].state, "failed");
  EXPECT_EQ(d.entries[0].error, error);
  EXPECT_GT(d.entries[0].ended_ns, 0);
}

}  // namespace
}  // namespace c10d::inline v1::backends
