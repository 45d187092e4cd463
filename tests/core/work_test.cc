#include "c10d/work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "c10d/errors.h"
#include "core/work_control.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;

TEST(FutureTest, ValueIsSeenByWaiterOnAnotherThread) {
  auto f = std::make_shared<Future>();
  std::thread t([&] { f->mark_completed({Tensor::from_vector<float>({7}, DType::kFloat32)}); });
  f->wait(5000ms);
  t.join();
  ASSERT_EQ(f->value().size(), 1u);
  EXPECT_EQ(f->value()[0].data<float>()[0], 7.0f);
}

TEST(FutureTest, ErrorIsRethrownByWaitAndValue) {
  auto f = std::make_shared<Future>();
  f->set_error(std::make_exception_ptr(NetworkError("peer 3 went away")));
  EXPECT_TRUE(f->completed());
  EXPECT_TRUE(f->has_error());
  EXPECT_THROW(f->wait(), NetworkError);
  EXPECT_THROW(f->value(), NetworkError);
}

TEST(FutureTest, WaitTimesOutWithTimeoutError) {
  Future f;
  EXPECT_FALSE(f.wait_for(10ms));
  EXPECT_THROW(f.wait(10ms), TimeoutError);
  f.mark_completed();
  EXPECT_THROW(f.mark_completed(), InvalidArgument);
}

TEST(FutureTest, ThenChainsValuesAndPropagatesErrors) {
  auto f = std::make_shared<Future>();
  auto doubled = f->then([](Future& src) {
    Tensor t = src.value()[0].clone();
    t.data<int>()[0] *= 2;
    return std::vector<Tensor>{t};
  });
  auto failing = f->then([](Future&) -> std::vector<Tensor> { throw Unsupported("nope"); });
  f->mark_completed({Tensor::from_vector<int>({21}, DType::kInt32)});
  EXPECT_EQ(doubled->value()[0].data<int>()[0], 42);
  EXPECT_THROW(failing->wait(), Unsupported);

  auto g = std::make_shared<Future>();
  auto after = g->then([](Future&) { return std::vector<Tensor>{}; });
  g->set_error(std::make_exception_ptr(TimeoutError("late")));
  EXPECT_THROW(after->wait(), TimeoutError);
}

TEST(FutureTest, CallbackAddedAfterCompletionRunsAtOnce) {
  Future f;
  f.mark_completed();
  std::atomic<int> calls{0};
  f.add_callback([&](Future&) { ++calls; });
  EXPECT_EQ(calls, 1);
}

// Completion takes no lock unless a waiter sleeps or a callback is registered (work.h): a
// callback added while another thread completes must still run, exactly once.
TEST(FutureTest, CallbacksAddedDuringCompletionRunExactlyOnce) {
  constexpr int kRounds = 100000;
  std::vector<Future> futures(kRounds);
  std::vector<std::atomic<int>> calls(kRounds);
  // Lockstep: each round the adder says it is ready, then both threads go at once.
  std::atomic<int> ready{-1}, go{-1};
  std::thread adder([&] {
    for (int round = 0; round < kRounds; ++round) {
      ready.store(round, std::memory_order_release);
      while (go.load(std::memory_order_acquire) < round) std::this_thread::yield();
      futures[round].add_callback([&calls, round](Future&) { ++calls[round]; });
    }
  });
  for (int round = 0; round < kRounds; ++round) {
    while (ready.load(std::memory_order_acquire) < round) std::this_thread::yield();
    go.store(round, std::memory_order_release);
    futures[round].mark_completed();
  }
  adder.join();
  int lost = 0, twice = 0;
  for (const auto& c : calls) {
    lost += c == 0;
    twice += c > 1;
  }
  EXPECT_EQ(lost, 0);
  EXPECT_EQ(twice, 0);
}

// A waiter that stopped polling and sleeps must be woken by a completion that comes just then
// (a lost wake-up would keep it until its 2 s deadline).
TEST(FutureTest, ASleepingWaiterWakesWhenTheFutureCompletes) {
  for (int round = 0; round < 200; ++round) {
    Future f;
    std::thread completer([&] {
      // Around the end of the waiter's polling window (50 µs, core/spin_wait.h).
      std::this_thread::sleep_for(std::chrono::microseconds(round % 100));
      f.mark_completed();
    });
    const auto start = std::chrono::steady_clock::now();
    const bool done = f.wait_for(2000ms);
    const auto waited = std::chrono::steady_clock::now() - start;
    completer.join();
    ASSERT_TRUE(done) << "round " << round;
    ASSERT_LT(waited, 1000ms) << "round " << round;
  }
}

TEST(WorkTest, WaitTimeoutNamesTheOp) {
  Work w("all_reduce", 17);
  try {
    w.wait(5ms);
    FAIL();
  } catch (const TimeoutError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("all_reduce"), std::string::npos);
    EXPECT_NE(msg.find("17"), std::string::npos);
  }
  core::WorkControl::finish(w);
  EXPECT_TRUE(w.is_success());
  w.wait(5ms);
}

TEST(WorkTest, FailedWorkReportsItsError) {
  Work w("broadcast", 2);
  core::WorkControl::fail(w, std::make_exception_ptr(NetworkError("rank 1 died")));
  EXPECT_TRUE(w.is_completed());
  EXPECT_FALSE(w.is_success());
  EXPECT_THROW(w.wait(), NetworkError);
  EXPECT_THROW(w.result(), NetworkError);
  EXPECT_NE(w.exception(), nullptr);
}

}  // namespace
}  // namespace c10d::inline v1
