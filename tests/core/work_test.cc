#include "c10d/work.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "c10d/errors.h"

namespace c10d {
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
  w.finish();
  EXPECT_TRUE(w.is_success());
  w.wait(5ms);
}

TEST(WorkTest, FailedWorkReportsItsError) {
  Work w("broadcast", 2);
  w.finish_with_error(std::make_exception_ptr(NetworkError("rank 1 died")));
  EXPECT_TRUE(w.is_completed());
  EXPECT_FALSE(w.is_success());
  EXPECT_THROW(w.wait(), NetworkError);
  EXPECT_THROW(w.result(), NetworkError);
  EXPECT_NE(w.exception(), nullptr);
}

}  // namespace
}  // namespace c10d
