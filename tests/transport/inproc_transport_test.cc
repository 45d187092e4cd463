// The in-process transport's contract (transport.h, inproc_transport.h): matching, the one copy,
// call and size checks, deadlines, abort, a dying peer, requests destroyed while pending, and
// receives from any source (any_source_cases.h, and the dying peers that end one).
#include "transport/inproc_transport.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "../algorithms/ranks.h"
#include "../memory_use.h"
#include "any_source_cases.h"
#include "c10d/errors.h"
#include "call_mismatch.h"
#include "transport/sub_transport.h"

namespace c10d::inline v1::transport {
namespace {

using namespace std::chrono_literals;

using Bytes = std::vector<std::byte>;

// `n` bytes whose values depend on `seed`, so messages from different senders or rounds differ.
Bytes pattern(int seed, std::size_t n) {
  Bytes out(n);
  for (std::size_t i = 0; i < n; ++i) out[i] = static_cast<std::byte>((seed * 131 + i * 7) & 0xff);
  return out;
}

Clock::time_point soon() { return Clock::now() + 10s; }

// Runs `fn`, expects it to throw exactly `E`, and returns the message.
template <typename E>
std::string message_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong type: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

// Expects `message` to contain every one of `parts` (the what, where and who of an error).
void expect_mentions(const std::string& message, std::initializer_list<std::string> parts) {
  for (const auto& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "\"" << part << "\" not in: " << message;
  }
}

class InProcTransportTest : public ::testing::Test {
 protected:
  void start(int n) {
    world_ = std::make_shared<InProcWorld>(n);
    ranks_.clear();
    for (int r = 0; r < n; ++r) ranks_.push_back(std::make_unique<InProcTransport>(world_, r));
  }
  InProcTransport& rank(int r) { return *ranks_[static_cast<std::size_t>(r)]; }

  // Verbs: post from one rank to another with a user tag.
  std::unique_ptr<Request> send(int from, int to, std::uint32_t tag, const Bytes& data) {
    return rank(from).isend(to, user_tag(0, tag), data);
  }
  std::unique_ptr<Request> recv(int at, int from, std::uint32_t tag, Bytes& data) {
    return rank(at).irecv(from, user_tag(0, tag), data);
  }

  std::shared_ptr<InProcWorld> world_;
  std::vector<std::unique_ptr<InProcTransport>> ranks_;
};

TEST_F(InProcTransportTest, SendThenRecvDeliversExactBytes) {
  start(2);
  const Bytes sent = pattern(1, 1000);
  auto s = send(0, 1, 7, sent);
  EXPECT_FALSE(s->test());  // rendezvous: nothing matched it yet
  Bytes got(1000);
  auto r = recv(1, 0, 7, got);
  EXPECT_TRUE(r->test());  // the second side copies and completes both
  EXPECT_TRUE(s->test());
  r->wait(soon());
  s->wait(soon());
  EXPECT_EQ(got, sent);
}

TEST_F(InProcTransportTest, RecvThenSendDeliversExactBytes) {
  start(2);
  Bytes got(333, std::byte{0});
  auto r = recv(1, 0, 7, got);
  EXPECT_FALSE(r->test());
  const Bytes sent = pattern(2, 333);
  auto s = send(0, 1, 7, sent);
  r->wait(soon());
  s->wait(soon());
  EXPECT_EQ(got, sent);
}

TEST_F(InProcTransportTest, SameTagMessagesMatchInFifoOrder) {
  start(2);
  const std::vector<Bytes> sent = {pattern(1, 64), pattern(2, 64), pattern(3, 64)};
  std::vector<std::unique_ptr<Request>> requests;
  for (const auto& m : sent) requests.push_back(send(0, 1, 5, m));
  std::vector<Bytes> got(3, Bytes(64));
  for (auto& g : got) requests.push_back(recv(1, 0, 5, g));
  wait_all(requests, soon());
  EXPECT_EQ(got, sent);
}

TEST_F(InProcTransportTest, IndependentTagsDoNotBlockEachOther) {
  start(2);
  Bytes got_b(16), got_a(16);
  auto rb = recv(1, 0, /*tag B*/ 2, got_b);
  auto ra = recv(1, 0, /*tag A*/ 1, got_a);
  const Bytes a = pattern(10, 16), b = pattern(20, 16);
  auto sa = send(0, 1, 1, a);
  EXPECT_TRUE(ra->test());  // A matched although B, posted first, is still waiting
  EXPECT_FALSE(rb->test());
  auto sb = send(0, 1, 2, b);
  ra->wait(soon());
  rb->wait(soon());
  EXPECT_EQ(got_a, a);
  EXPECT_EQ(got_b, b);
}

// Lanes of a staged collective (transport.h): every (stage, lane) of an op has a tag of its own,
// distinct from the op's and from every other op's, that names them.
TEST(LaneTagTest, EveryLaneOfEveryStageHasATagOfItsOwn) {
  const Tag op = make_tag(3, 17);
  std::vector<Tag> seen{op, make_tag(3, 18), make_tag(4, 17), control_tag(3, 17)};
  for (int stage = 0; stage < kMaxStages; ++stage) {
    for (int lane = 0; lane < kMaxLanes; ++lane) {
      const Tag t = lane_tag(op, stage, lane);
      EXPECT_EQ(std::count(seen.begin(), seen.end(), t), 0) << stage << " " << lane;
      seen.push_back(t);
      EXPECT_EQ(tag_lane(t), lane);
      EXPECT_EQ(lane_op_tag(t), op);
      EXPECT_EQ(lane_stage_tag(t), lane_stage_tag(lane_tag(op, stage, 0)));
      EXPECT_NE(lane_stage_tag(t), lane_stage_tag(lane_tag(op, (stage + 1) % kMaxStages, lane)));
    }
  }
  // A rooted op's entry check: the op's in the call notes, no lane's, no other tag's.
  const Tag entry = entry_tag(op);
  EXPECT_EQ(std::count(seen.begin(), seen.end(), entry), 0);
  EXPECT_EQ(lane_op_tag(entry), op);
  EXPECT_TRUE(is_entry_tag(entry));
  for (const Tag t : seen) EXPECT_FALSE(is_entry_tag(t)) << tag_string(t);
  EXPECT_FALSE(is_entry_tag(user_tag(3, 0xffffffffu)));
  EXPECT_EQ(tag_lane(entry), -1);
  EXPECT_EQ(tag_string(entry), "group 3 seq 17 entry check");
  EXPECT_EQ(tag_lane(op), -1);
  EXPECT_EQ(tag_lane(user_tag(3, 0xffffffffu)), -1);
  EXPECT_EQ(tag_string(lane_tag(op, 2, 1)), "group 3 seq 17 stage 2 lane 1");
  EXPECT_EQ(tag_string(op), "group 3 seq 17");
}

TEST_F(InProcTransportTest, TwoLanesBetweenOnePairMatchTheirOwnReceives) {
  start(2);
  const Tag op = make_tag(0, 5);
  Bytes got0(8), got1(32);
  auto r0 = rank(1).irecv(0, lane_tag(op, 0, 0), got0);
  auto r1 = rank(1).irecv(0, lane_tag(op, 0, 1), got1);
  const Bytes a = pattern(1, 32), b = pattern(2, 8);
  auto s1 = rank(0).isend(1, lane_tag(op, 0, 1), a);  // lane 1 sends first
  auto s0 = rank(0).isend(1, lane_tag(op, 0, 0), b);
  for (auto* r : {&r0, &r1, &s0, &s1}) EXPECT_NO_THROW((*r)->wait(soon()));
  EXPECT_EQ(got1, a);
  EXPECT_EQ(got0, b);
}

TEST_F(InProcTransportTest, ZeroByteMessagesCompleteInBothOrders) {
  start(2);
  Bytes empty;
  auto s1 = send(0, 1, 1, empty);
  auto r1 = recv(1, 0, 1, empty);
  auto r2 = recv(1, 0, 2, empty);
  auto s2 = rank(0).isend(1, user_tag(0, 2), {});
  for (auto* r : {&s1, &r1, &r2, &s2}) EXPECT_NO_THROW((*r)->wait(soon()));
}

TEST_F(InProcTransportTest, SizeMismatchFailsBothSidesNamingPeerTagAndSizes) {
  start(2);
  const Bytes sent = pattern(1, 16);
  Bytes got(8);
  auto s = send(0, 1, 9, sent);
  auto r = recv(1, 0, 9, got);
  const std::string tag = tag_string(user_tag(0, 9));
  expect_mentions(message_of<InvalidArgument>([&] { s->wait(soon()); }),
                  {"rank 0 isend to rank 1", tag, "16 bytes", "8-byte buffer"});
  expect_mentions(message_of<InvalidArgument>([&] { r->wait(soon()); }),
                  {"rank 1 irecv from rank 0", tag, "receive buffer has 8 bytes", "has 16 bytes"});
  EXPECT_EQ(got, Bytes(8));  // nothing copied
}

// Calls (transport.h): a receive that meets a message of another call fails with a CallMismatch,
// before sizes are compared, and so does the send (in-process the send completes only with its
// receive); nothing is copied. kUnchecked on either side takes any call.
TEST_F(InProcTransportTest, AMessageOfAnotherCallFailsBothSidesNamingBothCallsBeforeSizes) {
  start(2);
  constexpr Call kMine = 0x0102ff0000000400;
  constexpr Call kTheirs = 0x0101ff0000000400;
  const Tag tag = make_tag(3, 5);
  const Bytes sent = pattern(1, 16);
  Bytes got(8);  // another size too: the calls are named, not the sizes
  auto s = rank(0).isend(1, tag, sent, kTheirs);
  auto r = rank(1).irecv(0, tag, got, kMine);
  expect_mentions(
      testing::expect_call_mismatch(*r, {1, 0, tag, kMine, kTheirs}, soon()),
      {"rank 1 irecv from rank 0", tag_string(tag), "0x102ff0000000400", "0x101ff0000000400"});
  expect_mentions(testing::expect_call_mismatch(*s, {0, 1, tag, kTheirs, kMine, true}, soon()),
                  {"rank 0 isend to rank 1", "the matching irecv on rank 1"});
  EXPECT_EQ(got, Bytes(8));  // nothing copied

  // Unchecked on either side: delivered.
  for (const auto& [send_call, recv_call] :
       {std::pair<Call, Call>{kUnchecked, kMine}, std::pair<Call, Call>{kMine, kUnchecked},
        std::pair<Call, Call>{kMine, kMine}}) {
    Bytes into(16);
    auto unchecked_s = rank(0).isend(1, tag, sent, send_call);
    auto unchecked_r = rank(1).irecv(0, tag, into, recv_call);
    unchecked_r->wait(soon());
    unchecked_s->wait(soon());
    EXPECT_EQ(into, sent);
  }
}

TEST_F(InProcTransportTest, WaitTimeoutNamesPeerAndTagAndTheRequestCanStillComplete) {
  start(2);
  Bytes got(24);
  auto r = recv(1, 0, 3, got);
  const auto before = Clock::now();
  expect_mentions(message_of<TimeoutError>([&] { r->wait(Clock::now() + 30ms); }),
                  {"rank 1 irecv from rank 0", tag_string(user_tag(0, 3)), "24 bytes"});
  EXPECT_GE(Clock::now() - before, 30ms);
  EXPECT_FALSE(r->test());

  const Bytes sent = pattern(4, 24);
  auto s = send(0, 1, 3, sent);
  r->wait(soon());
  s->wait(soon());
  EXPECT_EQ(got, sent);
}

TEST_F(InProcTransportTest, TimeoutOfASendNamesItsDirection) {
  start(2);
  const Bytes sent = pattern(1, 5);
  auto s = send(1, 0, 4, sent);
  expect_mentions(message_of<TimeoutError>([&] { s->wait(Clock::now() + 1ms); }),
                  {"rank 1 isend to rank 0", "5 bytes"});
}

TEST_F(InProcTransportTest, AbortFailsPendingAndLaterRequestsAndReleasesWaiters) {
  start(3);
  Bytes got(4);
  auto pending = recv(0, 1, 1, got);
  std::string waiter_error;
  std::thread waiter(
      [&] { waiter_error = message_of<NetworkError>([&] { pending->wait(soon()); }); });
  std::this_thread::sleep_for(20ms);  // let the waiter block
  const auto before = Clock::now();
  rank(0).abort(std::make_exception_ptr(NetworkError("test abort")));
  waiter.join();
  EXPECT_LT(Clock::now() - before, 2s);
  EXPECT_EQ(waiter_error, "test abort");

  rank(0).abort(std::make_exception_ptr(NetworkError("second reason")));  // the first one sticks
  const Bytes data = pattern(1, 4);
  auto later = send(0, 2, 1, data);
  EXPECT_EQ(message_of<NetworkError>([&] { later->test(); }), "test abort");
  EXPECT_EQ(got, Bytes(4));

  // Other ranks keep talking.
  Bytes got12(4);
  auto s = send(1, 2, 1, data);
  auto r = recv(2, 1, 1, got12);
  s->wait(soon());
  r->wait(soon());
  EXPECT_EQ(got12, data);
}

TEST_F(InProcTransportTest, FailRankFailsPeersPendingRequestsNamingTheDeadRankWithinMilliseconds) {
  start(3);
  Bytes got(8);
  const Bytes data = pattern(1, 8);
  auto recv_from_dead = recv(0, 2, 1, got);
  auto send_to_dead = send(1, 2, 1, data);
  std::string recv_error, send_error;
  Clock::time_point recv_failed_at, send_failed_at;
  std::thread t0([&] {
    recv_error = message_of<NetworkError>([&] { recv_from_dead->wait(soon()); });
    recv_failed_at = Clock::now();
  });
  std::thread t1([&] {
    send_error = message_of<NetworkError>([&] { send_to_dead->wait(soon()); });
    send_failed_at = Clock::now();
  });
  std::this_thread::sleep_for(20ms);
  const auto died_at = Clock::now();
  world_->fail_rank(2, std::make_exception_ptr(NetworkError("killed by test")));
  t0.join();
  t1.join();
  EXPECT_LT(recv_failed_at - died_at, 200ms);
  EXPECT_LT(send_failed_at - died_at, 200ms);
  expect_mentions(recv_error, {"rank 0 irecv from rank 2", "peer rank 2"});
  expect_mentions(send_error, {"rank 1 isend to rank 2", "peer rank 2"});

  // Later requests with the dead peer fail at once; the dead rank's own fail with the reason.
  auto later = recv(1, 2, 3, got);
  expect_mentions(message_of<NetworkError>([&] { later->test(); }), {"peer rank 2"});
  auto own = send(2, 0, 3, data);
  EXPECT_EQ(message_of<NetworkError>([&] { own->test(); }), "killed by test");

  // The survivors still talk to each other.
  auto s = send(0, 1, 4, data);
  auto r = recv(1, 0, 4, got);
  s->wait(soon());
  r->wait(soon());
  EXPECT_EQ(got, data);
}

TEST_F(InProcTransportTest, RingExchangeAcrossEightThreadsDeliversEveryRound) {
  constexpr int kRanks = 8;
  constexpr int kRounds = 100;
  constexpr std::size_t kBytes = 256;
  start(kRanks);
  std::vector<int> failures(kRanks, 0);
  std::vector<std::thread> threads;
  for (int me = 0; me < kRanks; ++me) {
    threads.emplace_back([&, me] {
      const int right = (me + 1) % kRanks;
      const int left = (me + kRanks - 1) % kRanks;
      Bytes got(kBytes);
      for (int round = 0; round < kRounds; ++round) {
        const Bytes sent = pattern(me * 1000 + round, kBytes);
        const Tag tag = make_tag(1, static_cast<std::uint64_t>(round));
        auto r = rank(me).irecv(left, tag, got);
        auto s = rank(me).isend(right, tag, sent);
        r->wait(soon());
        s->wait(soon());
        if (got != pattern(left * 1000 + round, kBytes)) ++failures[static_cast<std::size_t>(me)];
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, std::vector<int>(kRanks, 0));
}

TEST_F(InProcTransportTest, DestroyedPendingRecvNeverWritesItsBuffer) {
  start(2);
  Bytes canary(32, std::byte{0xAB});
  recv(1, 0, 6, canary).reset();  // posted, then destroyed while pending

  const Bytes sent = pattern(7, 32);
  auto s = send(0, 1, 6, sent);
  EXPECT_FALSE(s->test());  // the destroyed receive did not match it
  EXPECT_EQ(canary, Bytes(32, std::byte{0xAB}));

  Bytes got(32);
  auto r = recv(1, 0, 6, got);
  r->wait(soon());
  s->wait(soon());
  EXPECT_EQ(got, sent);
  EXPECT_EQ(canary, Bytes(32, std::byte{0xAB}));
}

TEST_F(InProcTransportTest, DestroyedPendingSendIsNeverDelivered) {
  start(2);
  const Bytes stale = pattern(1, 8), fresh = pattern(2, 8);
  send(0, 1, 1, stale).reset();
  auto s = send(0, 1, 1, fresh);
  Bytes got(8);
  auto r = recv(1, 0, 1, got);
  r->wait(soon());
  EXPECT_EQ(got, fresh);
}

TEST_F(InProcTransportTest, RequestsOutliveTheirTransport) {
  start(2);
  Bytes got(4);
  auto r = recv(1, 0, 1, got);
  ranks_[1].reset();
  const Bytes sent = pattern(3, 4);
  auto s = send(0, 1, 1, sent);
  r->wait(soon());
  EXPECT_EQ(got, sent);
}

// A rank's matching keeps queues only for the peers it talks with: a world of 256 threads as
// ranks holds 256^2 (rank, peer) pairs, which at a pair of std::deque each took about 75 MB.
TEST(InProcWorldTest, AWorldOfManyRanksTakesLittleHeapUntilTheyTalk) {
  const std::size_t before = c10d::testing::heap_bytes();
  const auto world = std::make_shared<InProcWorld>(256);
  const std::size_t used = c10d::testing::heap_bytes() - before;
  EXPECT_LT(used, std::size_t{4} << 20) << used << " bytes for a world of 256 ranks";
  InProcTransport a(world, 0);
  InProcTransport b(world, 255);
  std::vector<std::byte> got(8);
  auto recv = b.irecv(0, 3, got);
  a.isend(255, 3, std::vector<std::byte>(8, std::byte{7}))->wait(soon());
  recv->wait(soon());
  EXPECT_EQ(got, std::vector<std::byte>(8, std::byte{7}));
}

TEST_F(InProcTransportTest, PeerOutsideTheWorldIsInvalidArgument) {
  start(2);
  Bytes buf(1);
  expect_mentions(message_of<InvalidArgument>([&] { rank(0).isend(2, user_tag(0, 1), buf); }),
                  {"peer 2 is outside a world of size 2"});
  EXPECT_THROW(rank(0).irecv(-1, user_tag(0, 1), buf), InvalidArgument);
  EXPECT_THROW(InProcTransport(world_, 5), InvalidArgument);
}

void run_in_process(int n, const std::function<void(int, Transport&)>& fn) {
  algorithms::testing::run_ranks(n, fn);
}
C10D_ANY_SOURCE_TESTS(InProcTransportAnySourceTest, run_in_process)

TEST_F(InProcTransportTest, AnySourceWaitsWhileAPeerLivesAndFailsWhenEveryOtherRankDied) {
  start(3);
  Bytes got(4);
  auto any = rank(0).irecv_any(user_tag(0, 3), got);
  world_->fail_rank(1, nullptr);
  EXPECT_FALSE(any->test());  // rank 2 may still send
  const auto start_at = Clock::now();
  world_->fail_rank(2, nullptr);
  const std::string what = message_of<NetworkError>([&] { any->wait(soon()); });
  expect_mentions(what, {"rank 0", "any-source", "every other rank"});
  EXPECT_LT(Clock::now() - start_at, 1s);
  // Later ones fail at once too, unless a send waits for them.
  EXPECT_THROW(rank(0).irecv_any(user_tag(0, 3), got)->wait(soon()), NetworkError);
}

TEST_F(InProcTransportTest, ADestroyedPendingAnySourceReceiveNeverWritesItsBuffer) {
  start(2);
  Bytes got(4, std::byte{0x5a});
  rank(0).irecv_any(user_tag(0, 3), got).reset();
  const Bytes data = pattern(1, 4);
  auto sent = send(1, 0, 3, data);
  EXPECT_FALSE(sent->test());  // nobody took it
  Bytes later(4);
  auto next = rank(0).irecv_any(user_tag(0, 3), later);
  next->wait(soon());
  sent->wait(soon());
  EXPECT_EQ(later, data);
  EXPECT_EQ(got, Bytes(4, std::byte{0x5a}));
  EXPECT_EQ(next->source(), 1);
}

// A view's any-source request names its sender in the view's numbering, after the view went
// (the request shares the view's ranks).
TEST_F(InProcTransportTest, AViewsAnySourceReceiveNamesItsSourceAfterTheViewWent) {
  start(3);
  Bytes got(4);
  std::unique_ptr<Request> any;
  {
    SubTransport view(std::make_shared<InProcTransport>(world_, 0), {0, 2});
    any = view.irecv_any(user_tag(0, 3), got);
  }
  const Bytes data = pattern(2, 4);
  auto sent = send(2, 0, 3, data);
  any->wait(soon());
  sent->wait(soon());
  EXPECT_EQ(got, data);
  EXPECT_EQ(any->source(), 1);  // rank 2 of the parent is rank 1 of the view
}

}  // namespace
}  // namespace c10d::inline v1::transport
