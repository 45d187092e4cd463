// ShmTransport's shared slots (shm_slots.cc) and the all_reduce over them
// (algorithms/slot_all_reduce.h), every rank a thread: every rank's bytes arrive in every round,
// rounds far past the two slots' reuse; ranks that publish different ops fail naming each
// other; a rank that never comes is named at the deadline, one that closed its transport at once;
// an abort releases a waiter; the slots
// exist only where every rank shares the host, and belong to one user; the round time
// (algorithms/slot_probe.h) is every rank's alike, the slowest rank's, and ranks on one CPU
// measure as apart.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "../algorithms/ranks.h"
#include "../one_cpu.h"
#include "algorithms/choice.h"
#include "algorithms/slot_all_reduce.h"
#include "algorithms/slot_probe.h"
#include "backends/gloo_like/shm_transport.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "transport/transport.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;
using transport::Clock;

std::atomic<int> group_counter{0};

// `n` thread ranks over shared memory; `keys`: each rank's host key (empty: this host's).
void run_ranks(int n, const std::function<void(int, ShmTransport&)>& fn,
               const std::vector<std::string>& keys = {}) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "shmslots" + std::to_string(group_counter++);
  std::vector<ShmTransport*> shms(static_cast<std::size_t>(n));
  algorithms::testing::run_ranks(
      n,
      [&](int r) {
        auto t = std::make_unique<ShmTransport>(
            store, r, n,
            ShmTransportOptions{.group_name = group,
                                .timeout = 20s,
                                .host_key = keys.empty() ? "" : keys[static_cast<std::size_t>(r)]});
        shms[static_cast<std::size_t>(r)] = t.get();
        return t;
      },
      [&](int r, transport::Transport&) { fn(r, *shms[static_cast<std::size_t>(r)]); });
}

std::vector<std::byte> bytes_of(int r, std::size_t round, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((r * 31 + round * 7 + i) & 0xff);
  return v;
}

TEST(ShmSlotsTest, EveryRanksBytesArriveInEveryRoundOfManySizes) {
  for (int n : {2, 3, 4}) {
    run_ranks(n, [&](int r, ShmTransport& t) {
      transport::SharedSlots* slots = t.shared_slots();
      ASSERT_NE(slots, nullptr);
      const std::size_t max = slots->max_bytes();
      const std::vector<std::size_t> sizes = {0, 1, 8, 31, 32, 33, 1000, max - 1, max};
      for (std::size_t round = 0; round < 300; ++round) {
        const std::size_t size = sizes[round % sizes.size()];
        const auto mine = bytes_of(r, round, size);
        slots->gather(transport::make_tag(0, round), size, mine, Clock::now() + 20s);
        for (int q = 0; q < n; ++q) {
          const auto part = slots->part(q);
          ASSERT_EQ(part.size(), size);
          const auto want = bytes_of(q, round, size);
          ASSERT_TRUE(std::equal(part.begin(), part.end(), want.begin()))
              << "rank " << r << " read rank " << q << "'s bytes of round " << round << " wrong";
        }
      }
    });
  }
}

TEST(ShmSlotsTest, MorePayloadThanASlotHoldsIsRefusedNamingItsSize) {
  run_ranks(2, [&](int, ShmTransport& t) {
    transport::SharedSlots* slots = t.shared_slots();
    ASSERT_NE(slots, nullptr);
    std::vector<std::byte> big(slots->max_bytes() + 1);
    try {
      slots->gather(transport::make_tag(0, 1), 0, big, Clock::now() + 5s);
      ADD_FAILURE() << "an oversized round was taken";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find(std::to_string(big.size()) + " bytes"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(ShmSlotsTest, RanksThatPublishDifferentOpsFailNamingEachOther) {
  run_ranks(3, [&](int r, ShmTransport& t) {
    transport::SharedSlots* slots = t.shared_slots();
    // Rank 2 publishes a different check and size in round 2; the rounds before agree.
    for (std::uint64_t round = 0; round < 2; ++round) {
      slots->gather(transport::make_tag(0, round), 7, bytes_of(r, round, 8), Clock::now() + 20s);
    }
    const std::uint64_t check = r == 2 ? 9 : 7;
    const std::size_t size = r == 2 ? 16 : 8;
    try {
      slots->gather(transport::make_tag(0, 2), check, bytes_of(r, 2, size), Clock::now() + 20s);
      ADD_FAILURE() << "rank " << r << ": mismatched round passed";
    } catch (const transport::SlotMismatch& m) {
      // Ranks 0 and 1 meet rank 2's call; rank 2 meets rank 0's.
      EXPECT_EQ(m.peer, r == 2 ? 0 : 2) << m.what();
      EXPECT_EQ(m.check, r == 2 ? 7u : 9u);
      EXPECT_EQ(m.bytes, r == 2 ? 8u : 16u);
      EXPECT_NE(std::string(m.what()).find("rank " + std::to_string(m.peer) + " published"),
                std::string::npos)
          << m.what();
    }
  });
}

TEST(ShmSlotsTest, ARankThatNeverComesIsNamedAtTheDeadline) {
  run_ranks(3, [&](int r, ShmTransport& t) {
    transport::SharedSlots* slots = t.shared_slots();
    slots->gather(transport::make_tag(0, 0), 1, {}, Clock::now() + 20s);
    if (r == 1) {
      std::this_thread::sleep_for(1500ms);  // stays until the others have timed out
      return;
    }
    const auto start = Clock::now();
    try {
      slots->gather(transport::make_tag(0, 1), 1, {}, Clock::now() + 300ms);
      ADD_FAILURE() << "rank " << r << ": a round without rank 1 completed";
    } catch (const transport::PeerTimeout& e) {
      EXPECT_EQ(e.peer(), 1) << e.what();
      EXPECT_NE(std::string(e.what()).find("whose last round there is 1"), std::string::npos)
          << e.what();
    }
    const auto waited = Clock::now() - start;
    EXPECT_GE(waited, 300ms);
    EXPECT_LT(waited, 1200ms);
  });
}

TEST(ShmSlotsTest, APeerThatClosedItsTransportFailsTheRoundAtOnceNamingIt) {
  run_ranks(2, [&](int r, ShmTransport& t) {
    if (r == 1) return;  // its transport closes as its thread ends
    const auto start = Clock::now();
    try {
      t.shared_slots()->gather(transport::make_tag(0, 0), 1, {}, Clock::now() + 20s);
      ADD_FAILURE() << "a round without rank 1 completed";
    } catch (const NetworkError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 1 closed"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - start, 5s);
  });
}

TEST(ShmSlotsTest, ThisRanksAbortFailsItsWaitingRoundAtOnce) {
  run_ranks(2, [&](int r, ShmTransport& t) {
    if (r == 1) {
      std::this_thread::sleep_for(1s);  // never gathers
      return;
    }
    std::thread aborter([&] {
      std::this_thread::sleep_for(200ms);
      t.abort(std::make_exception_ptr(NetworkError("aborted on purpose")));
    });
    const auto start = Clock::now();
    try {
      t.shared_slots()->gather(transport::make_tag(0, 0), 1, {}, Clock::now() + 20s);
      ADD_FAILURE() << "the round outlived the abort";
    } catch (const NetworkError& e) {
      EXPECT_NE(std::string(e.what()).find("aborted on purpose"), std::string::npos) << e.what();
    }
    EXPECT_LT(Clock::now() - start, 5s);
    aborter.join();
  });
}

TEST(ShmSlotsTest, OnlyAGroupThatSharesOneHostHasSlotsAndOnlyOneUserClaimsThem) {
  run_ranks(4, [&](int, ShmTransport& t) { EXPECT_EQ(t.shared_slots(), nullptr); },
            {"host-a", "host-a", "host-b", "host-b"});
  run_ranks(2, [&](int, ShmTransport& t) {
    ASSERT_NE(t.shared_slots(), nullptr);
    EXPECT_TRUE(t.shared_slots()->claim());
    EXPECT_FALSE(t.shared_slots()->claim());
  });
}

TEST(ShmSlotsTest, SlotAllReduceGivesEveryRankTheSameExactAnswer) {
  using algorithms::testing::expected;
  using algorithms::testing::value;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kPremulSum}) {
    run_ranks(3, [&](int r, ShmTransport& t) {
      for (std::int64_t count : {1, 2, 100, 512}) {
        std::vector<double> data(static_cast<std::size_t>(count));
        for (std::int64_t i = 0; i < count; ++i) data[static_cast<std::size_t>(i)] = value(r, i);
        const Reduction reduction{op, 0.5};
        algorithms::slot_all_reduce(algorithms::testing::context(t, count), *t.shared_slots(),
                                    static_cast<std::uint64_t>(count), DType::kFloat64, reduction,
                                    data.data(), count);
        for (std::int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(data[static_cast<std::size_t>(i)], expected(op, 3, i))
              << reduce_op_name(op) << " count " << count << " element " << i;
        }
      }
    });
  }
}

// A rank's slots that sleep `delay` before each round: a rank slow to every round.
class SlowSlots final : public transport::SharedSlots {
 public:
  SlowSlots(transport::SharedSlots& inner, std::chrono::microseconds delay)
      : inner_(inner), delay_(delay) {}
  std::size_t max_bytes() const override { return inner_.max_bytes(); }
  void gather(transport::Tag tag, std::uint64_t check, std::span<const std::byte> mine,
              Clock::time_point deadline) override {
    std::this_thread::sleep_for(delay_);
    inner_.gather(tag, check, mine, deadline);
  }
  std::span<const std::byte> part(int r) const override { return inner_.part(r); }

 private:
  transport::SharedSlots& inner_;
  const std::chrono::microseconds delay_;
};

TEST(ShmSlotsTest, EveryRankMeasuresTheSameSlotRoundTimeTheSlowestRanks) {
  for (int n : {2, 3}) {
    std::vector<std::chrono::nanoseconds> fast(static_cast<std::size_t>(n));
    std::vector<std::chrono::nanoseconds> slow(static_cast<std::size_t>(n));
    run_ranks(n, [&](int r, ShmTransport& t) {
      transport::SharedSlots& slots = *t.shared_slots();
      const auto ctx = algorithms::testing::context(t, 1);
      fast[static_cast<std::size_t>(r)] = algorithms::slot_round_time(ctx, slots, 1);
      // The last rank sleeps 2 ms before each of its rounds: every rank waits for it.
      SlowSlots slowed(slots, 2ms);
      transport::SharedSlots& s = r == n - 1 ? slowed : slots;
      slow[static_cast<std::size_t>(r)] =
          algorithms::slot_round_time(algorithms::testing::context(t, 2), s, 2);
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(fast[static_cast<std::size_t>(r)], fast[0]) << n << " ranks, rank " << r;
      EXPECT_EQ(slow[static_cast<std::size_t>(r)], slow[0]) << n << " ranks, rank " << r;
    }
    EXPECT_GT(fast[0].count(), 0);
    EXPECT_GE(slow[0], 2ms) << n << " ranks";
    EXPECT_LT(fast[0], slow[0]) << n << " ranks";
  }
}

TEST(ShmSlotsTest, RanksThatTakeTurnsOnOneCpuMeasureAsApart) {
  // Each round waits for the other rank's turn on the CPU (a switch, microseconds), as ranks on
  // cores that share no cache wait for the line to cross.
  const test::OnOneCpu one_cpu;  // the rank threads inherit it
  std::vector<std::chrono::nanoseconds> round(2);
  run_ranks(2, [&](int r, ShmTransport& t) {
    round[static_cast<std::size_t>(r)] =
        algorithms::slot_round_time(algorithms::testing::context(t, 1), *t.shared_slots(), 1);
  });
  EXPECT_EQ(round[0], round[1]);
  EXPECT_TRUE(algorithms::cores_apart(round[0])) << round[0].count() << " ns";
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
