// TCPTransport with every rank a thread over a shared HashStore: exact bytes either order, FIFO
// per tag, interleaved tags, large and empty messages, a ring, the all-reduce algorithms, a
// peer that goes away mid-wait, and receives from any source (any_source_cases.h; peers that
// close while one waits). The handshake and strangers: tcp_handshake_test.cc.
#include "backends/gloo_like/tcp_transport.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <latch>
#include <thread>

#include "../algorithms/ranks.h"
#include "../transport/any_source_cases.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "transport/stall_record.h"
#include "transport_test_util.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;
using transport::Clock;

std::atomic<int> group_counter{0};

// Runs fn(rank, transport) on n threads, each with its own TCPTransport of a fresh group.
void run_ranks(int n, const std::function<void(int, transport::Transport&)>& fn) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "g" + std::to_string(group_counter++);
  algorithms::testing::run_ranks(
      n,
      [&](int r) {
        return std::make_unique<TCPTransport>(store, r, n, group,
                                              TCPTransportOptions{"127.0.0.1", 20s});
      },
      fn);
}

using c10d::testing::open_sockets;
using c10d::testing::pattern;
using c10d::testing::soon;

C10D_ANY_SOURCE_TESTS(TCPTransportAnySourceTest, run_ranks)

// A peer that closed its transport does not fail an any-source receive while another may still
// send; once the last one closed, a pending one fails naming the loss, and so does a later one.
// (A rank that connects on first use knows of a peer that has connected to it: one that never
// did may still send, so every peer here first says hello.)
TEST(TCPTransportTest, AnySourceOutlivesAClosedPeerAndFailsWhenNoPeerIsLeft) {
  using c10d::testing::any_source::await;
  using c10d::testing::any_source::kGo;
  using c10d::testing::any_source::kSync;
  using c10d::testing::any_source::kTag;
  using c10d::testing::any_source::signal;
  run_ranks(3, [](int r, transport::Transport& t) {
    if (r != 0) signal(t, 0, kSync);
    if (r == 1) return;  // closes at once: a goodbye to the others
    if (r == 2) {
      await(t, 0, kGo);
      t.isend(0, kTag, pattern(8, 2))->wait(soon());
      return;  // the last peer of rank 0 closes
    }
    await(t, 1, kSync);
    await(t, 2, kSync);
    std::vector<std::byte> got(8);
    auto first = t.irecv_any(kTag, got);
    std::this_thread::sleep_for(200ms);  // rank 1's goodbye has come
    EXPECT_FALSE(first->test());
    signal(t, 2, kGo);
    first->wait(soon());
    EXPECT_EQ(first->source(), 2);
    EXPECT_EQ(got, pattern(8, 2));
    auto second = t.irecv_any(kTag, got);
    const auto start = Clock::now();
    try {
      second->wait(soon());
      ADD_FAILURE() << "no peer is left to send: the receive must fail";
    } catch (const NetworkError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("any-source"), std::string::npos) << what;
      EXPECT_NE(what.find("every peer"), std::string::npos) << what;
      EXPECT_NE(what.find("closed its transport"), std::string::npos) << what;
    }
    EXPECT_LT(Clock::now() - start, 5s);
    EXPECT_THROW(t.irecv_any(kTag, got)->wait(soon()), NetworkError);
  });
}

TEST(TCPTransportTest, SendBeforeRecvAndRecvBeforeSendDeliverExactBytes) {
  run_ranks(2, [](int r, transport::Transport& t) {
    const auto a = pattern(1000, 1);
    const auto b = pattern(777, 2);
    if (r == 0) {
      t.isend(1, 5, a)->wait(soon());
      std::vector<std::byte> got(b.size());
      t.irecv(1, 6, got)->wait(soon());  // posted long after rank 1's send, most likely
      EXPECT_EQ(got, b);
    } else {
      std::this_thread::sleep_for(50ms);  // rank 0's message arrives before this receive
      std::vector<std::byte> got(a.size());
      t.irecv(0, 5, got)->wait(soon());
      EXPECT_EQ(got, a);
      t.isend(0, 6, b)->wait(soon());
    }
  });
  run_ranks(2, [](int r, transport::Transport& t) {
    const auto a = pattern(4096, 3);
    if (r == 1) {
      std::vector<std::byte> got(a.size());
      auto req = t.irecv(0, 9, got);  // posted first
      req->wait(soon());
      EXPECT_EQ(got, a);
    } else {
      std::this_thread::sleep_for(50ms);
      t.isend(1, 9, a)->wait(soon());
    }
  });
}

// Frames carry their call (tcp_wire.h): small ones, and ones of 1 MiB that wait in the socket
// for their receive (parked) before they are read.
TEST(TCPTransportTest, AMessageOfAnotherCallFailsItsReceiveNamingBothCallsBeforeSizes) {
  for (const std::size_t bytes : {std::size_t{32}, std::size_t{1} << 20}) {
    SCOPED_TRACE(bytes);
    run_ranks(2, [&](int r, transport::Transport& t) {
      c10d::testing::expect_calls_checked(r, t, bytes);
    });
  }
}

TEST(TCPTransportTest, APendingReceiveTellsWhatItsRankLastHeardFromThePeer) {
  run_ranks(2, c10d::testing::expect_heard_names_the_last_message);
}

TEST(TCPTransportTest, FifoPerTagAndInterleavedTags) {
  run_ranks(2, [](int r, transport::Transport& t) {
    constexpr int kN = 20;
    if (r == 0) {
      std::vector<std::vector<std::byte>> msgs;
      for (int i = 0; i < 2 * kN; ++i) msgs.push_back(pattern(64 + i, i));
      std::vector<std::unique_ptr<transport::Request>> reqs;
      for (int i = 0; i < 2 * kN; ++i) reqs.push_back(t.isend(1, 100 + (i % 2), msgs[i]));
      transport::wait_all(reqs, soon());
    } else {
      std::vector<std::vector<std::byte>> got;
      std::vector<std::unique_ptr<transport::Request>> reqs;
      for (int i = 0; i < 2 * kN; ++i) got.emplace_back(64 + i);
      // Tag 101 first, then tag 100: tags do not block each other, each stays in order.
      for (int i = 1; i < 2 * kN; i += 2) reqs.push_back(t.irecv(0, 101, got[i]));
      std::this_thread::sleep_for(20ms);
      for (int i = 0; i < 2 * kN; i += 2) reqs.push_back(t.irecv(0, 100, got[i]));
      transport::wait_all(reqs, soon());
      for (int i = 0; i < 2 * kN; ++i) EXPECT_EQ(got[i], pattern(64 + i, i)) << i;
    }
  });
}

TEST(TCPTransportTest, SixteenMebibytesAndZeroBytes) {
  run_ranks(2, [](int r, transport::Transport& t) {
    const auto big = pattern(16u << 20, 9);
    if (r == 0) {
      auto s1 = t.isend(1, 1, big);
      auto s2 = t.isend(1, 2, std::span<const std::byte>{});
      s1->wait(soon());
      s2->wait(soon());
    } else {
      std::vector<std::byte> got(big.size());
      auto r2 = t.irecv(0, 2, std::span<std::byte>{});
      auto r1 = t.irecv(0, 1, got);
      r2->wait(soon());
      r1->wait(soon());
      EXPECT_TRUE(got == big);
    }
  });
}

// The reader takes up to 4 KiB from the socket at a time for headers and small payloads and
// reads larger remainders in place: frames of every size around that boundary, back to back,
// some parked (64 KiB and up), received in the order sent and in reverse.
TEST(TCPTransportTest, FramesAroundTheReadAheadSizeArriveExact) {
  const std::vector<std::size_t> sizes = {1,    4079, 4080,  4081,  4095, 4096,   4097,
                                          8191, 0,    12289, 70000, 3,    100000, 5};
  for (const bool reverse : {false, true}) {
    run_ranks(2, [&](int r, transport::Transport& t) {
      const int n = static_cast<int>(sizes.size());
      if (r == 0) {
        std::vector<std::vector<std::byte>> msgs;
        for (int i = 0; i < n; ++i) msgs.push_back(pattern(sizes[i], i));
        std::vector<std::unique_ptr<transport::Request>> reqs;
        for (int i = 0; i < n; ++i) reqs.push_back(t.isend(1, 200 + i, msgs[i]));
        transport::wait_all(reqs, soon());
      } else {
        std::this_thread::sleep_for(30ms);  // most frames are in the socket before any receive
        std::vector<std::vector<std::byte>> got;
        for (int i = 0; i < n; ++i) got.emplace_back(sizes[i]);
        for (int k = 0; k < n; ++k) {
          const int i = reverse ? n - 1 - k : k;
          t.irecv(0, 200 + i, got[i])->wait(soon());
          EXPECT_EQ(got[i], pattern(sizes[i], i)) << "message " << i << " of " << sizes[i];
        }
      }
    });
  }
}

// Messages whose irecv comes after the park grace are buffered in 1 MiB chunks as their bytes
// arrive: sizes around the chunk size, and 64 MiB, arrive exact, whether the irecv comes after
// the whole message (300 ms) or while it is still arriving (30 ms: it then takes it over).
TEST(TCPTransportTest, UnexpectedMessagesInChunksArriveExact) {
  const std::vector<std::size_t> sizes = {(1u << 20) - 1, 1u << 20, (1u << 20) + 1, (3u << 20) + 5,
                                          64u << 20};
  for (const auto delay : {300ms, 30ms}) {
    run_ranks(2, [&](int r, transport::Transport& t) {
      const int n = static_cast<int>(sizes.size());
      if (r == 0) {
        std::vector<std::vector<std::byte>> msgs;
        for (int i = 0; i < n; ++i) msgs.push_back(pattern(sizes[i], 40 + i));
        std::vector<std::unique_ptr<transport::Request>> reqs;
        for (int i = 0; i < n; ++i) reqs.push_back(t.isend(1, 300 + i, msgs[i]));
        transport::wait_all(reqs, soon());
      } else {
        std::this_thread::sleep_for(delay);
        for (int i = 0; i < n; ++i) {
          std::vector<std::byte> got(sizes[i]);
          t.irecv(0, 300 + i, got)->wait(soon());
          EXPECT_TRUE(got == pattern(sizes[i], 40 + i)) << "message of " << sizes[i] << " bytes";
        }
      }
    });
  }
}

// `times` round trips of 8 bytes between ranks 0 and 1 (tag 1), each waiter polling.
void ping_pong(int r, transport::Transport& t, int times) {
  std::vector<std::byte> b(8);
  for (int i = 0; i < times; ++i) {
    if (r == 0) {
      t.isend(1, 1, b)->wait(soon());
      t.irecv(1, 1, b)->wait(soon());
    } else {
      t.irecv(0, 1, b)->wait(soon());
      t.isend(0, 1, b)->wait(soon());
    }
  }
}

// A waiter that stops polling and sleeps gets its message when it comes, not at the io thread's
// next look at the socket (1-64 ms later). Once the io thread took a sleeper's message for a
// poller's, ping-pongs of sleeping waiters crawled at about 127 ms a round trip.
TEST(TCPTransportTest, ASleepingWaiterGetsItsMessageWhenItComes) {
  run_ranks(2, [](int r, transport::Transport& t) {
    std::vector<std::byte> b(8);
    // Polled traffic first: the io thread backs off from the socket while waiters poll it.
    ping_pong(r, t, 500);
    std::this_thread::sleep_for(100ms);  // nobody polls: the io thread looks and watches again
    // Each message comes 3 ms after its receiver began to wait, past its 1 ms of polling.
    const auto start = Clock::now();
    for (int i = 0; i < 80; ++i) {
      if (i % 2 == r) {
        std::this_thread::sleep_for(3ms);
        t.isend(1 - r, 2, b)->wait(soon());
      } else {
        t.irecv(1 - r, 2, b)->wait(soon());
      }
    }
    // About 0.3 s when each message is read as it comes; over 4 s when read at the looks.
    EXPECT_LT(Clock::now() - start, 2s) << "rank " << r;
  });
}

// A receive that sleeps while another thread polls the same peer gets its message when it comes
// after that thread stops polling, not at the io thread's next look (up to 64 ms later; 63-78 ms
// a round before the last poller to leave had the io thread watch for sleepers).
TEST(TCPTransportTest, ASleepingReceiveBesideAPollerGetsItsMessageWhenItComes) {
  std::atomic<Clock::rep> sent_at{0};
  std::atomic<Clock::rep> late{0};  // rounds 1.. (the first starts with the io thread watching)
  run_ranks(2, [&](int r, transport::Transport& t) {
    std::vector<std::byte> b(8);
    std::vector<std::byte> y(8);
    for (int round = 0; round < 6; ++round) {
      std::thread sleeper;
      if (r == 1) {
        sleeper = std::thread([&, round] {
          t.irecv(0, 5, y)->wait(soon());  // sleeps: its message comes after the polling below
          if (round > 0) late += Clock::now().time_since_epoch().count() - sent_at.load();
        });
      }
      ping_pong(r, t, 2000);  // polled traffic with the same peer meanwhile
      if (r == 0) {
        std::this_thread::sleep_for(20ms);
        sent_at = Clock::now().time_since_epoch().count();
        t.isend(1, 5, y)->wait(soon());
        t.irecv(1, 6, b)->wait(soon());
      } else {
        sleeper.join();
        t.isend(0, 6, b)->wait(soon());
      }
    }
  });
  // Microseconds when read as it comes; 60-80 ms a round when read at the io thread's looks.
  EXPECT_LT(std::chrono::nanoseconds(late.load()), 100ms);
}

TEST(TCPTransportTest, SizeMismatchFailsTheReceiveNamingPeerTagAndSizes) {
  run_ranks(2, [](int r, transport::Transport& t) {
    if (r == 0) {
      const auto a = pattern(10, 0);
      t.isend(1, 7, a)->wait(soon());
      t.isend(1, 8, a)->wait(soon());
    } else {
      std::vector<std::byte> got(12);
      try {
        t.irecv(0, 7, got)->wait(soon());
        ADD_FAILURE() << "no error";
      } catch (const InvalidArgument& e) {
        const std::string what = e.what();
        for (const char* s : {"rank 0", "12 bytes", "10 bytes", "seq 7"}) {
          EXPECT_NE(what.find(s), std::string::npos) << s << " in " << what;
        }
      }
      std::vector<std::byte> ok(10);
      t.irecv(0, 8, ok)->wait(soon());  // the connection still works
      EXPECT_EQ(ok, pattern(10, 0));
    }
  });
}

TEST(TCPTransportTest, EightRankRing) {
  const int n = 8;
  run_ranks(n, [&](int r, transport::Transport& t) {
    const auto mine = pattern(3000, r);
    std::vector<std::byte> got(mine.size());
    auto rr = t.irecv((r + n - 1) % n, 42, got);
    auto sr = t.isend((r + 1) % n, 42, mine);
    sr->wait(soon());
    rr->wait(soon());
    EXPECT_EQ(got, pattern(3000, (r + n - 1) % n));
  });
}

// Two connections per pair, one per direction: with every rank in this process, n ranks of an
// eager transport hold n(n-1) connections from set-up on, each with both its ends here. Each
// carries bytes one way only, so a ring both ways round still delivers.
TEST(TCPTransportTest, TwoConnectionsPerPairOnePerDirection) {
  const int n = 4;
  const int before = open_sockets();
  std::latch up(n);
  std::latch counted(1);
  int during = 0;
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  TCPTransportOptions eager{"127.0.0.1", 20s};
  eager.connect = TCPConnect::kEager;
  algorithms::testing::run_ranks(
      n, [&](int r) { return std::make_unique<TCPTransport>(store, r, n, "pairs", eager); },
      [&](int r, transport::Transport& t) {
        up.arrive_and_wait();
        if (r == 0) {
          during = open_sockets();
          counted.count_down();
        }
        counted.wait();
        const auto mine = pattern(100000, r);
        std::vector<std::byte> left(mine.size()), right(mine.size());
        auto from_left = t.irecv((r + n - 1) % n, 7, left);
        auto from_right = t.irecv((r + 1) % n, 7, right);
        auto to_right = t.isend((r + 1) % n, 7, mine);
        auto to_left = t.isend((r + n - 1) % n, 7, mine);
        for (auto* q : {&from_left, &from_right, &to_right, &to_left}) (*q)->wait(soon());
        EXPECT_EQ(left, pattern(100000, (r + n - 1) % n));
        EXPECT_EQ(right, pattern(100000, (r + 1) % n));
      });
  EXPECT_EQ(during - before, 2 * n * (n - 1));
}

// A rank keeps up to 2(n-1) sockets: a low soft limit on open files is raised as far as they
// and some headroom need (up to the hard limit), and a hard limit too low fails an eager setup at
// once naming both limits. A lazy one, which may never need them, goes on. In a child process,
// since a lowered hard limit cannot be raised again.
TEST(TCPTransportTest, TheOpenFileLimitIsRaisedOrNamed) {
  const auto child = [](rlim_t soft, rlim_t hard, TCPConnect mode) {
    const pid_t pid = ::fork();
    if (pid != 0) return pid;
    const rlimit low{soft, hard};
    if (::setrlimit(RLIMIT_NOFILE, &low) != 0) ::_exit(10);
    auto store = std::make_shared<HashStore>(std::chrono::milliseconds(200));
    try {
      // Rank 0 of 60 connects to no lower rank: it would wait to accept (or for the others'
      // addresses), so the short timeout ends the raised case, and only the open-file check can
      // end the other.
      TCPTransportOptions o{"127.0.0.1", 200ms};
      o.connect = mode;
      TCPTransport t(store, 0, 60, "limits", o);
      ::_exit(11);
    } catch (const NetworkError& e) {
      const std::string what = e.what();
      const bool named = what.find("RLIMIT_NOFILE") != std::string::npos &&
                         what.find("118 sockets") != std::string::npos &&
                         what.find("hard limit 100") != std::string::npos;
      ::_exit(named ? 20 : 12);
    } catch (const TimeoutError&) {
      rlimit now{};
      ::getrlimit(RLIMIT_NOFILE, &now);
      // The sockets and 256 files of headroom, or as many as the hard limit lets it have.
      ::_exit(now.rlim_cur == 118 + 256 ? 21 : now.rlim_cur == hard ? 22 : 13);
    } catch (...) {
      ::_exit(14);
    }
  };
  const auto status_of = [](pid_t pid) {
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  EXPECT_EQ(status_of(child(64, 100, TCPConnect::kEager)), 20)
      << "a hard limit of 100 fails naming the limits";
  EXPECT_EQ(status_of(child(64, 1000, TCPConnect::kEager)), 21)
      << "a soft limit of 64 is raised to 374";
  EXPECT_EQ(status_of(child(64, 1000, TCPConnect::kLazy)), 21)
      << "lazily too, a soft limit of 64 is raised to 374";
  EXPECT_EQ(status_of(child(64, 100, TCPConnect::kLazy)), 22)
      << "lazily, the soft limit is raised to the hard limit of 100, and set-up goes on";
}

TEST(TCPTransportTest, RingAndHalvingDoublingAllReduceClosedForms) {
  testing::expect_all_reduce_closed_forms(run_ranks, 5, 10007, 4096);
}

TEST(TCPTransportTest, APeerDestroyedMidWaitFailsThePendingReceiveNamingIt) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  std::string error = "no error";
  Clock::duration took{};
  std::thread rank0([&] {
    TCPTransport t(store, 0, 2, "dies", {"127.0.0.1", 20s});
    std::vector<std::byte> got(10);
    auto req = t.irecv(1, 1, got);
    const auto start = Clock::now();
    try {
      req->wait(soon());
    } catch (const NetworkError& e) {
      error = e.what();
    }
    took = Clock::now() - start;
    std::vector<std::byte> later(10);  // and later requests fail at once
    EXPECT_THROW(t.irecv(1, 2, later)->wait(soon()), NetworkError);
  });
  std::thread rank1([&] {
    TCPTransport t(store, 1, 2, "dies", {"127.0.0.1", 20s});
    std::this_thread::sleep_for(100ms);
  });
  rank0.join();
  rank1.join();
  EXPECT_NE(error.find("peer rank 1"), std::string::npos) << error;
  EXPECT_LT(took, 2s);
}

// The waits the ranks record in the store are read strictly: "2x" once passed as rank 2
// (std::stoi), sending the chain to a rank that waits for no one and blaming it. A record that
// is not one ends the chain at the rank that left it.
TEST(TCPTransportTest, AStallRecordThatNamesNoRankEndsTheChainThere) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  algorithms::testing::run_ranks(
      3,
      [&](int r) {
        return std::make_unique<TCPTransport>(store, r, 3, "forged",
                                              TCPTransportOptions{"127.0.0.1", 20s});
      },
      [&](int r, transport::Transport& t) {
        if (r != 0) return;
        // Rank 1's record as a stranger with the store wrote it (set-up attempt 1 of "forged").
        store->set("forged/stall/1/1", std::string_view("2x\nall_reduce #3"));
        const transport::StallReport report = t.find_stalled(1, "all_reduce #3", 300ms);
        EXPECT_EQ(report.suspect, 1);
        EXPECT_TRUE(report.chain.empty());
        // A well-formed one is followed, its text bounded and printable.
        store->set("forged/stall/1/1",
                   std::string_view("2\nall_reduce #3\x1b[2J" + std::string(1000, 'x')));
        const transport::StallReport followed = t.find_stalled(1, "all_reduce #3", 300ms);
        EXPECT_EQ(followed.suspect, 2);
        ASSERT_EQ(followed.chain.size(), 1u);
        EXPECT_EQ(followed.chain[0].doing.rfind("all_reduce #3?[2J", 0), 0u);
        EXPECT_EQ(followed.chain[0].doing.size(), transport::kMaxStallDoingBytes);
      });
}

TEST(TCPTransportTest, AbortFailsPendingRequestsAndReleasesWaiters) {
  run_ranks(2, [](int r, transport::Transport& t) {
    if (r == 1) return;
    std::vector<std::byte> got(10);
    auto req = t.irecv(1, 1, got);
    t.abort(std::make_exception_ptr(NetworkError("stop now")));
    EXPECT_THROW(req->wait(soon()), NetworkError);
  });
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like

namespace c10d::inline v1::gloo_like {
namespace {

TEST(TCPTransportTest, LocalAddressTowardsAHostIsTheInterfaceThatReachesIt) {
  EXPECT_EQ(local_address_towards("127.0.0.1"), "127.0.0.1");
  EXPECT_EQ(local_address_towards("localhost").rfind("127.", 0) == 0 ||
                local_address_towards("localhost") == "::1",
            true);
  EXPECT_EQ(local_address_towards("no-such-host.invalid"), "");
}

TEST(TCPTransportTest, AbortNoticeRoundTripsAndCutsLongMessages) {
  const auto frame = encode_abort_notice({3, "rank 0: connection to peer rank 3 lost"});
  ASSERT_GE(frame.size(), kFrameHeaderBytes + 4);
  EXPECT_EQ(get_le<std::uint64_t>(frame.data()), kAbortTag);
  EXPECT_EQ(get_le<std::uint64_t>(frame.data() + 8), frame.size() - kFrameHeaderBytes);
  const AbortNotice back = decode_abort_notice(std::span(frame).subspan(kFrameHeaderBytes));
  EXPECT_EQ(back.lost_rank, 3);
  EXPECT_EQ(back.message, "rank 0: connection to peer rank 3 lost");
  EXPECT_FALSE(back.stalled);
  // A rank that made no progress travels as -2 - rank.
  const auto stalled = encode_abort_notice({2, "rank 1: all_reduce #4 timed out", true});
  EXPECT_EQ(static_cast<std::int32_t>(get_le<std::uint32_t>(stalled.data() + kFrameHeaderBytes)),
            -4);
  const AbortNotice stalled_back =
      decode_abort_notice(std::span(stalled).subspan(kFrameHeaderBytes));
  EXPECT_EQ(stalled_back.lost_rank, 2);
  EXPECT_TRUE(stalled_back.stalled);
  const auto long_frame = encode_abort_notice({-1, std::string(10000, 'x')});
  EXPECT_EQ(long_frame.size(), kFrameHeaderBytes + 4 + kMaxAbortMessageBytes);
  EXPECT_EQ(decode_abort_notice(std::span(long_frame).subspan(kFrameHeaderBytes)).lost_rank, -1);
  EXPECT_EQ(decode_abort_notice(std::span(long_frame).subspan(kFrameHeaderBytes, 2)).message,
            "");  // short
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
