// Any-source receives (Transport::irecv_any, transport.h) as every transport must do them, one
// function per behaviour, each run by the transports' own tests over their RunRanks (in-process,
// TCP, shared memory, TCP and shared memory routed, ICI):
//   posted before / after its message arrives; two senders; order beside receives from a peer
//   on the same tag (each way round); the earliest-arrived message first; a size mismatch named;
//   a timeout that names the tag, after which the receive still completes; abort.
// Ranks meet through messages on other tags (kGo, kSync), never sleeps alone, so that "arrived
// before" means it: a rank has read a message once it has received one sent after it.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <functional>
#include <latch>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "c10d/errors.h"
#include "transport/transport.h"

namespace c10d::inline v1::testing {

// Runs fn(rank, transport) on `n` ranks of the transport under test.
using RunRanks =
    std::function<void(int n, const std::function<void(int, transport::Transport&)>& fn)>;

namespace any_source {

inline constexpr transport::Tag kTag = transport::user_tag(0, 7);
inline constexpr transport::Tag kGo = transport::user_tag(0, 8);
inline constexpr transport::Tag kSync = transport::user_tag(0, 9);

inline transport::Clock::time_point later() {
  return transport::Clock::now() + std::chrono::seconds(20);
}

// Rank `r`'s payload: `n` bytes that differ per rank and per message.
inline std::vector<std::byte> payload(int r, int message = 0, std::size_t n = 300) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((r * 37 + message * 11 + i) & 0xff);
  return v;
}

// A zero-byte message on `tag` from `from` to `to`, both waiting for it.
inline void signal(transport::Transport& t, int to, transport::Tag tag) {
  t.isend(to, tag, {})->wait(later());
}
inline void await(transport::Transport& t, int from, transport::Tag tag) {
  t.irecv(from, tag, {})->wait(later());
}

// Rank 0's any-source receive is posted, and waited on, before rank 1 sends.
inline void posted_before_its_message(const RunRanks& run) {
  run(2, [](int r, transport::Transport& t) {
    if (r == 0) {
      std::vector<std::byte> got(300);
      auto req = t.irecv_any(kTag, got);
      EXPECT_EQ(req->source(), -1);  // not completed yet
      signal(t, 1, kGo);
      req->wait(later());
      EXPECT_EQ(req->source(), 1);
      EXPECT_EQ(got, payload(1));
    } else {
      await(t, 0, kGo);
      const auto data = payload(1);
      t.isend(0, kTag, data)->wait(later());
    }
  });
}

// Rank 1's message has arrived (rank 0 read a later one) when the any-source receive is posted.
inline void posted_after_its_message(const RunRanks& run) {
  run(2, [](int r, transport::Transport& t) {
    if (r == 0) {
      await(t, 1, kSync);
      std::vector<std::byte> got(300);
      auto req = t.irecv_any(kTag, got);
      req->wait(later());
      EXPECT_EQ(req->source(), 1);
      EXPECT_EQ(got, payload(1));
    } else {
      const auto message_data = payload(1);
      auto message = t.isend(0, kTag, message_data);
      signal(t, 0, kSync);
      message->wait(later());
    }
  });
}

// Ranks 1..n-1 each send one message; rank 0's n-1 any-source receives get each exactly once.
inline void every_sender_once(const RunRanks& run, int n = 3) {
  run(n, [n](int r, transport::Transport& t) {
    if (r != 0) {
      const auto data = payload(r);
      t.isend(0, kTag, data)->wait(later());
      return;
    }
    std::vector<std::vector<std::byte>> got(n - 1, std::vector<std::byte>(300));
    std::vector<std::unique_ptr<transport::Request>> reqs;
    for (auto& g : got) reqs.push_back(t.irecv_any(kTag, g));
    std::map<int, int> seen;
    for (std::size_t i = 0; i < reqs.size(); ++i) {
      reqs[i]->wait(later());
      const int from = reqs[i]->source();
      ASSERT_GE(from, 1);
      ASSERT_LT(from, n);
      ++seen[from];
      EXPECT_EQ(got[i], payload(from)) << "from rank " << from;
    }
    EXPECT_EQ(static_cast<int>(seen.size()), n - 1);
  });
}

// On one tag, rank 1's messages go to rank 0's receives in posting order, any-source or from
// rank 1 alike: posted before the messages come, and after they arrived.
inline void in_order_beside_receives_from_the_peer(const RunRanks& run) {
  for (const bool any_first : {true, false}) {
    for (const bool arrived_first : {false, true}) {
      run(2, [&](int r, transport::Transport& t) {
        if (r == 1) {
          if (!arrived_first) await(t, 0, kGo);
          const auto m0_data = payload(1, 0);
          auto m0 = t.isend(0, kTag, m0_data);
          const auto m1_data = payload(1, 1);
          auto m1 = t.isend(0, kTag, m1_data);
          if (arrived_first) signal(t, 0, kSync);
          m0->wait(later());
          m1->wait(later());
          return;
        }
        if (arrived_first) await(t, 1, kSync);
        std::vector<std::byte> a(300), b(300);
        std::unique_ptr<transport::Request> any, from1;
        if (any_first) {
          any = t.irecv_any(kTag, a);
          from1 = t.irecv(1, kTag, b);
        } else {
          from1 = t.irecv(1, kTag, b);
          any = t.irecv_any(kTag, a);
        }
        if (!arrived_first) signal(t, 1, kGo);
        any->wait(later());
        from1->wait(later());
        EXPECT_EQ(any->source(), 1);
        EXPECT_EQ(from1->source(), 1);
        EXPECT_EQ(a, payload(1, any_first ? 0 : 1)) << "any first " << any_first;
        EXPECT_EQ(b, payload(1, any_first ? 1 : 0)) << "any first " << any_first;
      });
    }
  }
}

// Rank 2's message arrived before rank 1's: an any-source receive posted after both takes rank
// 2's, the next one rank 1's.
inline void the_earliest_arrived_first(const RunRanks& run) {
  run(3, [](int r, transport::Transport& t) {
    if (r == 0) {
      await(t, 2, kSync);  // rank 2's message came before this
      signal(t, 1, kGo);
      await(t, 1, kSync);
      std::vector<std::byte> a(300), b(300);
      auto first = t.irecv_any(kTag, a);
      auto second = t.irecv_any(kTag, b);
      first->wait(later());
      second->wait(later());
      EXPECT_EQ(first->source(), 2);
      EXPECT_EQ(a, payload(2));
      EXPECT_EQ(second->source(), 1);
      EXPECT_EQ(b, payload(1));
      return;
    }
    if (r == 1) await(t, 0, kGo);
    const auto message_data = payload(r);
    auto message = t.isend(0, kTag, message_data);
    signal(t, 0, kSync);
    message->wait(later());
  });
}

// A message of several MiB (many times a shared-memory ring, parked in a TCP socket first),
// to an any-source receive posted before it comes and after it arrived.
inline void a_large_message_either_way(const RunRanks& run) {
  constexpr std::size_t kBytes = (3 << 20) + 5;
  run(2, [](int r, transport::Transport& t) {
    if (r == 1) {
      await(t, 0, kGo);
      const auto first_data = payload(1, 0, kBytes);
      auto first = t.isend(0, kTag, first_data);
      const auto second_data = payload(1, 1, kBytes);
      auto second = t.isend(0, kTag, second_data);
      signal(t, 0, kSync);
      first->wait(later());
      second->wait(later());
      return;
    }
    std::vector<std::byte> a(kBytes), b(kBytes);
    auto before = t.irecv_any(kTag, a);
    signal(t, 1, kGo);
    await(t, 1, kSync);  // the second message arrived
    auto after = t.irecv_any(kTag, b);
    before->wait(later());
    after->wait(later());
    EXPECT_EQ(before->source(), 1);
    EXPECT_EQ(after->source(), 1);
    EXPECT_TRUE(a == payload(1, 0, kBytes));
    EXPECT_TRUE(b == payload(1, 1, kBytes));
  });
}

// A message whose size differs fails the any-source receive with InvalidArgument naming the
// sender; the next message is received as usual.
inline void a_size_mismatch_names_the_sender(const RunRanks& run) {
  run(2, [](int r, transport::Transport& t) {
    if (r == 1) {
      const auto big_data = payload(1, 0, 1000);
      auto big = t.isend(0, kTag, big_data);
      const auto next_data = payload(1, 1);
      auto next = t.isend(0, kTag, next_data);
      try {
        big->wait(later());
      } catch (const InvalidArgument&) {  // where the transport tells the sender too
      }
      next->wait(later());
      return;
    }
    std::vector<std::byte> small(10);
    try {
      t.irecv_any(kTag, small)->wait(later());
      ADD_FAILURE() << "a 1000-byte message into a 10-byte any-source receive must fail";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
      EXPECT_NE(what.find("1000"), std::string::npos) << what;
      EXPECT_NE(what.find("any rank"), std::string::npos) << what;
    }
    std::vector<std::byte> got(300);
    auto req = t.irecv_any(kTag, got);
    req->wait(later());
    EXPECT_EQ(req->source(), 1);
    EXPECT_EQ(got, payload(1, 1));
  });
}

// Nobody sends: wait() throws a PeerTimeout naming the tag, peer() -1, and the receive stays
// posted: it completes when rank 1 sends after all.
inline void a_timeout_names_the_tag_and_the_receive_goes_on(const RunRanks& run) {
  run(2, [](int r, transport::Transport& t) {
    if (r == 1) {
      await(t, 0, kGo);
      const auto data = payload(1);
      t.isend(0, kTag, data)->wait(later());
      return;
    }
    std::vector<std::byte> got(300);
    auto req = t.irecv_any(kTag, got);
    const auto start = transport::Clock::now();
    try {
      req->wait(start + std::chrono::milliseconds(100));
      ADD_FAILURE() << "nobody sent: the wait must time out";
    } catch (const transport::PeerTimeout& e) {
      const std::string what = e.what();
      EXPECT_EQ(e.peer(), -1);
      EXPECT_NE(what.find(transport::tag_string(kTag)), std::string::npos) << what;
      EXPECT_NE(what.find("no rank sent"), std::string::npos) << what;
      EXPECT_LT(transport::Clock::now() - start, std::chrono::seconds(5));
    }
    EXPECT_FALSE(req->test());
    signal(t, 1, kGo);
    req->wait(later());
    EXPECT_EQ(req->source(), 1);
    EXPECT_EQ(got, payload(1));
  });
}

// abort() fails a pending any-source receive with its reason and releases its waiter, and a
// later one at once.
inline void abort_fails_it(const RunRanks& run) {
  // Rank 1 stays until rank 0 is done: a peer that closed first could fail the receive itself.
  std::latch done(1);
  run(2, [&](int r, transport::Transport& t) {
    if (r == 1) {
      done.wait();
      return;
    }
    struct CountDown {
      std::latch& l;
      ~CountDown() { l.count_down(); }
    } count_down{done};
    std::vector<std::byte> got(300);
    auto req = t.irecv_any(kTag, got);
    std::thread aborter([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      t.abort(std::make_exception_ptr(NetworkError("test abort of rank 0")));
    });
    const auto start = transport::Clock::now();
    try {
      req->wait(later());
      ADD_FAILURE() << "the abort must fail the pending any-source receive";
    } catch (const NetworkError& e) {
      EXPECT_NE(std::string(e.what()).find("test abort of rank 0"), std::string::npos) << e.what();
    }
    EXPECT_LT(transport::Clock::now() - start, std::chrono::seconds(5));
    aborter.join();
    EXPECT_THROW(t.irecv_any(kTag, got)->wait(later()), NetworkError);
  });
}

}  // namespace any_source
}  // namespace c10d::inline v1::testing

// The gtest cases of every behaviour above, for the transport whose RunRanks is `run`.
#define C10D_ANY_SOURCE_TESTS(Suite, run)                                              \
  TEST(Suite, PostedBeforeItsMessage) {                                                \
    ::c10d::testing::any_source::posted_before_its_message(run);                       \
  }                                                                                    \
  TEST(Suite, PostedAfterItsMessageArrived) {                                          \
    ::c10d::testing::any_source::posted_after_its_message(run);                        \
  }                                                                                    \
  TEST(Suite, EverySenderIsReceivedOnceWithItsRank) {                                  \
    ::c10d::testing::any_source::every_sender_once(run);                               \
  }                                                                                    \
  TEST(Suite, InPostingOrderBesideReceivesFromThePeer) {                               \
    ::c10d::testing::any_source::in_order_beside_receives_from_the_peer(run);          \
  }                                                                                    \
  TEST(Suite, TheEarliestArrivedMessageFirst) {                                        \
    ::c10d::testing::any_source::the_earliest_arrived_first(run);                      \
  }                                                                                    \
  TEST(Suite, ALargeMessageEitherWay) {                                                \
    ::c10d::testing::any_source::a_large_message_either_way(run);                      \
  }                                                                                    \
  TEST(Suite, ASizeMismatchNamesTheSender) {                                           \
    ::c10d::testing::any_source::a_size_mismatch_names_the_sender(run);                \
  }                                                                                    \
  TEST(Suite, ATimeoutNamesTheTagAndTheReceiveGoesOn) {                                \
    ::c10d::testing::any_source::a_timeout_names_the_tag_and_the_receive_goes_on(run); \
  }                                                                                    \
  TEST(Suite, AbortFailsItAndReleasesTheWaiter) {                                      \
    ::c10d::testing::any_source::abort_fails_it(run);                                  \
  }
