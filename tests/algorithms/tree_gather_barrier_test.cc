// Rooted and synchronising collectives over the in-process transport, every rank a thread: the
// binomial-tree, chain and dissemination pattern arithmetic alone; tree and pipelined-chain
// broadcast, tree reduce, gather and scatter swept over world size, root and count against
// closed forms; a barrier that nobody leaves early, and one that times out on a missing rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <functional>
#include <latch>
#include <mutex>
#include <thread>
#include <vector>

#include "algorithms/barrier.h"
#include "algorithms/entry_check.h"
#include "algorithms/gather_scatter.h"
#include "algorithms/tree.h"
#include "c10d/errors.h"
#include "ranks.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::algorithms {
namespace {

using testing::context;
using testing::expected;
using testing::run_ranks;
using testing::value;

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;

// Byte i of `source`'s payload: distinct per source and position, so a shifted or misrouted
// segment shows.
std::byte pattern_byte(int source, std::size_t i) {
  return static_cast<std::byte>((i * 131 + static_cast<std::size_t>(source) * 29 + 7) & 0xff);
}

Bytes payload(int source, std::size_t size) {
  Bytes b(size);
  for (std::size_t i = 0; i < size; ++i) b[i] = pattern_byte(source, i);
  return b;
}

// ---- Pattern arithmetic ----

TEST(TreePatternTest, EveryRankReachedOnceWithConsistentParentsAndLogDepth) {
  for (int n = 1; n <= 17; ++n) {
    const int max_depth = std::bit_width(static_cast<unsigned>(n) - 1);
    for (int root = 0; root < n; ++root) {
      EXPECT_EQ(binomial_parent(n, root, root), -1);
      std::vector<int> reached(n, 0);
      std::vector<int> depth(n, 0);
      std::vector<int> frontier = {root};
      reached[root] = 1;
      while (!frontier.empty()) {
        std::vector<int> next;
        for (int r : frontier) {
          const std::vector<int> children = binomial_children(n, root, r);
          for (std::size_t j = 0; j < children.size(); ++j) {
            const int c = children[j];
            ASSERT_GE(c, 0);
            ASSERT_LT(c, n);
            EXPECT_EQ(binomial_parent(n, root, c), r) << "n " << n << " root " << root;
            // Largest subtree first: virtual distances to the children strictly decrease.
            if (j > 0) {
              EXPECT_GT((children[j - 1] - r + n) % n, (c - r + n) % n);
            }
            ++reached[c];
            depth[c] = depth[r] + 1;
            next.push_back(c);
          }
        }
        frontier = std::move(next);
      }
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(reached[r], 1) << "n " << n << " root " << root << " rank " << r;
        EXPECT_LE(depth[r], max_depth) << "n " << n << " root " << root << " rank " << r;
        if (r != root) {
          // A rank is its parent's child, and nobody else's.
          const std::vector<int> siblings = binomial_children(n, root, binomial_parent(n, root, r));
          EXPECT_EQ(std::count(siblings.begin(), siblings.end(), r), 1);
        }
      }
    }
  }
}

TEST(TreePatternTest, ChainVisitsRanksInOrderRotatedToTheRoot) {
  for (int n = 1; n <= 17; ++n) {
    for (int root = 0; root < n; ++root) {
      EXPECT_EQ(chain_prev(n, root, root), -1);
      int r = root;
      for (int hop = 1; hop < n; ++hop) {
        const int next = chain_next(n, root, r);
        ASSERT_EQ(next, (root + hop) % n);
        ASSERT_EQ(chain_prev(n, root, next), r);
        r = next;
      }
      EXPECT_EQ(chain_next(n, root, r), -1) << "n " << n << " root " << root;
    }
  }
}

TEST(BarrierPatternTest, AfterTheLastRoundEveryRankHasHeardFromEveryRank) {
  for (int n = 1; n <= 17; ++n) {
    EXPECT_EQ(dissemination_rounds(n), static_cast<int>(std::ceil(std::log2(n))));
    // heard[r][q]: rank q's arrival has reached rank r, directly or through earlier tokens.
    std::vector<std::vector<bool>> heard(n, std::vector<bool>(n, false));
    for (int r = 0; r < n; ++r) heard[r][r] = true;
    for (int k = 0; k < dissemination_rounds(n); ++k) {
      auto before = heard;
      for (int r = 0; r < n; ++r) {
        const int from = dissemination_recv_peer(n, r, k);
        ASSERT_EQ(dissemination_send_peer(n, from, k), r) << "n " << n << " round " << k;
        for (int q = 0; q < n; ++q) heard[r][q] = heard[r][q] || before[from][q];
      }
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(std::count(heard[r].begin(), heard[r].end(), true), n) << "n " << n << " r " << r;
    }
  }
}

// ---- Broadcast ----

using BroadcastFn = std::function<void(const Context&, std::span<std::byte>, int)>;

void check_broadcast(const char* name, const BroadcastFn& fn) {
  for (int n = 1; n <= 8; ++n) {
    for (std::size_t count : {0, 1, 7, 1000, 1 << 20}) {
      for (int root = 0; root < n; ++root) {
        std::vector<Bytes> out(n);
        run_ranks(n, [&](int r, transport::Transport& t) {
          Bytes data = r == root ? payload(root, count) : Bytes(count, std::byte{0xee});
          fn(context(t), data, root);
          out[r] = std::move(data);
        });
        const Bytes expect = payload(root, count);
        for (int r = 0; r < n; ++r) {
          ASSERT_TRUE(out[r] == expect)
              << name << " n " << n << " count " << count << " root " << root << " rank " << r;
        }
      }
    }
  }
}

TEST(BroadcastTest, TreeCopiesRootBytesToEveryRankForEveryRoot) {
  check_broadcast("tree", [](const Context& ctx, std::span<std::byte> d, int root) {
    tree_broadcast(ctx, d, root);
  });
}

TEST(BroadcastTest, PipelinedChainCopiesRootBytesToEveryRankForEveryRoot) {
  // Segments that do not divide the counts: 3 bytes for the small ones (hundreds of segments in
  // flight along the chain), 64 KiB + 1 for the large one.
  check_broadcast("chain", [](const Context& ctx, std::span<std::byte> d, int root) {
    pipelined_broadcast(ctx, d, root, d.size() > 1000 ? (64 << 10) + 1 : 3);
  });
}

// ---- Reduce ----

template <typename T>
void check_reduce(DType dtype, ReduceOp op) {
  for (int n = 1; n <= 8; ++n) {
    for (std::int64_t count : {0, 1, 7, 1000}) {
      for (int root = 0; root < n; ++root) {
        std::vector<T> out;
        run_ranks(n, [&](int r, transport::Transport& t) {
          std::vector<T> data(static_cast<std::size_t>(count));
          for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<T>(value(r, i));
          tree_reduce(context(t), dtype, {op, 0.5}, data.data(), count, root);
          if (r == root) out = std::move(data);
        });
        ASSERT_EQ(static_cast<std::int64_t>(out.size()), count);
        for (std::int64_t i = 0; i < count; ++i) {
          const double expect = expected(op, n, i);
          ASSERT_NEAR(static_cast<double>(out[i]), expect, 1e-6 * expect)
              << "n " << n << " root " << root << " i " << i << " op " << reduce_op_name(op)
              << " dtype " << dtype_name(dtype);
        }
      }
    }
  }
}

TEST(TreeReduceTest, Float32SumMaxAvgPremulAtEveryRoot) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
    check_reduce<float>(DType::kFloat32, op);
  }
}

TEST(TreeReduceTest, Int64SumAtEveryRoot) {
  check_reduce<std::int64_t>(DType::kInt64, ReduceOp::kSum);
}

TEST(TreeReduceTest, BadReductionFailsOnEveryRankBeforeAnyMessage) {
  std::atomic<int> failures{0};
  run_ranks(3, [&](int, transport::Transport& t) {
    std::vector<std::int64_t> data(4, 1);
    try {
      tree_reduce(context(t), DType::kInt64, {ReduceOp::kAvg, 1.0}, data.data(), 4, 1);
    } catch (const InvalidArgument&) {
      ++failures;
    }
  });
  EXPECT_EQ(failures.load(), 3);
}

// ---- Gather and scatter ----

// Rank q's share is 4q bytes: sizes differ per rank, and rank 0 sends an empty message.
std::size_t share_bytes(int q) { return static_cast<std::size_t>(4 * q); }

TEST(GatherTest, RootHoldsEveryRanksBytesInRankOrder) {
  for (int n = 1; n <= 8; ++n) {
    for (int root = 0; root < n; ++root) {
      std::vector<Bytes> at_root(n);
      run_ranks(n, [&](int r, transport::Transport& t) {
        const Bytes input = payload(r, share_bytes(r));
        std::vector<std::span<std::byte>> outputs;
        if (r == root) {
          for (int q = 0; q < n; ++q) {
            at_root[q].assign(share_bytes(q), std::byte{0xee});
            outputs.emplace_back(at_root[q]);
          }
        }
        gather(context(t), input, outputs, root);
      });
      for (int q = 0; q < n; ++q) {
        ASSERT_TRUE(at_root[q] == payload(q, share_bytes(q)))
            << "n " << n << " root " << root << " from " << q;
      }
    }
  }
}

TEST(ScatterTest, EveryRankGetsItsSliceOfTheRoot) {
  for (int n = 1; n <= 8; ++n) {
    for (int root = 0; root < n; ++root) {
      std::vector<Bytes> out(n);
      run_ranks(n, [&](int r, transport::Transport& t) {
        std::vector<Bytes> slices;
        std::vector<std::span<const std::byte>> inputs;
        if (r == root) {
          for (int q = 0; q < n; ++q) slices.push_back(payload(100 + q, share_bytes(q)));
          for (const Bytes& s : slices) inputs.emplace_back(s);
        }
        Bytes output(share_bytes(r), std::byte{0xee});
        scatter(context(t), inputs, output, root);
        out[r] = std::move(output);
      });
      for (int q = 0; q < n; ++q) {
        ASSERT_TRUE(out[q] == payload(100 + q, share_bytes(q))) << "n " << n << " root " << root;
      }
    }
  }
}

TEST(GatherTest, RootWithTooFewOutputsFailsNamingRankAndSizes) {
  run_ranks(3, [&](int r, transport::Transport& t) {
    if (r != 0) return;  // the root fails before any message, so peers would only time out
    Bytes a(4), b(4), in(4);
    std::vector<std::span<std::byte>> outputs = {a, b};
    try {
      gather(context(t), in, outputs, 0);
      ADD_FAILURE() << "no error";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
      EXPECT_NE(what.find("2 per-rank buffers"), std::string::npos) << what;
      EXPECT_NE(what.find("size 3"), std::string::npos) << what;
    }
  });
}

TEST(GatherTest, PeerSizeMismatchFailsBothSidesNamingThePeer) {
  std::vector<std::string> errors(2);
  run_ranks(2, [&](int r, transport::Transport& t) {
    Bytes in(r == 1 ? 5 : 4), slot0(4), slot1(4);
    std::vector<std::span<std::byte>> outputs;
    if (r == 0) outputs = {slot0, slot1};
    try {
      gather(context(t, 1, 5s), in, outputs, 0);
    } catch (const InvalidArgument& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("rank 1"), std::string::npos) << errors[0];
  EXPECT_NE(errors[0].find('5'), std::string::npos) << errors[0];
  EXPECT_FALSE(errors[1].empty());
}

TEST(ScatterTest, NonRootWithInputsFailsNamingItsRank) {
  run_ranks(2, [&](int r, transport::Transport& t) {
    if (r != 1) return;
    Bytes slice(1), output(1);
    std::vector<std::span<const std::byte>> inputs = {slice, slice};
    EXPECT_THROW(scatter(context(t), inputs, output, 0), InvalidArgument);
  });
}

// ---- Barrier ----

TEST(BarrierTest, NoRankLeavesBeforeEveryRankArrived) {
  constexpr int kIterations = 5;
  for (int n = 1; n <= 9; ++n) {
    std::vector<std::atomic<int>> arrived(kIterations);
    std::atomic<int> early{0};
    run_ranks(n, [&](int r, transport::Transport& t) {
      for (int it = 0; it < kIterations; ++it) {
        // Staggered arrivals: a different rank is last in every iteration.
        if ((r + it) % n == n - 1) std::this_thread::sleep_for(20ms);
        arrived[it].fetch_add(1);
        barrier(context(t, static_cast<std::uint64_t>(it + 1)));
        if (arrived[it].load() != n) early.fetch_add(1);
      }
    });
    EXPECT_EQ(early.load(), 0) << "n " << n;
  }
}

TEST(BarrierTest, ARankThatNeverJoinsTimesOutTheOthersByTheirDeadline) {
  constexpr int kN = 5;
  constexpr int kAbsent = 3;
  constexpr auto kTimeout = 300ms;
  std::vector<std::string> outcome(kN);
  std::vector<transport::Clock::duration> took(kN);
  run_ranks(kN, [&](int r, transport::Transport& t) {
    if (r == kAbsent) return;
    const auto start = transport::Clock::now();
    try {
      barrier(context(t, 1, kTimeout));
      outcome[r] = "left the barrier";
    } catch (const TimeoutError&) {
      outcome[r] = "timeout";
    }
    took[r] = transport::Clock::now() - start;
  });
  for (int r = 0; r < kN; ++r) {
    if (r == kAbsent) continue;
    EXPECT_EQ(outcome[r], "timeout") << "rank " << r;
    EXPECT_GE(took[r], kTimeout - 5ms) << "rank " << r;
    EXPECT_LT(took[r], kTimeout + 2s) << "rank " << r;
  }
}

// ---- Entry check of rooted ops ----

TEST(EntryCheckTest, RanksThatEnterOneCallLeaveOnceAllEntered) {
  for (int n = 1; n <= 7; ++n) {
    std::atomic<int> entered{0};
    std::atomic<int> early{0};
    run_ranks(n, [&](int r, transport::Transport& t) {
      Context ctx = context(t);
      ctx.call = 7;
      if (r == n - 1) std::this_thread::sleep_for(20ms);  // the last to enter
      entered.fetch_add(1);
      EntryCheck entry(ctx);
      entry.finish();
      if (entered.load() != n) early.fetch_add(1);
    });
    EXPECT_EQ(early.load(), 0) << "n " << n;
  }
}

// Rank 2 of 4 entered another call (another root, say): the ranks that hear from it fail naming
// it and both calls, rank 2 fails on the first message it gets, and no rank leaves the check as
// if all agreed.
TEST(EntryCheckTest, ARankOfAnotherCallIsNamedAndNoRankLeaves) {
  constexpr int kN = 4;
  std::vector<std::string> outcome(kN);
  // In-process a send completes only with its receive: a rank keeps its check (and the sends it
  // posted) until every rank is done, as a real wire keeps what was sent.
  std::latch done(kN);
  run_ranks(kN, [&](int r, transport::Transport& t) {
    Context ctx = context(t, 1, 500ms);
    ctx.call = r == 2 ? 8 : 7;
    EntryCheck entry(ctx);
    try {
      entry.finish();
      outcome[r] = "left";
    } catch (const transport::CallMismatch& m) {
      outcome[r] = "rank " + std::to_string(m.peer) + " call " + std::to_string(m.received);
    } catch (const TimeoutError&) {
      outcome[r] = "timeout";
    }
    done.arrive_and_wait();
  });
  EXPECT_EQ(outcome[2], "rank 1 call 7");  // round 0: its predecessor
  EXPECT_EQ(outcome[3], "rank 2 call 8");
  for (int r : {0, 1}) {
    EXPECT_TRUE(outcome[r] == "timeout" || outcome[r] == "rank 2 call 8")
        << r << ": " << outcome[r];
  }
}

}  // namespace
}  // namespace c10d::inline v1::algorithms
