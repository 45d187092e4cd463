// Connections on first use (TCPConnect, tcp_transport.h), with every rank a thread over real
// loopback sockets: a ring connects each rank to its neighbours only; two ranks that connect to
// each other at once each make one connection; a connect that cannot complete fails its request
// naming the peer and its address; a stranger that comes after set-up never takes a rank's place;
// a failure reaches a rank that has no connection to the rank that failed; a subgroup's
// non-member is neither connected nor held up. The transport's mode
// comes from C10D_TCP_CONNECT here, so `C10D_TCP_CONNECT=eager tcp_lazy_test` shows what a
// full mesh does instead (every test that counts connections then fails).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <latch>
#include <string>
#include <thread>
#include <vector>

#include "../algorithms/ranks.h"
#include "algorithms/ring_all_reduce.h"
#include "backends/common/transport_process_group.h"
#include "backends/gloo_like/tcp_transport.h"
#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/store.h"
#include "stranger.h"
#include "transport_test_util.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;
using c10d::testing::open_sockets;
using c10d::testing::pattern;
using c10d::testing::soon;
using transport::Clock;

std::atomic<int> group_counter{0};

// A transport that connects on first use, whatever C10D_TCP_CONNECT says.
TCPTransportOptions lazy_options() {
  TCPTransportOptions o{"127.0.0.1", 20s};
  o.connect = TCPConnect::kLazy;
  return o;
}

// Runs fn(rank, transport) on n threads, each with its own TCPTransport of a fresh group.
void run_ranks(int n, const std::function<void(int, TCPTransport&)>& fn,
               TCPTransportOptions options = {"127.0.0.1", 20s}) {
  auto store = std::make_shared<HashStore>(20s);
  const std::string group = "lazy" + std::to_string(group_counter++);
  algorithms::testing::run_ranks(
      n, [&](int r) { return std::make_unique<TCPTransport>(store, r, n, group, options); },
      [&](int r, transport::Transport& t) { fn(r, static_cast<TCPTransport&>(t)); });
}

bool holds(const std::vector<int>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// A ring all_reduce connects each rank to its right neighbour, which it sends to, and no rank
// to anyone but its neighbours (a receive may connect to the left one too). With every rank in
// this process, the sockets are at most one listener per rank and two connections per
// neighbouring pair (both ends here), where a full mesh holds n(n-1) connections.
TEST(TCPLazyTest, ARingAllReduceConnectsOnlyToItsNeighbours) {
  constexpr int n = 6;
  constexpr std::int64_t kCount = 300000;  // the ring's pipeline, several segments
  const int before = open_sockets();
  std::latch done(n), counted(1);
  int during = 0;
  run_ranks(n, [&](int r, TCPTransport& t) {
    std::vector<float> data(kCount);
    for (std::int64_t i = 0; i < kCount; ++i) {
      data[i] = static_cast<float>(algorithms::testing::value(r, i));
    }
    algorithms::ring_all_reduce(algorithms::testing::context(t), DType::kFloat32,
                                {ReduceOp::kSum, 1.0}, data.data(), kCount, {});
    for (std::int64_t i = 0; i < kCount; i += 997) {
      ASSERT_EQ(data[i], static_cast<float>(algorithms::testing::expected(ReduceOp::kSum, n, i)));
    }
    const int left = (r + n - 1) % n;
    const int right = (r + 1) % n;
    const TCPTransport::Connections c = t.connections();
    EXPECT_TRUE(holds(c.made, right)) << "rank " << r;
    EXPECT_TRUE(holds(c.accepted, left)) << "rank " << r;
    for (const int p : c.made) EXPECT_TRUE(p == left || p == right) << "rank " << r << ": " << p;
    for (const int p : c.accepted) {
      EXPECT_TRUE(p == left || p == right) << "rank " << r << ": " << p;
    }
    done.arrive_and_wait();
    if (r == 0) {
      during = open_sockets();
      counted.count_down();
    }
    counted.wait();
  });
  // Listeners, both ends of up to two connections per pair, and a watch descriptor per
  // connection whose peer has not connected back.
  EXPECT_LE(during - before, n + 2 * 2 * n + 2 * n);
  EXPECT_LT(during - before, 2 * n * (n - 1));
}

// Two ranks whose first sends to each other cross: each makes the connection it writes to and
// accepts the other's, one each, however they interleave; the third rank, which neither talks
// to, has none.
TEST(TCPLazyTest, TwoRanksThatConnectToEachOtherAtOnceEachMakeOneConnection) {
  for (int round = 0; round < 10; ++round) {
    std::barrier both(2);
    run_ranks(3, [&](int r, TCPTransport& t) {
      if (r == 2) {
        std::this_thread::sleep_for(50ms);
        const TCPTransport::Connections c = t.connections();
        EXPECT_TRUE(c.made.empty() && c.accepted.empty()) << "rank 2 was connected";
        return;
      }
      const int peer = 1 - r;
      std::vector<std::byte> got(64);
      const std::vector<std::byte> mine = pattern(64, r);  // the send reads it until it is done
      both.arrive_and_wait();
      auto send = t.isend(peer, 5, mine);
      auto recv = t.irecv(peer, 5, got);
      send->wait(soon());
      recv->wait(soon());
      EXPECT_EQ(got, pattern(64, peer));
      both.arrive_and_wait();  // both sides attached what they accepted before counting
      const auto until = Clock::now() + 5s;
      while (t.connections().accepted.empty() && Clock::now() < until) {
        std::this_thread::sleep_for(1ms);
      }
      const TCPTransport::Connections c = t.connections();
      EXPECT_EQ(c.made, std::vector<int>{peer}) << "rank " << r << ", round " << round;
      EXPECT_EQ(c.accepted, std::vector<int>{peer}) << "rank " << r << ", round " << round;
      both.arrive_and_wait();
    });
  }
}

// A peer whose published address takes the connection but never answers the handshake: the
// request that needed it fails when the connect's time (the transport's timeout) is up, naming
// the peer and the address. A wait whose own deadline comes first says the connection is not
// made yet.
TEST(TCPLazyTest, AConnectThatCannotCompleteFailsItsRequestNamingPeerAndAddress) {
  if (tcp_connect_from_env() == TCPConnect::kEager) {
    GTEST_SKIP() << "an eager transport connects in its set-up (tcp_handshake_test)";
  }
  auto store = std::make_shared<HashStore>(20s);
  testing::StrangerListener mute;  // the kernel completes the connect; nobody ever answers
  store->set("mute/addr/0", mute.address());
  TCPTransportOptions options{"127.0.0.1", 1500ms};
  TCPTransport t(store, 1, 2, "mute", options);
  const std::vector<std::byte> data = pattern(8, 1);
  auto early = t.isend(0, 1, data);
  const std::string early_what =
      c10d::testing::error_of<transport::PeerTimeout>(*early, Clock::now() + 200ms);
  EXPECT_NE(early_what.find("the connection to rank 0 is not made yet"), std::string::npos)
      << early_what;
  const auto start = Clock::now();
  const std::string what = c10d::testing::error_of<TimeoutError>(*t.isend(0, 2, data), soon());
  EXPECT_NE(what.find("rank 1: handshake with rank 0 at " + mute.address()), std::string::npos)
      << what;
  EXPECT_LT(Clock::now() - start, 5s);
}

// A rank that connects on first use listens after its set-up until every peer has connected: a
// stranger that claims the peer's rank then is refused alike, and the real peer still joins.
TEST(TCPLazyTest, AStrangerAfterSetUpNeverTakesARanksPlace) {
  auto store = std::make_shared<HashStore>(20s);
  std::exception_ptr errors[2];
  std::vector<std::byte> got(100);
  std::latch up(2), claimed(1);
  {
    std::jthread ranks[2];
    for (int r = 0; r < 2; ++r) {
      ranks[r] = std::jthread([&, r] {
        bool counted = false;
        try {
          TCPTransport t(store, r, 2, "late", lazy_options());
          up.count_down();
          counted = true;
          claimed.wait();
          if (r == 0) {
            t.irecv(1, 3, got)->wait(soon());
          } else {
            t.isend(0, 3, pattern(100, 7))->wait(soon());
          }
        } catch (...) {
          errors[r] = std::current_exception();
          if (!counted) up.count_down();
        }
      });
    }
    up.wait();
    testing::StrangerSocket s =
        testing::StrangerSocket::connect_to(testing::port_of(store->get_string("late/addr/0")));
    EXPECT_TRUE(s.connected());
    const testing::ClaimResult claim = testing::claim_rank(s, {2, 1, "late"}, 0);
    EXPECT_EQ(claim.challenge.size(), kGreetingBytes);
    EXPECT_TRUE(claim.after_proof.empty()) << claim.after_proof.size() << " bytes came back";
    EXPECT_TRUE(claim.closed) << "the rank kept the stranger's connection";
    claimed.count_down();
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  EXPECT_EQ(got, pattern(100, 7));
}

// Rank 0 fails (aborts) while rank 2 waits for a message from rank 3, which never sends. Rank 2
// has no connection to rank 0, nor to rank 1, the one rank 0 talked to: it learns of the
// failure from the record in the store, within moments, naming rank 0.
TEST(TCPLazyTest, AFailureReachesARankWithNoConnectionToTheRankThatFailed) {
  TCPTransportOptions options{"127.0.0.1", 20s};
  options.fail_all_on_peer_loss = true;
  std::latch talked(2), rank2_waits(1), finished(1);
  run_ranks(
      4,
      [&](int r, TCPTransport& t) {
        std::vector<std::byte> got(8);
        if (r == 0 || r == 1) {
          auto in = t.irecv(1 - r, 1, got);
          t.isend(1 - r, 1, pattern(8, r))->wait(soon());
          in->wait(soon());
          talked.count_down();
          if (r == 1) {
            // Rank 0's abort notice reaches rank 1 over their connection.
            EXPECT_THROW(t.irecv(0, 2, got)->wait(soon()), NetworkError);
            return;
          }
          rank2_waits.wait();
          t.abort(std::make_exception_ptr(NetworkError("rank 0: the test fails it")));
          finished.wait();
          return;
        }
        if (r == 3) {
          finished.wait();  // alive, connected to rank 2, silent
          return;
        }
        talked.wait();
        auto pending = t.irecv(3, 3, got);
        std::this_thread::sleep_for(50ms);  // the connect to rank 3 is made
        rank2_waits.count_down();
        const auto start = Clock::now();
        const std::string what = c10d::testing::network_error(*pending, soon());
        EXPECT_NE(what.find("peer rank 0 aborted"), std::string::npos) << what;
        EXPECT_LT(Clock::now() - start, 3s);
        const TCPTransport::Connections c = t.connections();
        for (const int p : {0, 1}) {
          EXPECT_FALSE(holds(c.made, p) || holds(c.accepted, p)) << "rank 2 talked to " << p;
        }
        finished.count_down();
      },
      options);
}

// A subgroup's ranks meet only among themselves: a non-member's new_group returns at once while
// the members have not even called theirs, and it never calls anything else; the members'
// subgroup works without it and no rank connects to it.
TEST(TCPLazyTest, ANonMemberOfASubgroupIsNeitherHeldUpNorConnected) {
  auto store = std::make_shared<HashStore>(20s);
  ProcessGroupTCPOptions options;
  options.timeout = 20s;
  options.shared_memory = false;
  options.group_name = "sub" + std::to_string(group_counter++);
  std::latch left(1), members_done(2);
  std::vector<std::exception_ptr> errors(3);
  {
    std::vector<std::jthread> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        try {
          auto pg = make_process_group_tcp(store, r, 3, options);
          if (r == 2) {
            const auto start = Clock::now();
            EXPECT_EQ(pg->new_group({0, 1}), nullptr);
            EXPECT_LT(Clock::now() - start, 100ms);
            left.count_down();
            members_done.wait();
            auto tcp = std::dynamic_pointer_cast<TCPTransport>(backends::transport_of(*pg));
            ASSERT_NE(tcp, nullptr);
            if (tcp->lazy()) {
              EXPECT_TRUE(tcp->connections().made.empty());
              EXPECT_TRUE(tcp->connections().accepted.empty());
            }
            return;
          }
          left.wait();  // the non-member has come and gone
          std::this_thread::sleep_for(100ms);
          auto sub = pg->new_group({0, 1});
          ASSERT_NE(sub, nullptr);
          auto t = Tensor::from_vector(std::vector<float>{1.0f + r}, DType::kFloat32);
          sub->all_reduce({t})->wait(10s);
          EXPECT_EQ(t.data<float>()[0], 3.0f);
          members_done.count_down();
        } catch (...) {
          errors[static_cast<std::size_t>(r)] = std::current_exception();
          if (r != 2) members_done.count_down();
          if (r == 2) left.count_down();
        }
      });
    }
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
