// ShmTransport with every rank a thread over a shared HashStore (one host, so every pair goes
// through shared memory): exact bytes in either order, FIFO per tag, interleaved tags, messages
// many times the ring's size (including one whose receive is posted while it is arriving), empty
// messages, size mismatches, the all-reduce algorithms, abort, deadlines, nothing left in
// /dev/shm after set-up, and ring sizes bounded (tests/fault/bounds_test.cc has the
// environment's). Receives from any source (any_source_cases.h): over shared memory alone, and
// over the TCP backend's routed transport with some peers on another "host" (host keys), so that
// one receive spans both channels.
#include "backends/gloo_like/shm_transport.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <functional>
#include <latch>
#include <thread>

#include "../algorithms/ranks.h"
#include "../transport/any_source_cases.h"
#include "backends/gloo_like/routed_transport.h"
#include "backends/gloo_like/tcp_transport.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "transport/shared_memory.h"
#include "transport_test_util.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;
using transport::Clock;

std::atomic<int> group_counter{0};

// The smallest ring, so that most messages here span it many times.
constexpr std::size_t kRing = std::size_t{64} << 10;

void run_ranks(int n, const std::function<void(int, transport::Transport&)>& fn,
               std::size_t ring = kRing) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "shm" + std::to_string(group_counter++);
  algorithms::testing::run_ranks(
      n,
      [&](int r) {
        auto t = std::make_unique<ShmTransport>(
            store, r, n,
            ShmTransportOptions{.group_name = group, .timeout = 20s, .ring_bytes = ring});
        EXPECT_EQ(t->same_host_peers(), n - 1);
        return t;
      },
      fn);
}

using c10d::testing::pattern;
using c10d::testing::soon;

void run_shm(int n, const std::function<void(int, transport::Transport&)>& fn) { run_ranks(n, fn); }
C10D_ANY_SOURCE_TESTS(ShmTransportAnySourceTest, run_shm)

// Rank r of the TCP backend's transport (routed_transport.h) of `n` ranks in `group`, on host
// "B" when `far`, else on host "A": a pair on one host talks through shared memory, others over
// TCP. Its shared-memory channel goes into `shm` when given.
std::unique_ptr<RoutedTransport> make_routed(const std::shared_ptr<Store>& store,
                                             const std::string& group, int r, int n, bool far,
                                             std::shared_ptr<ShmTransport>* shm_out = nullptr) {
  auto arrivals = std::make_shared<transport::ArrivalClock>();
  auto shm = std::make_shared<ShmTransport>(store, r, n,
                                            ShmTransportOptions{.group_name = group,
                                                                .timeout = 20s,
                                                                .ring_bytes = kRing,
                                                                .host_key = far ? "B" : "A",
                                                                .arrivals = arrivals});
  TCPTransportOptions options{"127.0.0.1", 20s};
  options.arrivals = arrivals;
  options.on_abort = [weak = std::weak_ptr(shm)](std::exception_ptr e) {
    if (auto s = weak.lock()) s->abort(std::move(e));
  };
  auto tcp = std::make_shared<TCPTransport>(store, r, n, group, options);
  if (shm_out != nullptr) *shm_out = shm;
  return std::make_unique<RoutedTransport>(std::move(shm), std::move(tcp));
}

// `n` such ranks, the ranks of `remote` on host "B"; each rank's shared-memory channel goes into
// `shms` (by rank) when given.
void run_routed(int n, const std::vector<int>& remote,
                const std::function<void(int, transport::Transport&)>& fn,
                std::vector<std::shared_ptr<ShmTransport>>* shms = nullptr) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "routed" + std::to_string(group_counter++);
  algorithms::testing::run_ranks(
      n,
      [&](int r) -> std::unique_ptr<transport::Transport> {
        const bool far = std::find(remote.begin(), remote.end(), r) != remote.end();
        return make_routed(store, group, r, n, far,
                           shms != nullptr ? &(*shms)[static_cast<std::size_t>(r)] : nullptr);
      },
      fn);
}

// Rank n-1 on another host: rank 0 hears rank 1 through shared memory and rank 2 over TCP.
void run_routed_last_far(int n, const std::function<void(int, transport::Transport&)>& fn) {
  run_routed(n, n > 2 ? std::vector<int>{n - 1} : std::vector<int>{}, fn);
}
// Rank 1 on another host: the other way round.
void run_routed_first_far(int n, const std::function<void(int, transport::Transport&)>& fn) {
  run_routed(n, n > 2 ? std::vector<int>{1} : std::vector<int>{}, fn);
}
C10D_ANY_SOURCE_TESTS(RoutedAnySourceTest, run_routed_last_far)
C10D_ANY_SOURCE_TESTS(RoutedAnySourceOtherWayTest, run_routed_first_far)

// Message headers carry their call (shm_layout.h): a small message, one that spans the ring
// several times, and one that goes single-copy; and over the routed transport's TCP channel.
TEST(ShmTransportTest, AMessageOfAnotherCallFailsItsReceiveNamingBothCallsBeforeSizes) {
  for (const std::size_t bytes :
       {std::size_t{32}, std::size_t{200} << 10, kDefaultSingleCopyMinBytes + 4096}) {
    SCOPED_TRACE(bytes);
    const auto checked = [&](int r, transport::Transport& t) {
      c10d::testing::expect_calls_checked(r, t, bytes);
    };
    run_shm(2, checked);
    run_routed(2, {1}, checked);
  }
}

// Over shared memory, and over the routed transport's TCP channel (its requests wrap TCP's).
TEST(ShmTransportTest, APendingReceiveTellsWhatItsRankLastHeardFromThePeer) {
  run_shm(2, c10d::testing::expect_heard_names_the_last_message);
  run_routed(2, {1}, c10d::testing::expect_heard_names_the_last_message);
}

// Same-host peers that sent and then closed: their messages wait in the rings although their
// TCP connections are gone (the TCP part gives up); a receive after those fails, naming the
// loss, within about the last look.
TEST(RoutedAnySourceTest, MessagesOfPeersThatClosedAreReceivedThenTheNextReceiveFails) {
  using c10d::testing::any_source::kTag;
  run_routed(3, {}, [](int r, transport::Transport& t) {
    if (r != 0) {
      t.isend(0, kTag, pattern(64, r))->wait(soon());
      return;  // a goodbye over TCP
    }
    std::this_thread::sleep_for(300ms);  // both goodbyes came; nobody read the rings yet
    std::vector<std::byte> a(64), b(64);
    auto first = t.irecv_any(kTag, a);
    auto second = t.irecv_any(kTag, b);
    first->wait(soon());
    second->wait(soon());
    EXPECT_EQ(first->source() + second->source(), 3);
    EXPECT_EQ(a, pattern(64, first->source()));
    EXPECT_EQ(b, pattern(64, second->source()));
    const auto start = Clock::now();
    EXPECT_THROW(t.irecv_any(kTag, a)->wait(soon()), NetworkError);
    EXPECT_LT(Clock::now() - start, 2s);
  });
}

// A request that goes over TCP tells its source as every transport's does (transport.h): an
// irecv its peer, and an any-source receive of a rank with no same-host peer (over TCP alone)
// its sender.
TEST(RoutedTransportTest, RequestsOverTcpTellTheirSource) {
  using c10d::testing::any_source::kTag;
  run_routed(3, {2}, [](int r, transport::Transport& t) {
    std::vector<std::byte> got(64);
    if (r == 0) {
      t.isend(2, kTag, pattern(64, 0))->wait(soon());
      auto recv = t.irecv(2, kTag, got);
      recv->wait(soon());
      EXPECT_EQ(recv->source(), 2);
      EXPECT_EQ(got, pattern(64, 2));
    } else if (r == 2) {
      auto any = t.irecv_any(kTag, got);
      any->wait(soon());
      EXPECT_EQ(any->source(), 0);
      EXPECT_EQ(got, pattern(64, 0));
      t.isend(0, kTag, pattern(64, 2))->wait(soon());
    }
  });
}

// Once one channel's part of an any-source receive completed it, with a message or an error,
// the other part leaves its channel at once, not when a message comes or the request goes: the
// shared-memory channel has nothing pending then (else every TCP wait of the rank polls it).
TEST(RoutedAnySourceTest, TheOtherPartLeavesOnceOnePartCompletedTheReceive) {
  using namespace c10d::testing::any_source;
  std::vector<std::shared_ptr<ShmTransport>> shms(3);
  run_routed(
      3, {2},
      [&](int r, transport::Transport& t) {
        std::vector<std::byte> got(64);
        if (r == 0) {
          auto any = t.irecv_any(kTag, got);
          signal(t, 2, kGo);
          any->wait(soon());
          EXPECT_EQ(any->source(), 2);
          EXPECT_FALSE(shms[0]->has_pending());
          any = t.irecv_any(kTag, got);
          signal(t, 2, kGo);  // a message of the wrong size: the TCP part fails the receive
          EXPECT_THROW(any->wait(soon()), InvalidArgument);
          EXPECT_FALSE(shms[0]->has_pending());
          signal(t, 1, kGo);
        } else if (r == 1) {
          await(t, 0, kGo);
        } else {
          await(t, 0, kGo);
          t.isend(0, kTag, pattern(64, 2))->wait(soon());
          await(t, 0, kGo);
          t.isend(0, kTag, pattern(32, 2))->wait(soon());
        }
      },
      &shms);
}

// CPU time the calling thread has used so far.
Clock::duration thread_cpu_time() {
  rusage u{};
  ::getrusage(RUSAGE_THREAD, &u);
  const auto tv = [](const timeval& t) {
    return std::chrono::seconds(t.tv_sec) + std::chrono::microseconds(t.tv_usec);
  };
  return tv(u.ru_utime) + tv(u.ru_stime);
}

// A thread waiting for a routed any-source receive that nothing arrives for sleeps (on the
// shared-memory doorbell, the io thread watching the TCP sockets for it): it uses a small part
// of the wall time, here with a core of its own, where a waiter polls hottest. And it still
// fails soon once no peer is left (their connections closed), naming the loss.
TEST(RoutedAnySourceTest, AWaitThatNothingArrivesForSleepsAndFailsOnceNoPeerIsLeft) {
  using namespace c10d::testing::any_source;
  run_routed(3, {2}, [&](int r, transport::Transport& t) {
    if (r != 0) {
      await(t, 0, kGo);
      return;  // closes its connections
    }
    std::vector<std::byte> got(64);
    auto any = t.irecv_any(kTag, got);
    const auto cpu = thread_cpu_time();
    const auto start = Clock::now();
    EXPECT_THROW(any->wait(start + 300ms), transport::PeerTimeout);
    const auto wall = Clock::now() - start;
    const auto used = thread_cpu_time() - cpu;
    EXPECT_LT(used, wall / 4) << "the wait used "
                              << std::chrono::duration<double, std::milli>(used).count()
                              << " ms of CPU in "
                              << std::chrono::duration<double, std::milli>(wall).count() << " ms";
    signal(t, 1, kGo);
    signal(t, 2, kGo);
    const auto gone = Clock::now();
    EXPECT_THROW(any->wait(soon()), NetworkError);
    EXPECT_LT(Clock::now() - gone, 2s);
  });
}

TEST(ShmTransportTest, SendBeforeRecvAndRecvBeforeSendDeliverExactBytes) {
  run_ranks(2, [](int r, transport::Transport& t) {
    const auto a = pattern(1000, 1);
    const auto b = pattern(300'001, 2);  // several rings' worth
    if (r == 0) {
      t.isend(1, 5, a)->wait(soon());
      std::vector<std::byte> got(b.size());
      t.irecv(1, 6, got)->wait(soon());
      EXPECT_EQ(got, b);
    } else {
      std::this_thread::sleep_for(50ms);  // rank 0's message is in the ring before the receive
      std::vector<std::byte> got(a.size());
      t.irecv(0, 5, got)->wait(soon());
      EXPECT_EQ(got, a);
      t.isend(0, 6, b)->wait(soon());
    }
  });
}

TEST(ShmTransportTest, FifoPerTagAndInterleavedTags) {
  run_ranks(2, [](int r, transport::Transport& t) {
    if (r == 0) {
      std::vector<std::unique_ptr<transport::Request>> reqs;
      const auto m1 = pattern(100, 1), m2 = pattern(200'000, 2), m3 = pattern(300, 3);
      reqs.push_back(t.isend(1, 7, m1));
      reqs.push_back(t.isend(1, 8, m2));
      reqs.push_back(t.isend(1, 7, m3));
      transport::wait_all(reqs, soon());
    } else {
      // Tag 8 first, though it was sent second: the tag-7 messages before it are kept aside.
      std::vector<std::byte> g2(200'000), g1(100), g3(300);
      t.irecv(0, 8, g2)->wait(soon());
      t.irecv(0, 7, g1)->wait(soon());
      t.irecv(0, 7, g3)->wait(soon());
      EXPECT_EQ(g1, pattern(100, 1));
      EXPECT_EQ(g2, pattern(200'000, 2));
      EXPECT_EQ(g3, pattern(300, 3));
    }
  });
}

TEST(ShmTransportTest, AReceivePostedWhileItsMessageArrivesTakesTheRestDirectly) {
  run_ranks(2, [](int r, transport::Transport& t) {
    const auto big = pattern((std::size_t{1} << 20) + 13, 4);
    if (r == 0) {
      t.isend(1, 1, big)->wait(soon());
      t.isend(1, 2, pattern(8, 5))->wait(soon());
    } else {
      std::vector<std::byte> small(8);
      auto other = t.irecv(0, 2, small);
      // Each test() reads what has arrived of the tag-1 message, which has no receive yet.
      for (int i = 0; i < 5; ++i) {
        EXPECT_FALSE(other->test());
        std::this_thread::sleep_for(2ms);
      }
      std::vector<std::byte> got(big.size());
      t.irecv(0, 1, got)->wait(soon());
      other->wait(soon());
      EXPECT_EQ(got, big);
      EXPECT_EQ(small, pattern(8, 5));
    }
  });
}

// Messages read before their receives are posted go into chunks of 1 MiB as they come out of
// the ring: sizes around the chunk size and 64 MiB, all unexpected, arrive exact.
TEST(ShmTransportTest, UnexpectedMessagesInChunksArriveExact) {
  const std::vector<std::size_t> sizes = {(1u << 20) - 1, 1u << 20, (1u << 20) + 1, (3u << 20) + 5,
                                          64u << 20};
  run_ranks(
      2,
      [&](int r, transport::Transport& t) {
        const int n = static_cast<int>(sizes.size());
        if (r == 0) {
          std::vector<std::unique_ptr<transport::Request>> reqs;
          std::vector<std::vector<std::byte>> msgs;
          for (int i = 0; i < n; ++i) msgs.push_back(pattern(sizes[i], 60 + i));
          const auto last = pattern(8, 7);
          for (int i = 0; i < n; ++i) reqs.push_back(t.isend(1, 10 + i, msgs[i]));
          reqs.push_back(t.isend(1, 99, last));
          transport::wait_all(reqs, soon());
        } else {
          // Waiting for the last message reads every one before it, none of them posted.
          std::vector<std::byte> last(8);
          t.irecv(0, 99, last)->wait(soon());
          EXPECT_EQ(last, pattern(8, 7));
          for (int i = 0; i < n; ++i) {
            std::vector<std::byte> got(sizes[i]);
            t.irecv(0, 10 + i, got)->wait(soon());
            EXPECT_TRUE(got == pattern(sizes[i], 60 + i)) << "message of " << sizes[i] << " bytes";
          }
        }
      },
      std::size_t{1} << 20);
}

TEST(ShmTransportTest, SixteenMebibytesBothWaysAndZeroBytes) {
  run_ranks(
      2,
      [](int r, transport::Transport& t) {
        const auto mine = pattern(16 << 20, r);
        std::vector<std::byte> theirs(mine.size());
        std::vector<std::unique_ptr<transport::Request>> reqs;
        reqs.push_back(t.irecv(1 - r, 3, theirs));
        reqs.push_back(t.isend(1 - r, 3, mine));
        reqs.push_back(t.isend(1 - r, 4, {}));
        std::vector<std::byte> none;
        reqs.push_back(t.irecv(1 - r, 4, none));
        transport::wait_all(reqs, soon());
        EXPECT_EQ(theirs, pattern(16 << 20, 1 - r));
      },
      std::size_t{1} << 20);
}

TEST(ShmTransportTest, SizeMismatchFailsTheReceiveNamingPeerTagAndSizesAndTheStreamGoesOn) {
  run_ranks(2, [](int r, transport::Transport& t) {
    if (r == 0) {
      t.isend(1, 9, pattern(100'000, 1))->wait(soon());
      t.isend(1, 9, pattern(64, 2))->wait(soon());
    } else {
      std::vector<std::byte> wrong(10);
      try {
        t.irecv(0, 9, wrong)->wait(soon());
        ADD_FAILURE() << "a 100000-byte message into a 10-byte receive must fail";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        EXPECT_NE(what.find("irecv from rank 0"), std::string::npos) << what;
        EXPECT_NE(what.find("100000 bytes"), std::string::npos) << what;
        EXPECT_NE(what.find("10"), std::string::npos) << what;
      }
      std::vector<std::byte> next(64);
      t.irecv(0, 9, next)->wait(soon());
      EXPECT_EQ(next, pattern(64, 2));
    }
  });
}

TEST(ShmTransportTest, RingAndHalvingDoublingAllReduceClosedForms) {
  // Segments of 64 KiB, the ring's size, so each one spans it.
  testing::expect_all_reduce_closed_forms([](int n, const auto& fn) { run_ranks(n, fn); }, 4,
                                          100'003, 16384);
}

TEST(ShmTransportTest, AbortFailsPendingAndLaterRequestsAndReleasesTheWaiter) {
  run_ranks(2, [](int r, transport::Transport& t) {
    if (r != 0) return;
    std::vector<std::byte> buf(16);
    auto pending = t.irecv(1, 1, buf);
    std::thread aborter([&] {
      std::this_thread::sleep_for(100ms);
      t.abort(std::make_exception_ptr(NetworkError("test abort")));
    });
    const auto start = Clock::now();
    EXPECT_THROW(pending->wait(soon()), NetworkError);
    EXPECT_LT(Clock::now() - start, 5s);
    aborter.join();
    EXPECT_THROW(t.isend(1, 2, buf)->wait(soon()), NetworkError);
  });
}

TEST(ShmTransportTest, AReceiveThatNeverComesTimesOutNamingIt) {
  run_ranks(2, [](int r, transport::Transport& t) {
    if (r != 1) return;
    std::vector<std::byte> buf(32);
    try {
      t.irecv(0, 77, buf)->wait(Clock::now() + 200ms);
      ADD_FAILURE() << "nothing was sent";
    } catch (const TimeoutError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("irecv from rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("32 bytes"), std::string::npos) << what;
    }
  });
}

// Only this process's segments count: other tests (and jobs) on the host make and remove their
// own at any time. One stands in for them here, made while the ranks set up.
TEST(ShmTransportTest, NoSegmentIsLeftInDevShmAfterSetUp) {
  const std::string mine = transport::own_segment_prefix("c10d-shm");
  const auto ours = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator("/dev/shm")) {
      const std::string name = e.path().filename().string();
      if (name.starts_with(mine)) names.push_back(name);
    }
    return names;
  };
  // Another live process's segment (this one's parent: alive, and not us).
  const std::string other = fmt::format("/c10d-shm-{}-{}", ::getppid(), "someone-else");
  std::latch set_up(3);
  run_ranks(3, [&](int r, transport::Transport&) {
    if (r == 0) {
      const int fd = ::shm_open(other.c_str(), O_CREAT | O_RDWR, 0600);
      if (fd >= 0) ::close(fd);
    }
    set_up.arrive_and_wait();  // every rank's constructor has returned
    const auto left = ours();
    EXPECT_TRUE(left.empty()) << left.front();
  });
  ::shm_unlink(other.c_str());
}

TEST(ShmTransportTest, RingSizeOptionAboveTheBoundIsRefused) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(2000));
  try {
    ShmTransport t(store, 0, 1,
                   ShmTransportOptions{.group_name = "huge", .ring_bytes = std::size_t{1} << 62});
    ADD_FAILURE() << "a ring of 2^62 bytes must be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("4611686018427387904"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("1073741824"), std::string::npos) << e.what();
  }
}

TEST(ShmTransportTest, RingSizesThatAreNotPowersOfTwoAreRefused) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(2000));
  try {
    ShmTransport t(store, 0, 1, ShmTransportOptions{.group_name = "bad", .ring_bytes = 100'000});
    ADD_FAILURE() << "a ring of 100000 bytes must be refused";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("100000"), std::string::npos) << e.what();
  }
}

// A receiver that closes the routed transport as soon as its receive of a single-copy message
// completed still owes the sender its acknowledgement (its ring was full): shared memory closes
// first and writes it, before the TCP side's close could abort it, so the send completes.
TEST(RoutedTransportTest, ClosingWritesTheAcknowledgementsItOwesFirst) {
  constexpr std::size_t kBytes = kDefaultSingleCopyMinBytes;
  constexpr std::size_t kFill = kRing - 64;  // one message header and this fill the ring
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "routed" + std::to_string(group_counter++);
  std::latch sent(1), received(1);
  test::run_rank_threads(2, [&](int r) {
    std::shared_ptr<ShmTransport> shm;  // held on: the routed transport must close it anyway
    auto t = make_routed(store, group, r, 2, false, &shm);
    c10d::testing::ack_owed_at_close(
        r, *t, kBytes, kFill, shm->single_copy_to(1 - r), [&] { t.reset(); }, sent, received);
  });
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
