// OpRunner (backends/common/op_runner.h) by itself: a test driver stands in for a group, so each
// test pins one rule of the op lifecycle (order, who runs an op, deadlines, the failure latch,
// abort, stop, the records) without a transport.
#include "backends/common/op_runner.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "c10d/errors.h"
#include "core/work_control.h"

namespace c10d::inline v1::backends {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using State = OpRecord::State;

// An op of the test driver: what it does when started (by the worker or its waiter). Returns
// false to stay in flight (the driver's progress() then ends it when `done` is set).
struct TestOp : RunnerOp {
  TestOp(std::shared_ptr<Work> w, const OpRecord& r, Milliseconds timeout)
      : RunnerOp(*w, r, timeout), work(std::move(w)) {}
  std::shared_ptr<Work> work;
  std::function<bool(TestOp&)> body;
  Clock::time_point deadline;
  std::thread::id ran_on;
  std::atomic<bool> done{false};
};

class Runner : public OpRunner::Driver {
 public:
  explicit Runner(OpRunner::Options options = {}) {
    options.name = "test group";
    runner.emplace(*this, std::move(options));
    runner->start_worker();
  }
  ~Runner() override { runner->stop(std::make_exception_ptr(Error("test group destroyed"))); }

  // Queues a collective (or a point-to-point op) that runs `body`.
  std::shared_ptr<TestOp> submit(
      std::string_view name, std::function<bool(TestOp&)> body = [](TestOp&) { return true; },
      bool collective = true, Milliseconds timeout = 10s) {
    OpRecord record;
    record.op = name;
    record.collective = collective;
    auto op = runner->submit(record, [&](const OpRecord& r) {
      auto p = std::make_shared<TestOp>(std::make_shared<Work>(std::string(name), r.sequence), r,
                                        timeout);
      p->body = std::move(body);
      return p;
    });
    return std::static_pointer_cast<TestOp>(op);
  }

  std::vector<std::string> started() {
    std::lock_guard lock(mu);
    return order;
  }

  std::optional<OpRunner> runner;
  std::mutex mu;
  std::vector<std::string> order;             // GUARDED_BY(mu)
  std::list<std::shared_ptr<TestOp>> flying;  // the worker's
  std::atomic<int> failures_seen{0};

 private:
  // Runs `op` on this thread; true when it ended.
  bool run(TestOp& op, Clock::time_point deadline) {
    op.deadline = deadline;
    op.ran_on = std::this_thread::get_id();
    {
      std::lock_guard lock(mu);
      order.emplace_back(op.record().op);
    }
    return op.body(op);
  }

  std::shared_ptr<const core::WaitHook> make_wait_hook() override {
    return std::make_shared<const core::WaitHook>([this](Work& w, core::WaitClock& clock) {
      auto op = std::static_pointer_cast<TestOp>(runner->take_for_waiter(w, clock.timeout()));
      if (!op) return;
      const bool ended = run(*op, clock.deadline());
      runner->finished();
      if (ended) op->succeed();
    });
  }
  std::exception_ptr start(OpRunner::OpPtr p, Clock::time_point deadline) override {
    auto op = std::static_pointer_cast<TestOp>(std::move(p));
    if (!run(*op, deadline)) {
      flying.push_back(op);
      return nullptr;
    }
    runner->finished();
    op->succeed();
    return nullptr;
  }
  bool in_flight() const override { return !flying.empty(); }
  std::exception_ptr progress(bool& progressed) override {
    for (auto it = flying.begin(); it != flying.end();) {
      auto& op = **it;
      if (op.done) {
        if (op.collective()) runner->release();
        op.succeed();
        it = flying.erase(it);
        progressed = true;
      } else if (Clock::now() >= op.deadline) {
        return std::make_exception_ptr(
            TimeoutError(fmt::format("{} #{} timed out", op.record().op, op.record().sequence)));
      } else {
        ++it;
      }
    }
    return nullptr;
  }
  void drop_in_flight(const std::exception_ptr& error) override {
    for (auto& op : flying) op->fail(error);
    flying.clear();
  }
  void on_failure(const std::exception_ptr&) override { ++failures_seen; }
};

std::string error_of(const std::shared_ptr<TestOp>& op) {
  try {
    op->work->wait(10s);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "no error";
}

bool eventually(const std::function<bool()>& ready) {
  for (auto until = Clock::now() + 10s; Clock::now() < until; std::this_thread::sleep_for(1ms)) {
    if (ready()) return true;
  }
  return ready();
}

TEST(OpRunnerTest, OpsStartInIssueOrderAndCollectivesAndPointToPointCountApart) {
  Runner g({.inline_ops = false});
  std::vector<std::shared_ptr<TestOp>> ops;
  for (int i = 0; i < 20; ++i) {
    ops.push_back(g.submit(
        i % 3 == 0 ? "send" : "all_reduce", [](TestOp&) { return true; },
        /*collective=*/i % 3 != 0));
  }
  for (auto& op : ops) op->work->wait(10s);
  std::vector<std::string> want;
  for (auto& op : ops) want.emplace_back(op->record().op);
  EXPECT_EQ(g.started(), want);
  // Sequence numbers: 7 sends (0..6), 13 collectives (0..12), each in issue order.
  EXPECT_EQ(ops[0]->record().sequence, 0u);
  EXPECT_EQ(ops[1]->record().sequence, 0u);
  EXPECT_EQ(ops[2]->record().sequence, 1u);
  EXPECT_EQ(ops[3]->record().sequence, 1u);
  EXPECT_EQ(ops[19]->record().sequence, 12u);
}

// The worker leaves a collective to its waiter for InlineSchedule::kGrace (1 ms); a waiter
// descheduled longer on a loaded machine finds it taken, hence the tolerance.
int ran_inline(Runner& g, int ops, Milliseconds timeout) {
  int inline_runs = 0;
  for (int i = 0; i < ops; ++i) {
    auto op = g.submit(
        "all_reduce", [](TestOp&) { return true; }, true, timeout);
    op->work->wait(10s);
    inline_runs += op->ran_on == std::this_thread::get_id();
  }
  return inline_runs;
}

TEST(OpRunnerTest, AWaiterRunsItsCollectiveInlineWhenItIsNext) {
  Runner g({.inline_ops = true});
  EXPECT_GE(ran_inline(g, 50, 10s), 45);
}

TEST(OpRunnerTest, WithoutInlineOpsTheWorkerRunsThem) {
  Runner g({.inline_ops = false});
  auto op = g.submit("all_reduce");
  op->work->wait(10s);
  EXPECT_NE(op->ran_on, std::this_thread::get_id());
}

// A waiter whose wait is far shorter than the op's timeout leaves the op to the worker when the
// group cannot hand a running op over (Options::waiter_waits_long).
TEST(OpRunnerTest, AShortWaiterLeavesTheOpToTheWorkerWhenTheGroupAsks) {
  {
    Runner g({.inline_ops = true, .waiter_waits_long = true});
    auto op = g.submit(
        "all_reduce", [](TestOp&) { return true; }, true, 60s);
    op->work->wait(10s);
    EXPECT_NE(op->ran_on, std::this_thread::get_id());
  }
  Runner g({.inline_ops = true, .waiter_waits_long = true});
  EXPECT_GE(ran_inline(g, 20, 10s), 15);
}

TEST(OpRunnerTest, TheWorkerGivesAnOpItsTimeoutFromWhenItStarts) {
  Runner g({.inline_ops = false});
  const auto before = Clock::now();
  auto op = g.submit(
      "barrier", [](TestOp&) { return true; }, true, 2500ms);
  op->work->wait(10s);
  EXPECT_GE(op->deadline, before + 2500ms);
  EXPECT_LE(op->deadline, Clock::now() + 2500ms);
}

// An op in flight past its deadline fails with the driver's TimeoutError, which fails the
// group: later ops fail with that same error.
TEST(OpRunnerTest, AnOpPastItsDeadlineFailsWithTimeoutErrorAndFailsTheGroup) {
  Runner g({.inline_ops = false});
  auto slow = g.submit(
      "all_reduce", [](TestOp&) { return false; }, true, 100ms);
  const auto start = Clock::now();
  EXPECT_THROW(slow->work->wait(10s), TimeoutError);
  EXPECT_LT(Clock::now() - start, 5s);
  EXPECT_EQ(slow->record().state(), State::kFailed);
  auto later = g.submit("barrier");
  EXPECT_EQ(error_of(later), "all_reduce #0 timed out");
  EXPECT_EQ(g.failures_seen, 1);
}

// The first failure is latched: queued ops fail with it, later ones at once with it, and a
// second failure changes nothing.
TEST(OpRunnerTest, TheFirstFailureFailsQueuedAndLaterOpsWithThatError) {
  Runner g({.inline_ops = false});
  std::atomic<bool> release{false};
  auto blocker = g.submit("all_reduce", [&](TestOp&) {
    while (!release) std::this_thread::sleep_for(1ms);
    return true;
  });
  ASSERT_TRUE(eventually([&] { return g.started().size() == 1; }));
  auto queued = g.submit("broadcast");
  g.runner->fail(std::make_exception_ptr(NetworkError("peer rank 3 died")));
  g.runner->fail(std::make_exception_ptr(NetworkError("a second failure")));
  EXPECT_EQ(error_of(queued), "peer rank 3 died");
  EXPECT_EQ(queued->record().state(), State::kFailed);
  EXPECT_EQ(error_of(g.submit("barrier")), "peer rank 3 died");
  EXPECT_EQ(g.failures_seen, 1);
  release = true;
  blocker->work->wait(10s);  // it ran to its end: only the driver can stop what runs
  EXPECT_EQ(g.started().size(), 1u);
}

// abort (a failure) releases a thread waiting for an op in flight: the driver drops it.
TEST(OpRunnerTest, AbortWakesTheWaiterOfAnOpInFlight) {
  Runner g({.inline_ops = false});
  auto stuck = g.submit(
      "all_reduce", [](TestOp&) { return false; }, true, 60s);
  std::thread aborter([&] {
    std::this_thread::sleep_for(100ms);
    g.runner->fail(std::make_exception_ptr(Error("rank 0: group 0 was aborted")));
  });
  const auto start = Clock::now();
  EXPECT_EQ(error_of(stuck), "rank 0: group 0 was aborted");
  EXPECT_LT(Clock::now() - start, 5s);
  aborter.join();
}

// Without Options::serial a send starts beside the collective in flight; with it, after.
TEST(OpRunnerTest, PointToPointStartsBesideACollectiveUnlessSerial) {
  for (const bool serial : {false, true}) {
    Runner g({.inline_ops = false, .serial = serial});
    auto coll = g.submit("all_reduce", [](TestOp&) { return false; });
    auto send = g.submit(
        "send", [](TestOp&) { return true; }, /*collective=*/false);
    if (!serial) {
      send->work->wait(10s);  // the collective is still in flight
      EXPECT_FALSE(coll->work->is_completed());
      coll->done = true;
      coll->work->wait(10s);
    } else {
      std::this_thread::sleep_for(50ms);
      EXPECT_FALSE(send->work->is_completed()) << "a serial group started a send past a "
                                                  "collective in flight";
      coll->done = true;
      coll->work->wait(10s);
      send->work->wait(10s);
    }
  }
}

TEST(OpRunnerTest, StopFailsQueuedOpsWithItsReason) {
  auto g = std::make_unique<Runner>(OpRunner::Options{.inline_ops = false});
  std::atomic<bool> release{false};
  auto blocker = g->submit("all_reduce", [&](TestOp&) {
    while (!release) std::this_thread::sleep_for(1ms);
    return true;
  });
  ASSERT_TRUE(eventually([&] { return g->started().size() == 1; }));
  auto queued = g->submit("broadcast");
  std::thread stopper([&] { g.reset(); });
  EXPECT_EQ(error_of(queued), "test group destroyed");
  release = true;
  stopper.join();
  EXPECT_TRUE(blocker->work->is_success());
}

TEST(OpRunnerTest, RecordsMoveThroughTheirStatesWithTimes) {
  Runner g({.inline_ops = false, .stamp_times = true});
  std::atomic<bool> release{false};
  auto op = g.submit("all_reduce", [&](TestOp& self) {
    EXPECT_EQ(self.record().state(), State::kStarted);
    while (!release) std::this_thread::sleep_for(1ms);
    return true;
  });
  auto behind = g.submit("broadcast");
  EXPECT_EQ(behind->record().state(), State::kQueued);
  EXPECT_EQ(behind->record().op, "broadcast");
  EXPECT_EQ(behind->record().sequence, 1u);
  EXPECT_TRUE(behind->record().collective);
  release = true;
  op->work->wait(10s);
  behind->work->wait(10s);
  for (const auto& p : {op, behind}) {
    const OpRecord& r = p->record();
    EXPECT_EQ(r.state(), State::kCompleted);
    EXPECT_TRUE(r.timed);
    EXPECT_LE(r.queued, r.started);
    EXPECT_LE(r.started, r.ended);
    EXPECT_NE(r.queued, Clock::time_point{});
  }
  // Without stamp_times the times stay unread.
  Runner untimed({.inline_ops = false});
  auto quiet = untimed.submit("barrier");
  quiet->work->wait(10s);
  EXPECT_EQ(quiet->record().state(), State::kCompleted);
  EXPECT_EQ(quiet->record().ended, Clock::time_point{});
}

TEST(OpRunnerTest, ARecordKeepsWhatTheCallAskedFor) {
  const Tensor t = Tensor::empty({4}, DType::kFloat32);
  const OpRecord r = OpRecord::of("reduce", t, ReduceOp::kMax, 2, 4);
  EXPECT_EQ(r.op, "reduce");
  EXPECT_EQ(r.dtype, static_cast<std::uint8_t>(DType::kFloat32));
  EXPECT_EQ(r.reduce_op, static_cast<std::uint8_t>(ReduceOp::kMax));
  EXPECT_EQ(r.rank, 2);
  EXPECT_EQ(r.count, 4);
  EXPECT_TRUE(r.collective);
  const OpRecord p = OpRecord::point_to_point("send", t, 1, 4);
  EXPECT_FALSE(p.collective);
  EXPECT_EQ(p.rank, 1);
  EXPECT_EQ(p.reduce_op, OpRecord::kNone);
}

// A Work callback that throws on the worker fails the group with an error naming the thread.
TEST(OpRunnerTest, ACallbackThatThrowsOnTheWorkerFailsTheGroupNamingTheThread) {
  Runner g({.inline_ops = false});
  std::atomic<bool> release{false};
  auto op = g.submit("all_reduce", [&](TestOp&) {
    while (!release) std::this_thread::sleep_for(1ms);
    return true;
  });
  op->work->future()->add_callback([](Future&) { throw std::runtime_error("callback exploded"); });
  release = true;
  ASSERT_TRUE(eventually([&] { return g.runner->failure() != nullptr; }));
  const std::string what = error_of(g.submit("barrier"));
  EXPECT_NE(what.find("the worker thread of test group failed: callback exploded"),
            std::string::npos)
      << what;
}

}  // namespace
}  // namespace c10d::inline v1::backends
