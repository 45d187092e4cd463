// transport::Matcher alone: the matching rules of transport/matcher.h with receives and
// messages as plain names, the bound on unexpected bytes, SourceClaim, and the notes of calls
// (call_notes.h) that find a message of another call no receive will meet.
#include "transport/matcher.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "c10d/errors.h"
#include "transport/unexpected_buffer.h"

namespace c10d::inline v1::transport {
namespace {

constexpr int kPeers = 4;

// A matcher whose receives and messages are names ("r1", "m1"), with verbs that read as the
// rules: post a receive, a message arrives, and what each one got.
class MatcherTest : public ::testing::Test {
 protected:
  // Posts receive `name` from `peer` (kAnySource: any); the message it took at once, or "".
  std::string post(int peer, Tag tag, const std::string& name) {
    const auto taken = m_.post_or_take(peer, tag, name);
    if (!taken) return "";
    sources_[name] = taken->first;
    return taken->second;
  }
  // Message `name` arrives from `peer`; the receive that took it, or "" (it is then unexpected).
  std::string arrive(int peer, Tag tag, const std::string& name) {
    const auto recv = m_.match(peer, tag);
    if (!recv) {
      m_.push_unexpected(peer, tag, name);
      return "";
    }
    sources_[*recv] = peer;
    return *recv;
  }
  int source_of(const std::string& recv) { return sources_.at(recv); }

  Matcher<std::string, std::string> m_{kPeers, 1000};
  std::map<std::string, int> sources_;
};

TEST_F(MatcherTest, AReceiveTakesTheOldestWaitingMessageOfItsPeerAndTag) {
  EXPECT_EQ(arrive(1, 5, "m1"), "");
  EXPECT_EQ(arrive(1, 6, "other tag"), "");
  EXPECT_EQ(arrive(2, 5, "other peer"), "");
  EXPECT_EQ(arrive(1, 5, "m2"), "");
  EXPECT_EQ(post(1, 5, "r1"), "m1");
  EXPECT_EQ(post(1, 5, "r2"), "m2");
  EXPECT_EQ(post(1, 5, "r3"), "");  // queued
  EXPECT_EQ(m_.receives(), 1u);
  EXPECT_EQ(arrive(1, 5, "m3"), "r3");
  EXPECT_EQ(m_.receives(), 0u);
}

TEST_F(MatcherTest, AMessageGoesToTheEarliestPostedReceiveSpecificOrAnySource) {
  EXPECT_EQ(post(kAnySource, 5, "any"), "");
  EXPECT_EQ(post(1, 5, "from 1"), "");
  EXPECT_TRUE(m_.any_source_posted());
  // Peer 1's first message goes to the any-source receive, posted first; its second to "from 1".
  EXPECT_EQ(arrive(1, 5, "m1"), "any");
  EXPECT_EQ(source_of("any"), 1);
  EXPECT_EQ(arrive(1, 5, "m2"), "from 1");
  EXPECT_FALSE(m_.any_source_posted());
}

TEST_F(MatcherTest, ASpecificReceivePostedFirstTakesItsPeersMessageBeforeAnAnySourceOne) {
  EXPECT_EQ(post(1, 5, "from 1"), "");
  EXPECT_EQ(post(kAnySource, 5, "any"), "");
  EXPECT_EQ(arrive(2, 5, "m from 2"), "any");  // "from 1" does not take peer 2's
  EXPECT_EQ(post(kAnySource, 5, "any 2"), "");
  EXPECT_EQ(arrive(1, 5, "m from 1"), "from 1");
  EXPECT_EQ(arrive(3, 5, "m from 3"), "any 2");
  EXPECT_EQ(source_of("any 2"), 3);
}

TEST_F(MatcherTest, AnySourceTakesTheMessageThatArrivedFirstAmongThePeers) {
  EXPECT_EQ(arrive(3, 5, "first, from 3"), "");
  EXPECT_EQ(arrive(1, 5, "second, from 1"), "");
  EXPECT_EQ(arrive(3, 5, "third, from 3"), "");
  EXPECT_EQ(arrive(2, 7, "other tag"), "");
  EXPECT_EQ(post(kAnySource, 5, "a"), "first, from 3");
  EXPECT_EQ(source_of("a"), 3);
  EXPECT_EQ(post(kAnySource, 5, "b"), "second, from 1");
  EXPECT_EQ(source_of("b"), 1);
  EXPECT_EQ(post(kAnySource, 5, "c"), "third, from 3");
  EXPECT_EQ(post(kAnySource, 5, "d"), "");  // the tag 7 message is not for it
  EXPECT_EQ(post(2, 7, "e"), "other tag");
}

TEST_F(MatcherTest, MessagesOfOnePeerAndTagAreTakenInOrderWhoeverReceives) {
  // Every arrival and post interleaving of two senders: each sender's messages land in order.
  for (int pattern = 0; pattern < 16; ++pattern) {
    Matcher<std::string, std::string> m(kPeers, 1000);
    std::vector<std::string> got;
    int sent[2] = {0, 0};
    for (int step = 0; step < 4; ++step) {
      const int peer = 1 + ((pattern >> step) & 1);
      m.push_unexpected(peer, 9, std::to_string(peer) + ":" + std::to_string(sent[peer - 1]++));
    }
    for (int step = 0; step < 4; ++step) {
      const int peer = (step % 2 == 0) ? kAnySource : 1 + ((pattern >> step) & 1);
      if (auto t = m.post_or_take(peer, 9, "r")) got.push_back(t->second);
    }
    for (int p = 1; p <= 2; ++p) {
      int next = 0;
      for (const auto& g : got) {
        if (g[0] == '0' + p) {
          EXPECT_EQ(g, std::to_string(p) + ":" + std::to_string(next++));
        }
      }
    }
  }
}

TEST_F(MatcherTest, FindUnexpectedLeavesTheMessageInPlaceUntilTaken) {
  EXPECT_FALSE(m_.find_unexpected(kAnySource, 5).has_value());
  arrive(2, 5, "m");
  const auto found = m_.find_unexpected(kAnySource, 5);
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->peer, 2);
  EXPECT_TRUE(m_.find_unexpected(2, 5).has_value());
  EXPECT_EQ(m_.find_unexpected(kAnySource, 5)->peer, 2);  // still there
  EXPECT_EQ(m_.take(*found), "m");
  EXPECT_FALSE(m_.find_unexpected(2, 5).has_value());
}

TEST_F(MatcherTest, ArrivalStampsIncreaseAndNeverRepeatAcrossThreads) {
  arrive(1, 5, "a");
  arrive(2, 5, "b");
  const auto a = m_.arrival(*m_.find_unexpected(1, 5));
  const auto b = m_.arrival(*m_.find_unexpected(2, 5));
  EXPECT_LT(a, b);
  ArrivalClock clock;
  std::vector<std::vector<std::uint64_t>> stamps(4);
  std::vector<std::thread> threads;
  for (auto& s : stamps) {
    threads.emplace_back([&s, &clock] {
      for (int i = 0; i < 1000; ++i) s.push_back(clock.next());
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::uint64_t> all;
  for (const auto& s : stamps) {
    for (std::size_t i = 1; i < s.size(); ++i) EXPECT_LT(s[i - 1], s[i]);
    all.insert(all.end(), s.begin(), s.end());
  }
  std::sort(all.begin(), all.end());
  EXPECT_EQ(std::adjacent_find(all.begin(), all.end()), all.end());
}

// A matcher stamps from a counter of its own; matchers whose stamps are compared share a clock.
TEST(MatcherArrivalTest, OwnStampsUnlessAClockIsShared) {
  Matcher<std::string, std::string> a(2, 1000);
  Matcher<std::string, std::string> b(2, 1000);
  a.push_unexpected(0, 5, "a");
  b.push_unexpected(0, 5, "b");
  EXPECT_EQ(a.arrival(*a.find_unexpected(0, 5)), 0u);
  EXPECT_EQ(b.arrival(*b.find_unexpected(0, 5)), 0u);
  EXPECT_EQ(a.arrivals(), nullptr);

  auto clock = std::make_shared<ArrivalClock>();
  Matcher<std::string, std::string> shm(2, 1000, clock);
  Matcher<std::string, std::string> tcp(2, 1000, clock);
  EXPECT_EQ(shm.arrivals(), tcp.arrivals());
  tcp.push_unexpected(1, 5, "first");
  shm.push_unexpected(1, 5, "second");
  tcp.push_unexpected(0, 5, "third");
  const auto first = tcp.arrival(*tcp.find_unexpected(1, 5));
  const auto second = shm.arrival(*shm.find_unexpected(1, 5));
  const auto third = tcp.arrival(*tcp.find_unexpected(0, 5));
  EXPECT_LT(first, second);
  EXPECT_LT(second, third);
}

TEST_F(MatcherTest, CancelledReceivesLeaveAndTakeNothing) {
  post(1, 5, "r1");
  post(kAnySource, 5, "any");
  EXPECT_EQ(m_.receives(), 2u);
  EXPECT_TRUE(m_.cancel(kAnySource, "any"));
  EXPECT_FALSE(m_.cancel(kAnySource, "any"));
  EXPECT_FALSE(m_.any_source_posted());
  EXPECT_EQ(m_.receives(), 1u);
  EXPECT_TRUE(m_.cancel(1, "r1"));
  EXPECT_EQ(m_.receives(), 0u);
  EXPECT_EQ(arrive(1, 5, "m"), "");
  EXPECT_TRUE(m_.erase_unexpected(1, "m"));
  EXPECT_FALSE(m_.erase_unexpected(1, "m"));
  EXPECT_FALSE(m_.find_unexpected(1, 5).has_value());
}

TEST_F(MatcherTest, FailingTakesThePeersReceivesOrTheAnySourceOnesOrAll) {
  post(1, 5, "r1a");
  post(2, 5, "r2");
  post(kAnySource, 5, "any");
  post(1, 6, "r1b");
  std::vector<std::string> taken;
  m_.take_receives(1, [&](const std::string& r) { taken.push_back(r); });
  EXPECT_EQ(taken, (std::vector<std::string>{"r1a", "r1b"}));
  taken.clear();
  m_.take_receives(kAnySource, [&](const std::string& r) { taken.push_back(r); });
  EXPECT_EQ(taken, (std::vector<std::string>{"any"}));
  EXPECT_EQ(m_.receives(), 1u);
  post(3, 5, "r3");
  m_.erase_receives_if([](const std::string& r) { return r == "r3"; });
  EXPECT_EQ(m_.receives(), 1u);
  taken.clear();
  m_.take_all_receives([&](const std::string& r) { taken.push_back(r); });
  EXPECT_EQ(taken, (std::vector<std::string>{"r2"}));
  EXPECT_EQ(m_.receives(), 0u);

  arrive(1, 5, "keep");
  arrive(1, 5, "drop");
  arrive(2, 5, "drop too");
  m_.erase_unexpected_if(1, [](const std::string& u) { return u == "drop"; });
  m_.erase_all_unexpected_if([](int peer, const std::string&) { return peer == 2; });
  EXPECT_EQ(post(kAnySource, 5, "a"), "keep");
  EXPECT_EQ(post(kAnySource, 5, "b"), "");
}

TEST_F(MatcherTest, HoldCountsPerPeerAndRefusesPastTheLimitCountingNothing) {
  EXPECT_EQ(m_.hold(1, 600, "rank 0"), nullptr);
  EXPECT_EQ(m_.hold(1, 400, "rank 0"), nullptr);  // exactly the limit
  EXPECT_NE(m_.hold(1, 1, "rank 0"), nullptr);
  EXPECT_EQ(m_.held(1), 1000u);
  EXPECT_EQ(m_.hold(2, 1000, "rank 0"), nullptr);  // each peer has its own
  m_.release(1, 600);
  EXPECT_EQ(m_.held(1), 400u);
  EXPECT_NE(m_.hold(1, 601, "rank 0"), nullptr);
  EXPECT_EQ(m_.held(1), 400u);
  EXPECT_EQ(m_.hold(1, 600, "rank 0"), nullptr);
  EXPECT_THROW(m_.release(3, 1), Error);  // more than it holds: a bug, named
  // The error the transport fails with names it, the peer, what it held and the limit.
  const std::exception_ptr refused = m_.hold(1, 1, "rank 0");
  ASSERT_NE(refused, nullptr);
  try {
    std::rethrow_exception(refused);
  } catch (const NetworkError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 0: peer rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find("1001 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("limit of 1000"), std::string::npos) << what;
  }
}

TEST_F(MatcherTest, APeerOutsideTheMatcherIsABugNamedAtOnce) {
  EXPECT_THROW(m_.match(kPeers, 5), Error);
  EXPECT_THROW(post(-2, 5, "r"), Error);
}

// A receive that is a part of an any-source receive takes a message only with its claim; a part
// whose claim another part took leaves, and the next receive takes the message.
TEST(MatcherClaimTest, APartThatLostItsClaimLeavesAndTheNextReceiveTakesTheMessage) {
  struct Part {
    std::shared_ptr<SourceClaim> claim;
  };
  auto claim = std::make_shared<SourceClaim>();
  const auto other = std::make_shared<Part>(Part{claim});  // the part on another transport
  const auto lost = std::make_shared<Part>(Part{claim});
  const auto plain = std::make_shared<Part>();
  Matcher<std::shared_ptr<Part>, std::string> m(2, 1000);
  m.post(kAnySource, 5, lost);
  m.post(1, 5, plain);
  ASSERT_TRUE(claim->take(other.get()));
  std::vector<std::shared_ptr<Part>> left;
  const auto leave = [&](const std::shared_ptr<Part>& p) { left.push_back(p); };
  auto taken = m.match_claiming(1, 5, leave);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, plain);
  EXPECT_EQ(left, std::vector<std::shared_ptr<Part>>{lost});
  EXPECT_EQ(m.receives(), 0u);

  auto free_claim = std::make_shared<SourceClaim>();
  const auto part = std::make_shared<Part>(Part{free_claim});
  m.post(kAnySource, 6, part);
  taken = m.match_claiming(0, 6, leave);
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, part);
  EXPECT_TRUE(free_claim->taken_by_other(other.get()));  // the part took it
  EXPECT_EQ(left.size(), 1u);
  EXPECT_FALSE(m.match_claiming(0, 6, leave).has_value());
}

TEST(SourceClaimTest, TheFirstPartTakesItAndKeepsItTheOthersNever) {
  SourceClaim claim;
  int calls = 0;
  claim.on_complete = [&] { ++calls; };
  int a = 0;
  int b = 0;
  EXPECT_FALSE(claim.taken());
  EXPECT_TRUE(claim.take(&a));
  EXPECT_TRUE(claim.take(&a));
  EXPECT_FALSE(claim.take(&b));
  EXPECT_TRUE(claim.taken_by_other(&b));
  EXPECT_FALSE(claim.taken_by_other(&a));
  claim.completed();
  EXPECT_EQ(calls, 1);
}

TEST(SourceClaimTest, ExactlyOneOfManyRacingPartsTakesIt) {
  for (int round = 0; round < 200; ++round) {
    SourceClaim claim;
    std::atomic<int> winners{0};
    std::vector<int> parts(4);
    std::vector<std::thread> threads;
    for (auto& p : parts) {
      threads.emplace_back([&, part = &p] {
        if (claim.take(part)) winners.fetch_add(1);
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_EQ(winners.load(), 1);
  }
}

// CallNotes (call_notes.h): a message of another call under an op is found whichever came
// first, the receive or the message, across peers and lanes of the op; the same call, an
// unchecked one, or another op is no conflict.
TEST(CallNotesTest, AMessageOfAnotherCallUnderAnOpThisRankReceivesIsAConflictEitherWay) {
  constexpr Call kMine = 0x0101ff0000000400;
  constexpr Call kTheirs = 0x0102ff0000000400;
  const Tag op = make_tag(0, 5);
  {  // this rank's receive first, then a message from another peer on another lane
    CallNotes notes;
    EXPECT_FALSE(notes.posted(lane_tag(op, 0, 1), kMine));
    EXPECT_FALSE(notes.arrived(2, lane_tag(op, 0, 1), kMine));   // the same call
    EXPECT_FALSE(notes.arrived(2, make_tag(0, 6), kTheirs));     // another op
    EXPECT_FALSE(notes.arrived(2, user_tag(0, 5), kUnchecked));  // point-to-point
    EXPECT_TRUE(notes.arrived(3, lane_tag(op, 1, 2), kTheirs));  // another call
    const auto later = notes.posted(op, kMine);  // the op's next receive finds it too
    ASSERT_TRUE(later);
    EXPECT_EQ(later->peer, 3);
    EXPECT_EQ(later->call, kTheirs);
    EXPECT_FALSE(notes.posted(make_tag(0, 6), kTheirs));  // the next op is another matter
  }
  {  // the message first, then this rank's receive
    CallNotes same;
    EXPECT_FALSE(same.arrived(1, op, kTheirs));
    EXPECT_FALSE(same.posted(op, kTheirs));  // its own call: no conflict
    CallNotes other;
    EXPECT_FALSE(other.arrived(1, op, kTheirs));
    EXPECT_FALSE(other.posted(op, kUnchecked));  // an unchecked receive takes any
    const auto conflict = other.posted(lane_tag(op, 3, 0), kMine);
    ASSERT_TRUE(conflict);
    EXPECT_EQ(conflict->peer, 1);
    EXPECT_EQ(conflict->call, kTheirs);
  }
}

// The matcher's side of calls: receives that know their tag and call (what transports' ops
// give Matcher::call_refusal and the failures), posted under op 5 of group 0.
class MatcherCallsTest : public ::testing::Test {
 protected:
  struct Recv {
    Tag tag;
    Call call;
    std::string name;
    std::string describe() const { return name; }
  };
  static constexpr Call kMine = 0x0101ff0000000400;
  static constexpr Call kTheirs = 0x0102ff0000000400;
  const Tag op = make_tag(0, 5);
  Matcher<std::shared_ptr<Recv>, std::string> m{kPeers, 1000};

  void post(int peer, Tag tag, Call call, const std::string& name) {
    auto r = std::make_shared<Recv>(Recv{tag, call, name});
    EXPECT_EQ(m.call_refusal(0, *r), nullptr);
    m.post(peer, tag, r);
  }
};

// check_arrived_call fails the queued receives of the op whose call differs, of every peer and
// lane, and leaves the rest queued.
TEST_F(MatcherCallsTest, AConflictingArrivalFailsTheOpsQueuedReceivesOfAnotherCall) {
  post(0, lane_tag(op, 0, 0), kMine, "lane 0 from 0");
  post(2, lane_tag(op, 0, 1), kMine, "lane 1 from 2");
  post(2, make_tag(0, 6), kTheirs, "next op");
  post(1, user_tag(0, 5), kUnchecked, "point-to-point");
  std::vector<std::string> failed;
  m.check_arrived_call(3, 1, lane_tag(op, 0, 2), kTheirs,
                       [&](const std::shared_ptr<Recv>& r, std::exception_ptr e) {
                         failed.push_back(r->name);
                         try {
                           std::rethrow_exception(e);
                         } catch (const CallMismatch& mm) {
                           EXPECT_EQ(mm.self, 3);
                           EXPECT_EQ(mm.peer, 1);
                           EXPECT_EQ(mm.expected, kMine);
                           EXPECT_EQ(mm.received, kTheirs);
                         }
                       });
  std::sort(failed.begin(), failed.end());
  EXPECT_EQ(failed, (std::vector<std::string>{"lane 0 from 0", "lane 1 from 2"}));
  EXPECT_EQ(m.receives(), 2u);
}

// refuse: a receive that took a message of another size fails alone; one that took a message of
// another call fails and loses its op on this rank. The op's other queued receives fail (a rank
// waiting for the op's other peers would wait for messages the other call never sends), and so
// does its next receive.
TEST_F(MatcherCallsTest, AReceiveThatTookAMessageOfAnotherCallFailsTheRestOfItsOp) {
  post(1, entry_tag(op), kMine, "entry from 1");
  post(1, op, kMine, "data from 1");
  post(3, lane_tag(op, 0, 1), kMine, "lane 1 from 3");
  post(2, make_tag(0, 6), kTheirs, "next op");
  std::vector<std::string> failed;
  std::vector<std::string> errors;
  const auto fail = [&](const std::shared_ptr<Recv>& r, std::exception_ptr e) {
    failed.push_back(r->name);
    try {
      std::rethrow_exception(e);
    } catch (const CallMismatch& mm) {
      EXPECT_EQ(mm.peer, 1);
      EXPECT_EQ(mm.expected, kMine);
      EXPECT_EQ(mm.received, kTheirs);
      errors.push_back("call");
    } catch (const InvalidArgument& ia) {
      errors.push_back(ia.what());
    }
  };
  const auto entry = m.match(1, entry_tag(op));
  ASSERT_TRUE(entry);
  EXPECT_FALSE(m.refuse(*entry, 0, 1, kMine, 8, 8, fail));  // it takes the message
  EXPECT_TRUE(failed.empty());
  EXPECT_TRUE(m.refuse(*entry, 0, 1, kMine, 8, 4, fail));  // sizes: it alone fails
  EXPECT_EQ(failed, (std::vector<std::string>{"entry from 1"}));
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("size mismatch: the receive buffer has 8 bytes but the message from "
                           "rank 1 has 4 bytes"),
            std::string::npos)
      << errors[0];
  failed.clear();
  EXPECT_TRUE(m.refuse(*entry, 0, 1, kTheirs, 8, 8, fail));
  std::sort(failed.begin(), failed.end());
  EXPECT_EQ(failed, (std::vector<std::string>{"data from 1", "entry from 1", "lane 1 from 3"}));
  EXPECT_EQ(m.receives(), 1u);  // the next op's
  const Recv later{lane_tag(op, 1, 0), kMine, "later"};
  EXPECT_NE(m.call_refusal(0, later), nullptr);
  const Recv next{make_tag(0, 6), kTheirs, "next"};
  EXPECT_EQ(m.call_refusal(0, next), nullptr);
}

}  // namespace
}  // namespace c10d::inline v1::transport
