// The TCP ProcessGroup with every rank a thread over real loopback sockets: the group behaviour
// the conformance suite does not cover (it checks values): peer loss fails every rank quickly,
// naming the lost rank; abort releases waiters; DETAIL fingerprints catch mismatched calls;
// timeouts; set-up failures; subgroups share the connections; point-to-point does not block
// collectives; the algorithm override is checked.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "../one_cpu.h"
#include "backends/gloo_like/tcp_transport.h"
#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/store.h"
#include "core/logging.h"
#include "transport/transport.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::atomic<int> group_counter{0};

// Runs fn(rank, group) on n threads; rethrows the first error.
void run_group(int n, const std::function<void(int, std::shared_ptr<ProcessGroup>&)>& fn,
               ProcessGroupTCPOptions options = {}) {
  auto store = std::make_shared<HashStore>(20s);
  options.group_name = "pg" + std::to_string(group_counter++);
  if (options.timeout == kDefaultTimeout) options.timeout = 20s;
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto pg = make_process_group_tcp(store, r, n, options);
        fn(r, pg);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

Tensor filled(std::int64_t n, float v) {
  return Tensor::from_vector(std::vector<float>(static_cast<std::size_t>(n), v), DType::kFloat32);
}

// The float32 elements of `t` at `at`.
std::vector<float> values_at(const Tensor& t, std::initializer_list<std::int64_t> at) {
  std::vector<float> out;
  for (const std::int64_t i : at) out.push_back(t.data<float>()[i]);
  return out;
}

template <typename E>
std::string error_of(const std::shared_ptr<Work>& work, Milliseconds timeout = 10s) {
  try {
    work->wait(timeout);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an error from " << work->op_name();
  return "";
}

TEST(ProcessGroupTCPTest, AllReduceBothAlgorithmsAndBackToBackOps) {
  run_group(3, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    EXPECT_EQ(pg->backend_name(), "tcp");
    std::vector<Tensor> ts;
    std::vector<std::shared_ptr<Work>> works;
    for (std::int64_t n : {1, 1000, 300000}) {  // 1.2 MB takes the ring
      ts.push_back(filled(n, static_cast<float>(r + 1)));
      works.push_back(pg->all_reduce({ts.back()}));
    }
    for (std::size_t i = 0; i < works.size(); ++i) {
      works[i]->wait(20s);
      EXPECT_EQ(works[i]->sequence(), i);
      const float* d = ts[i].data<float>();
      EXPECT_EQ(d[0], 6.0f);
      EXPECT_EQ(d[ts[i].numel() - 1], 6.0f);
    }
  });
}

TEST(ProcessGroupTCPTest, TwoRanksOnOneCpuTakeSingleCopyRingSegmentsForLargeRings) {
  // Ranks that take turns on one CPU wait microseconds for each shared-slot round, as ranks on
  // cores that share no cache wait for the line to cross: a large all_reduce's, all_gather's and
  // reduce_scatter's ring then moves single-copy segments (algorithms/choice.h: cores_apart),
  // and says so in a debug line.
  const test::OnOneCpu one_cpu;  // the rank threads inherit it
  const core::LogLevel level = core::log_level();
  core::set_log_level(core::LogLevel::kDebug);
  testing::internal::CaptureStderr();
  constexpr std::int64_t kCount = (12 << 20) / 4;  // 12 MiB of float32: the ring, and 3 segments
  constexpr std::int64_t kHalf = kCount / 2;
  run_group(2, [&](int r, std::shared_ptr<ProcessGroup>& pg) {
    Tensor t = filled(kCount, static_cast<float>(r + 1));
    t.data<float>()[kHalf] = static_cast<float>(10 * r);
    pg->all_reduce({t})->wait(20s);
    EXPECT_EQ(values_at(t, {0, kHalf, kCount - 1}), (std::vector<float>{3, 10, 3}));

    Tensor gathered = filled(kCount, 0.0f);
    pg->all_gather_into_tensor(gathered, filled(kHalf, static_cast<float>(r + 5)))->wait(20s);
    EXPECT_EQ(values_at(gathered, {0, kHalf - 1, kHalf, kCount - 1}),
              (std::vector<float>{5, 5, 6, 6}));

    Tensor mine = filled(kHalf, 0.0f);
    pg->reduce_scatter_tensor(mine, filled(kCount, static_cast<float>(r + 1)))->wait(20s);
    EXPECT_EQ(values_at(mine, {0, kHalf - 1}), (std::vector<float>{3, 3}));
  });
  const std::string log = testing::internal::GetCapturedStderr();
  core::set_log_level(level);
  for (const char* op : {"all_reduce #0", "all_gather #1", "reduce_scatter #2"}) {
    EXPECT_NE(log.find(fmt::format("{} of 12582912 bytes: a shared-slot round takes", op)),
              std::string::npos)
        << op << "\n"
        << log;
  }
  EXPECT_NE(log.find("single-copy segments"), std::string::npos) << log;
  EXPECT_EQ(log.find("ring segments through shared memory"), std::string::npos) << log;
}

TEST(ProcessGroupTCPTest, ForcedAlgorithmsGiveTheSameAnswerAndBadNamesAreRejected) {
  for (const char* algo : {"ring", "hd", "all_reduce=ring,broadcast=tree", "broadcast=chain"}) {
    ProcessGroupTCPOptions options;
    options.algo = algo;
    run_group(
        3,
        [](int r, std::shared_ptr<ProcessGroup>& pg) {
          auto t = filled(5000, static_cast<float>(r));
          pg->all_reduce({t})->wait(20s);
          EXPECT_EQ(t.data<float>()[4999], 3.0f);
          auto b = filled(70000, static_cast<float>(r));
          BroadcastOptions bo;
          bo.root = 2;
          pg->broadcast({b}, bo)->wait(20s);
          EXPECT_EQ(b.data<float>()[69999], 2.0f);
        },
        options);
  }
  ProcessGroupTCPOptions bad;
  bad.algo = "all_reduce=bogus";
  try {
    run_group(
        1, [](int, std::shared_ptr<ProcessGroup>&) {}, bad);
    FAIL() << "a bad algorithm name was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("bogus"), std::string::npos) << e.what();
  }
}

TEST(ProcessGroupTCPTest, BadArgumentsFailOnTheCallersThreadAndQueueNothing) {
  run_group(2, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    auto t = Tensor::from_vector(std::vector<std::int32_t>{1, 2}, DType::kInt32);
    AllreduceOptions avg;
    avg.reduce.op = ReduceOp::kAvg;
    EXPECT_THROW(pg->all_reduce({t}, avg), InvalidArgument);
    BroadcastOptions root;
    root.root = 5;
    EXPECT_THROW(pg->broadcast({t}, root), InvalidArgument);
    EXPECT_THROW(pg->send({t}, r), InvalidArgument);
    EXPECT_THROW(pg->all_gather({t}, t), InvalidArgument);  // one output for two ranks
    // The group still works, and the rejected calls took no sequence numbers on the wire.
    pg->all_reduce({t})->wait(20s);
    EXPECT_EQ(t.data<std::int32_t>()[1], 4);
  });
}

TEST(ProcessGroupTCPTest, LostPeerFailsEveryRanksPendingAndLaterOpsNamingIt) {
  std::barrier sync(3);
  run_group(3, [&](int r, std::shared_ptr<ProcessGroup>& pg) {
    auto t = filled(100000, 1.0f);
    pg->all_reduce({t})->wait(20s);
    sync.arrive_and_wait();
    if (r == 1) {
      pg->abort();  // closes its sockets without a goodbye: what the others see when it dies
      return;
    }
    const auto start = Clock::now();
    auto work = pg->all_reduce({t});
    const std::string message = error_of<NetworkError>(work);
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_NE(message.find("peer rank 1"), std::string::npos) << message;
    // Later ops fail at once with the same cause.
    const std::string later = error_of<NetworkError>(pg->barrier());
    EXPECT_NE(later.find("peer rank 1"), std::string::npos) << later;
  });
}

// A Work callback that throws runs on the thread that completes the op: on the worker it used
// to unwind the worker thread (std::terminate). Now the group fails with an error that says so,
// and later ops fail with it; the process lives. Rank 1 comes late, so the worker completes
// rank 0's op (a waiter would have run it inline).
TEST(ProcessGroupTCPTest, AWorkCallbackThatThrowsOnTheWorkerFailsTheGroupNotTheProcess) {
  ProcessGroupTCPOptions options;
  options.shared_memory = false;
  std::atomic<bool> called{false};
  run_group(
      2,
      [&](int r, std::shared_ptr<ProcessGroup>& pg) {
        auto t = filled(4, 1.0f);
        if (r == 1) {
          std::this_thread::sleep_for(200ms);
          pg->all_reduce({t})->wait(10s);
          return;
        }
        auto work = pg->all_reduce({t});
        work->future()->add_callback([&](Future&) {
          called = true;
          throw std::runtime_error("callback exploded");
        });
        for (auto until = Clock::now() + 10s; !called && Clock::now() < until;) {
          std::this_thread::sleep_for(5ms);
        }
        ASSERT_TRUE(called);
        EXPECT_TRUE(work->is_completed());
        const std::string what = error_of<Error>(pg->all_reduce({t}));
        EXPECT_NE(what.find("worker thread"), std::string::npos) << what;
        EXPECT_NE(what.find("callback exploded"), std::string::npos) << what;
      },
      options);
}

TEST(ProcessGroupTCPTest, AbortReleasesAWaiterBlockedOnAPeerThatNeverComes) {
  run_group(2, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    if (r == 1) {
      std::this_thread::sleep_for(300ms);
      return;  // never joins the all_reduce; destroys its group (goodbye) at the end
    }
    auto t = filled(10, 1.0f);
    auto work = pg->all_reduce({t});
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      pg->abort();
    });
    const auto start = Clock::now();
    EXPECT_THROW(work->wait(10s), Error);
    EXPECT_LT(Clock::now() - start, 5s);
    aborter.join();
    EXPECT_THROW(pg->barrier()->wait(1s), Error);
  });
}

TEST(ProcessGroupTCPTest, OpTimeoutFailsTheOpAndNamesIt) {
  run_group(2, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    if (r == 1) {
      std::this_thread::sleep_for(1500ms);
      return;
    }
    BarrierOptions opts;
    opts.timeout = 200ms;
    const auto start = Clock::now();
    const std::string message = error_of<TimeoutError>(pg->barrier(opts));
    EXPECT_LT(Clock::now() - start, 1500ms);
    EXPECT_NE(message.find("timed out"), std::string::npos) << message;
  });
}

// Rank 2 never joins the barrier. Rank 0's barrier times out waiting for it (the dissemination
// barrier's first round receives from rank 2), and says what it last heard from it; rank 1,
// whose own timeout is far off, fails at once through the abort, which names rank 2 as the rank
// that made no progress rather than rank 0, which gave up.
TEST(ProcessGroupTCPTest, TimedOutOpNamesTheRankItWaitedForToEveryRank) {
  run_group(3, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    pg->barrier()->wait(20s);
    if (r == 2) {
      std::this_thread::sleep_for(3s);
      return;
    }
    BarrierOptions opts;
    opts.timeout = r == 0 ? 300ms : 20000ms;
    const auto start = Clock::now();
    if (r == 0) {
      const std::string message = error_of<TimeoutError>(pg->barrier(opts));
      EXPECT_NE(message.find("rank 0: barrier #1 (group 0) timed out after 300 ms waiting for "
                             "rank 2 (last heard from it"),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("rank 2 made no progress"), std::string::npos) << message;
    } else {
      const std::string message = error_of<NetworkError>(pg->barrier(opts));
      EXPECT_NE(message.find("peer rank 2 made no progress (rank 0 reports"), std::string::npos)
          << message;
    }
    EXPECT_LT(Clock::now() - start, 2500ms);
  });
}

// C10D_INLINE is a flag, read strictly: anything but "0" used to mean on.
TEST(ProcessGroupTCPTest, AnInlineVariableThatIsNotAFlagIsRefusedNamingIt) {
  ::setenv("C10D_INLINE", "sometimes", 1);
  try {
    run_group(1, [](int, std::shared_ptr<ProcessGroup>&) { ADD_FAILURE() << "a group was made"; });
    ADD_FAILURE() << "C10D_INLINE=sometimes was taken";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("C10D_INLINE=sometimes"), std::string::npos) << e.what();
  }
  ::setenv("C10D_INLINE", "off", 1);
  EXPECT_NO_THROW(
      run_group(1, [](int, std::shared_ptr<ProcessGroup>& pg) { pg->barrier()->wait(20s); }));
  ::unsetenv("C10D_INLINE");
}

// An op that names no timeout gets the group's.
TEST(ProcessGroupTCPTest, AnOpWithoutATimeoutTakesTheGroups) {
  ProcessGroupTCPOptions options;
  options.timeout = 2000ms;
  run_group(
      2,
      [](int r, std::shared_ptr<ProcessGroup>& pg) {
        if (r == 1) {
          std::this_thread::sleep_for(6s);
          return;
        }
        const auto start = Clock::now();
        const std::string message = error_of<TimeoutError>(pg->barrier(), 20s);
        const auto took = Clock::now() - start;
        EXPECT_GE(took, 2000ms);
        EXPECT_LT(took, 6s);
        EXPECT_NE(message.find("timed out"), std::string::npos) << message;
      },
      options);
}

TEST(ProcessGroupTCPTest, DetailFingerprintsNameTheRanksAndBothCalls) {
  setenv("C10D_DEBUG", "DETAIL", 1);
  run_group(3, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    auto t = filled(8, 1.0f);
    pg->all_reduce({t})->wait(20s);  // agreeing calls pass
    std::shared_ptr<Work> work;
    if (r == 2) {
      BroadcastOptions bo;
      bo.root = 1;
      work = pg->broadcast({t}, bo);
    } else {
      work = pg->all_reduce({t});
    }
    const std::string message = error_of<InvalidArgument>(work);
    EXPECT_NE(message.find("rank 0 called all_reduce(float32, count 8, sum) #1"), std::string::npos)
        << message;
    EXPECT_NE(message.find("rank 2 called broadcast(float32, count 8, root 1) #1"),
              std::string::npos)
        << message;
    // Every rank failed the same op, so the sequence numbers agree and the group goes on.
    pg->all_reduce({t})->wait(20s);
  });
  unsetenv("C10D_DEBUG");
}

// Without C10D_DEBUG: small all_reduces of one host meet in shared slots, which compare the
// calls for free, so a rank with another size fails its op, and so does every other rank.
TEST(ProcessGroupTCPTest, SmallAllReducesOfDifferentSizesFailEveryRankNamingBothCalls) {
  run_group(3, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    auto agreed = filled(4, 1.0f);
    pg->all_reduce({agreed})->wait(20s);
    EXPECT_EQ(agreed.data<float>()[3], 3.0f);
    auto t = filled(r == 1 ? 2 : 4, 1.0f);
    const std::string message = error_of<InvalidArgument>(pg->all_reduce({t}));
    if (r == 1) {
      EXPECT_NE(message.find("rank 1: its all_reduce(float32, count 2, sum) #1 does not match "
                             "rank 0's all_reduce(float32, count 4, sum) #1"),
                std::string::npos)
          << message;
    } else {
      EXPECT_NE(message.find("rank " + std::to_string(r) +
                             ": its all_reduce(float32, count 4, sum) #1 does not match rank 1's "
                             "all_reduce(float32, count 2, sum) #1"),
                std::string::npos)
          << message;
    }
  });
}

TEST(ProcessGroupTCPTest, ABarrierMetByASmallAllReduceFailsBothNamingTheOtherCall) {
  run_group(2, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    pg->barrier()->wait(20s);  // agreeing barriers pass
    auto t = filled(4, 1.0f);
    const std::string message =
        error_of<InvalidArgument>(r == 0 ? pg->barrier() : pg->all_reduce({t}));
    const std::string want = r == 0 ? "rank 0: its barrier() #1 does not match rank 1's "
                                      "all_reduce(float32, count 4, sum) #1"
                                    : "rank 1: its all_reduce(float32, count 4, sum) #1 does "
                                      "not match rank 0's barrier() #1";
    EXPECT_NE(message.find(want), std::string::npos) << message;
  });
}

TEST(ProcessGroupTCPTest, SubgroupsShareConnectionsAndRunBesideTheParent) {
  run_group(4, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    auto odd = pg->new_group({3, 1});  // rank 3 becomes subgroup rank 0
    auto all = pg->new_group({0, 1, 2, 3});
    ASSERT_NE(all, nullptr);
    if (r % 2 == 0) {
      EXPECT_EQ(odd, nullptr);
    } else {
      ASSERT_NE(odd, nullptr);
      EXPECT_EQ(odd->size(), 2);
      EXPECT_EQ(odd->rank(), r == 3 ? 0 : 1);
    }
    auto parent_t = filled(1000, 1.0f);
    auto parent_work = pg->all_reduce({parent_t});
    auto all_t = filled(1000, static_cast<float>(r));
    auto all_work = all->all_reduce({all_t});
    if (odd) {
      auto t = filled(1000, static_cast<float>(r));
      BroadcastOptions bo;
      bo.root = 1;  // global rank 1
      odd->broadcast({t}, bo)->wait(20s);
      EXPECT_EQ(t.data<float>()[999], 1.0f);
    }
    parent_work->wait(20s);
    all_work->wait(20s);
    EXPECT_EQ(parent_t.data<float>()[0], 4.0f);
    EXPECT_EQ(all_t.data<float>()[0], 6.0f);
  });
}

// A subgroup destroyed as soon as its recv completes must not abort the transport it shares with
// its parent: the recv's Work completes on the completer thread, possibly before the worker that
// posted it has counted itself done. (It did abort it: the parent's next op failed with "group
// ... was destroyed with this op pending", seen in the thread-sanitized conformance suite.)
TEST(ProcessGroupTCPTest, ASubgroupDestroyedRightAfterItsRecvLeavesTheParentWorking) {
  run_group(2, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    for (int i = 0; i < 200; ++i) {
      {
        auto sub = pg->new_group({0, 1});
        auto t = filled(4, static_cast<float>(i));
        if (r == 0) {
          sub->send({t}, 1)->wait(20s);
        } else {
          sub->recv({t}, 0)->wait(20s);
          ASSERT_EQ(t.data<float>()[3], static_cast<float>(i));
        }
      }  // destroyed here, at once
      auto x = filled(2, 1.0f);
      pg->all_reduce({x})->wait(20s);
      ASSERT_EQ(x.data<float>()[1], 2.0f) << "iteration " << i;
    }
  });
}

// A receive whose message never comes times out naming the peer it waited for, the tag, and
// what this rank last heard from that peer (here the barrier before it); rank 1, which sent
// nothing and waits on, learns why rank 0 gave up from its abort notice.
TEST(ProcessGroupTCPTest, ATimedOutReceiveNamesThePeerAndTheTag) {
  run_group(2, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    pg->barrier()->wait(20s);
    if (r == 1) {
      auto x = filled(1, 1.0f);  // a receive sends nothing: rank 0 last heard the barrier
      const std::string message = error_of<NetworkError>(pg->recv({x}, 0), 20s);
      EXPECT_NE(message.find("peer rank 0 aborted (rank 0 reports: rank 0: recv #0 from rank 1 "
                             "(user tag 7, group 0) timed out"),
                std::string::npos)
          << message;
      return;
    }
    auto t = filled(4, 0.0f);
    SendRecvOptions opts;
    opts.tag = 7;
    opts.timeout = 300ms;
    try {
      pg->recv({t}, 1, opts)->wait(10s);
      ADD_FAILURE() << "the receive did not time out";
    } catch (const transport::PeerTimeout& e) {
      EXPECT_EQ(e.peer(), 1);
      EXPECT_TRUE(e.heard().known);
      const std::string message = e.what();
      EXPECT_NE(message.find("rank 0: recv #0 from rank 1 (user tag 7, group 0) timed out after "
                             "300 ms (last heard from it "),
                std::string::npos)
          << message;
      EXPECT_NE(message.find("a frame of barrier #0"), std::string::npos) << message;
    }
  });
}

TEST(ProcessGroupTCPTest, PendingRecvDoesNotBlockCollectivesAndTagsMatchOutOfOrder) {
  run_group(2, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    auto a = filled(4, 0.0f);
    auto b = filled(4, 0.0f);
    if (r == 0) {
      SendRecvOptions t2;
      t2.tag = 2;
      auto recv2 = pg->recv({b}, 1, t2);  // posted first, sent last
      SendRecvOptions t1;
      t1.tag = 1;
      auto recv1 = pg->recv({a}, 1, t1);
      auto x = filled(4, 1.0f);
      pg->all_reduce({x})->wait(20s);  // runs while both receives are pending
      EXPECT_EQ(x.data<float>()[0], 2.0f);
      recv1->wait(20s);
      recv2->wait(20s);
      EXPECT_EQ(a.data<float>()[0], 11.0f);
      EXPECT_EQ(b.data<float>()[0], 22.0f);
    } else {
      auto x = filled(4, 1.0f);
      pg->all_reduce({x})->wait(20s);
      SendRecvOptions t1;
      t1.tag = 1;
      pg->send({filled(4, 11.0f)}, 0, t1)->wait(20s);
      SendRecvOptions t2;
      t2.tag = 2;
      pg->send({filled(4, 22.0f)}, 0, t2)->wait(20s);
    }
  });
}

// recv_any_source with shared memory between the ranks (one host) and without (C10D_SHM=0):
// rank 0 takes each sender once and its Work names it; a subgroup's Work names the sender by its
// subgroup rank; recv's Work names its src; a collective's Work has no source.
TEST(ProcessGroupTCPTest, RecvAnySourceTakesEachSenderOnceAndNamesItWithAndWithoutSharedMemory) {
  for (const bool shm : {true, false}) {
    SCOPED_TRACE(shm ? "shared memory" : "C10D_SHM=0");
    if (!shm) ::setenv("C10D_SHM", "0", 1);
    run_group(4, [](int r, std::shared_ptr<ProcessGroup>& pg) {
      SendRecvOptions tag5;
      tag5.tag = 5;
      auto sub = pg->new_group({0, 2, 3});
      if (r != 0) {
        pg->send({filled(4, 10.0f * r)}, 0, tag5)->wait(20s);
        if (sub) sub->send({filled(2, 100.0f * r)}, 0, tag5)->wait(20s);
        SendRecvOptions tag6;
        tag6.tag = 6;
        pg->send({filled(1, 7.0f)}, 0, tag6)->wait(20s);
        pg->barrier()->wait(20s);
        return;
      }
      std::vector<Tensor> got;
      std::vector<std::shared_ptr<Work>> works;
      for (int i = 0; i < 3; ++i) {
        got.push_back(filled(4, -1.0f));
        works.push_back(pg->recv_any_source({got.back()}, tag5));
      }
      std::vector<int> seen;
      for (int i = 0; i < 3; ++i) {
        works[i]->wait(20s);
        const int from = works[i]->source_rank();
        seen.push_back(from);
        EXPECT_EQ(got[i].data<float>()[3], 10.0f * from) << "from rank " << from;
      }
      std::sort(seen.begin(), seen.end());
      EXPECT_EQ(seen, (std::vector<int>{1, 2, 3}));
      // In the subgroup {0, 2, 3}, parent ranks 2 and 3 are ranks 1 and 2.
      std::vector<int> sub_seen;
      for (int i = 0; i < 2; ++i) {
        auto t = filled(2, -1.0f);
        auto w = sub->recv_any_source({t}, tag5);
        w->wait(20s);
        sub_seen.push_back(w->source_rank());
        EXPECT_EQ(t.data<float>()[1], 100.0f * (w->source_rank() + 1));
      }
      std::sort(sub_seen.begin(), sub_seen.end());
      EXPECT_EQ(sub_seen, (std::vector<int>{1, 2}));
      SendRecvOptions tag6;
      tag6.tag = 6;
      for (int from = 1; from < 4; ++from) {
        auto t = filled(1, 0.0f);
        auto w = pg->recv({t}, from, tag6);
        w->wait(20s);
        EXPECT_EQ(w->source_rank(), from);
      }
      auto b = pg->barrier();
      b->wait(20s);
      try {
        (void)b->source_rank();
        ADD_FAILURE() << "a barrier has no source rank";
      } catch (const InvalidArgument& e) {
        EXPECT_NE(std::string(e.what()).find("barrier"), std::string::npos) << e.what();
      }
    });
    ::unsetenv("C10D_SHM");
  }
}

// Nobody sends: the recv_any_source fails at its timeout naming the op, the tag and that no
// rank sent; the other rank hears why from the abort that follows.
TEST(ProcessGroupTCPTest, ARecvAnySourceNobodyAnswersTimesOutNamingTheTag) {
  run_group(2, [](int r, std::shared_ptr<ProcessGroup>& pg) {
    pg->barrier()->wait(20s);
    if (r == 1) {
      auto x = filled(1, 1.0f);
      const std::string message = error_of<NetworkError>(pg->recv({x}, 0), 20s);
      EXPECT_NE(message.find("recv_any_source #0 (user tag 9, group 0) timed out"),
                std::string::npos)
          << message;
      return;
    }
    auto t = filled(4, 0.0f);
    SendRecvOptions opts;
    opts.tag = 9;
    opts.timeout = 300ms;
    try {
      pg->recv_any_source({t}, opts)->wait(10s);
      ADD_FAILURE() << "the receive did not time out";
    } catch (const transport::PeerTimeout& e) {
      EXPECT_EQ(e.peer(), -1);
      EXPECT_NE(std::string(e.what()).find("rank 0: recv_any_source #0 (user tag 9, group 0) "
                                           "timed out after 300 ms: no rank sent"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(ProcessGroupTCPTest, RanksListenAndConnectOverIPv6) {
  if (gloo_like::local_address_towards("::1") != "::1") GTEST_SKIP() << "no IPv6 loopback";
  ProcessGroupTCPOptions options;
  options.host = "::1";
  run_group(
      3,
      [](int r, std::shared_ptr<ProcessGroup>& pg) {
        auto t = filled(1000, static_cast<float>(r));
        pg->all_reduce({t})->wait(20s);
        EXPECT_EQ(t.data<float>()[999], 3.0f);
      },
      options);
}

// The same with shared memory off, so every byte crosses ::1 over TCP, large frames included.
TEST(ProcessGroupTCPTest, AllReduceMovesItsBytesOverIPv6TcpAlone) {
  if (gloo_like::local_address_towards("::1") != "::1") GTEST_SKIP() << "no IPv6 loopback";
  ProcessGroupTCPOptions options;
  options.host = "::1";
  options.shared_memory = false;
  run_group(
      3,
      [](int r, std::shared_ptr<ProcessGroup>& pg) {
        for (const std::int64_t n : {7, 1 << 20}) {
          auto t = filled(n, static_cast<float>(r + 1));
          pg->all_reduce({t})->wait(20s);
          EXPECT_EQ(t.data<float>()[0], 6.0f);
          EXPECT_EQ(t.data<float>()[n - 1], 6.0f);
        }
      },
      options);
}

// Runs `n` ranks on threads that meet through init_process_group over a fresh file:// store,
// each all-reducing ten ones, then calls after(rank, store path) on each; rethrows the first
// rank's error.
void run_file_init(int n, const std::string& name,
                   const std::function<void(int, const std::string&)>& after = {}) {
  const std::string path =
      ::testing::TempDir() + "/c10d_" + name + "_" + std::to_string(::getpid()) + "_store";
  std::remove(path.c_str());
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        InitOptions o;
        o.init_method = "file://" + path;
        o.rank = r;
        o.world_size = n;
        o.timeout = 20s;
        auto pg = init_process_group(o);
        auto t = filled(10, 1.0f);
        pg->all_reduce({t})->wait(20s);
        if (t.data<float>()[9] != static_cast<float>(n)) throw Error("wrong all_reduce result");
        if (after) after(r, path);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  std::remove(path.c_str());
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// Runs make_process_group_tcp on `n` threads over `store` (group "again"), rank 1 with a host
// that is no address when `rank1_fails`, rank 0 starting `rank0_late` after the others; every
// rank's error message ("" for none) and how long each took.
struct SetUpOutcome {
  std::vector<std::string> errors;
  std::vector<Clock::duration> took;
};
SetUpOutcome set_up_group(const std::shared_ptr<Store>& store, int n, bool rank1_fails,
                          Milliseconds rank0_late = Milliseconds(0)) {
  SetUpOutcome outcome{std::vector<std::string>(static_cast<std::size_t>(n)),
                       std::vector<Clock::duration>(static_cast<std::size_t>(n))};
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      if (r == 0) std::this_thread::sleep_for(rank0_late);
      const auto start = Clock::now();
      ProcessGroupTCPOptions options;
      options.group_name = "again";
      options.timeout = 30s;
      if (r == 1 && rank1_fails) options.host = "not-an-address";
      try {
        auto pg = make_process_group_tcp(store, r, n, options);
        pg->barrier()->wait(20s);
      } catch (const Error& e) {
        outcome.errors[static_cast<std::size_t>(r)] = e.what();
      }
      outcome.took[static_cast<std::size_t>(r)] = Clock::now() - start;
    });
  }
  for (auto& t : threads) t.join();
  return outcome;
}

// A rank that fails its set-up fails the others' within seconds, naming it and why, even the
// rank 0 that starts after the failure is recorded; a later group of the same name on the same
// store does not see that failure.
TEST(ProcessGroupTCPTest, SetUpFailureIsNamedToEveryRankAndNotToTheNextGroupOfTheName) {
  auto store = std::make_shared<HashStore>(30s);
  const SetUpOutcome failed = set_up_group(store, 3, /*rank1_fails=*/true, 1000ms);
  for (int r = 0; r < 3; ++r) {
    const std::string& message = failed.errors[static_cast<std::size_t>(r)];
    EXPECT_NE(message.find("not-an-address"), std::string::npos) << "rank " << r << ": " << message;
    EXPECT_LT(failed.took[static_cast<std::size_t>(r)], 10s) << "rank " << r;
    if (r != 1) {
      EXPECT_NE(message.find("failed on rank 1"), std::string::npos) << message;
    }
  }
  const SetUpOutcome again = set_up_group(store, 3, /*rank1_fails=*/false);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(again.errors[static_cast<std::size_t>(r)], "") << "rank " << r;
  }
}

// Two ranks fail their set-up, each for its own reason, rank 2 after rank 1 has recorded its
// failure: each reports its own reason (only an error that may be the echo of another rank's
// failure gives way to that record), and rank 0 names the first.
TEST(ProcessGroupTCPTest, ARankThatFailsForItsOwnReasonReportsItEvenAfterAnotherRecordedFirst) {
  auto store = std::make_shared<HashStore>(30s);
  const std::vector<std::string> hosts = {"", "bad-host-one", "bad-host-two"};
  std::vector<std::string> errors(hosts.size());
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r) {
    threads.emplace_back([&, r] {
      if (r == 2) std::this_thread::sleep_for(500ms);  // rank 1 has recorded by then
      ProcessGroupTCPOptions options;
      options.group_name = "own_reasons";
      options.timeout = 30s;
      options.shared_memory = false;  // rank 1 fails before it waits for anyone
      options.host = hosts[static_cast<std::size_t>(r)];
      try {
        make_process_group_tcp(store, r, 3, options);
        errors[static_cast<std::size_t>(r)] = "set up";
      } catch (const Error& e) {
        errors[static_cast<std::size_t>(r)] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_NE(errors[1].find("bad-host-one"), std::string::npos) << errors[1];
  EXPECT_NE(errors[2].find("bad-host-two"), std::string::npos) << errors[2];
  EXPECT_EQ(errors[2].find("failed on rank 1"), std::string::npos) << errors[2];
  EXPECT_NE(errors[0].find("failed on rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find("bad-host-one"), std::string::npos) << errors[0];
}

// A file:// rendezvous has no store host: C10D_HOST names the address each rank publishes.
TEST(ProcessGroupTCPTest, C10DHostIsTheAddressRanksPublish) {
  if (gloo_like::local_address_towards("::1") != "::1") GTEST_SKIP() << "no IPv6 loopback";
  ::setenv("C10D_HOST", "::1", 1);
  std::vector<std::string> published(2);
  try {
    run_file_init(2, "host", [&](int r, const std::string& path) {
      published[static_cast<std::size_t>(r)] =
          FileStore(path, 20s).get_string("default/addr/" + std::to_string(r));
    });
  } catch (...) {
    ::unsetenv("C10D_HOST");
    throw;
  }
  ::unsetenv("C10D_HOST");
  for (const auto& addr : published) {
    EXPECT_EQ(addr.substr(0, addr.rfind(':')), "::1") << addr;
  }
}

TEST(ProcessGroupTCPTest, InitProcessGroupOverAFileUrlAndUnknownBackendsRejected) {
  run_file_init(3, "init");
  InitOptions bad;
  bad.backend = "carrier-pigeon";
  EXPECT_THROW(init_process_group(bad), InvalidArgument);
}

}  // namespace
}  // namespace c10d::inline v1
