// All-to-all(v), all-gather and reduce-scatter over the in-process transport, every rank a
// thread: swept over world size and block size, every byte checked against its origin (source,
// destination, index) or a closed form; uneven seeded splits with empty blocks; bad arguments
// rejected on every rank before any message; blocks whose sizes the two ends disagree on.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "algorithms/all_gather.h"
#include "algorithms/all_to_all.h"
#include "algorithms/reduce_scatter.h"
#include "c10d/errors.h"
#include "ranks.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::algorithms {
namespace {

using testing::context;
using testing::run_ranks;

using namespace std::chrono_literals;
using Bytes = std::vector<std::byte>;
using Counts = std::vector<std::int64_t>;

// Byte i of the block that rank `src` sends to rank `dst`. For one i, the 64 (src, dst) pairs
// of worlds up to 8 give 64 distinct bytes, so a block from the wrong source, sent to the wrong
// destination, or shifted, shows up.
std::byte origin(int src, int dst, std::int64_t i) {
  return static_cast<std::byte>(((src * 8 + dst) * 3 + i) & 0xff);
}

constexpr std::byte kUntouched{0xee};

// Runs `call` on every rank and expects each to throw InvalidArgument whose message holds every
// string that `needles(rank)` returns.
void expect_invalid_on_every_rank(int n,
                                  const std::function<void(int, transport::Transport&)>& call,
                                  const std::function<std::vector<std::string>(int)>& needles) {
  std::vector<std::string> messages(n);
  run_ranks(n, [&](int r, transport::Transport& t) {
    try {
      call(r, t);
      messages[r] = "no error";
    } catch (const InvalidArgument& e) {
      messages[r] = e.what();
    }
  });
  for (int r = 0; r < n; ++r) {
    for (const std::string& s : needles(r)) {
      EXPECT_NE(messages[r].find(s), std::string::npos)
          << "rank " << r << " lacks '" << s << "': " << messages[r];
    }
  }
}

TEST(AllToAllTest, EveryByteComesFromItsSourceForEveryWorldAndBlockSize) {
  for (int n = 1; n <= 8; ++n) {
    for (std::int64_t block : {0, 1, 7, 1000}) {
      std::vector<Bytes> out(n);
      run_ranks(n, [&](int r, transport::Transport& t) {
        Bytes in(static_cast<std::size_t>(n * block));
        for (int d = 0; d < n; ++d) {
          for (std::int64_t i = 0; i < block; ++i) in[d * block + i] = origin(r, d, i);
        }
        Bytes o(in.size(), kUntouched);
        all_to_all(context(t), in, o, block);
        out[r] = std::move(o);
      });
      for (int r = 0; r < n; ++r) {
        for (int s = 0; s < n; ++s) {
          for (std::int64_t i = 0; i < block; ++i) {
            ASSERT_EQ(out[r][s * block + i], origin(s, r, i))
                << "n " << n << " block " << block << " rank " << r << " from " << s << " i " << i;
          }
        }
      }
    }
  }
}

// counts[s][d]: the bytes rank s sends rank d. Seeded, so every rank and every run agree.
std::vector<Counts> random_counts(int n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int64_t> size(1, 300);
  std::bernoulli_distribution empty(0.25);
  std::vector<Counts> counts(n, Counts(n));
  for (auto& row : counts) {
    for (auto& c : row) c = empty(gen) ? 0 : size(gen);
  }
  return counts;
}

TEST(AllToAllvTest, UnevenSeededSplitsWithEmptyBlocksAndGapsBetweenThem) {
  for (int n = 1; n <= 8; ++n) {
    const std::vector<Counts> counts = random_counts(n, 1234u + static_cast<std::uint32_t>(n));
    std::vector<Bytes> out(n);
    std::vector<Counts> recv_offsets(n);
    run_ranks(n, [&](int r, transport::Transport& t) {
      // Send blocks stored in reverse rank order, receive blocks in rank order, with gaps, so
      // offsets are not just prefix sums of the counts.
      Counts send_counts(n), send_offsets(n), recv_counts(n), recv_offs(n);
      std::int64_t in_size = 0;
      for (int d = n - 1; d >= 0; --d) {
        send_counts[d] = counts[r][d];
        send_offsets[d] = in_size;
        in_size += send_counts[d] + 3;
      }
      std::int64_t out_size = 0;
      for (int s = 0; s < n; ++s) {
        recv_counts[s] = counts[s][r];
        recv_offs[s] = out_size + 5;
        out_size += recv_counts[s] + 5;
      }
      Bytes in(static_cast<std::size_t>(in_size), kUntouched);
      for (int d = 0; d < n; ++d) {
        for (std::int64_t i = 0; i < send_counts[d]; ++i) {
          in[send_offsets[d] + i] = origin(r, d, i);
        }
      }
      Bytes o(static_cast<std::size_t>(out_size), kUntouched);
      all_to_allv(context(t), in, send_counts, send_offsets, o, recv_counts, recv_offs);
      out[r] = std::move(o);
      recv_offsets[r] = std::move(recv_offs);
    });
    for (int r = 0; r < n; ++r) {
      Bytes expect(out[r].size(), kUntouched);
      for (int s = 0; s < n; ++s) {
        for (std::int64_t i = 0; i < counts[s][r]; ++i) {
          expect[recv_offsets[r][s] + i] = origin(s, r, i);
        }
      }
      ASSERT_EQ(out[r], expect) << "n " << n << " rank " << r;  // gaps stay untouched too
    }
  }
}

TEST(AllToAllvTest, ABlockThatDoesNotFitFailsOnEveryRankNamingRankPeerAndSizes) {
  const int n = 3;
  // Each rank's send block for its right neighbour runs 1 byte past the 30-byte input.
  expect_invalid_on_every_rank(
      n,
      [&](int r, transport::Transport& t) {
        Bytes in(30), o(30);
        Counts counts(n, 10), offsets = {0, 10, 20};
        Counts send_offsets = offsets;
        send_offsets[(r + 1) % n] = 21;
        all_to_allv(context(t), in, counts, send_offsets, o, counts, offsets);
      },
      [&](int r) {
        return std::vector<std::string>{"rank " + std::to_string(r),
                                        "peer " + std::to_string((r + 1) % n), "10 bytes",
                                        "offset 21", "30-byte send buffer"};
      });
  // A negative receive count.
  expect_invalid_on_every_rank(
      n,
      [&](int, transport::Transport& t) {
        Bytes in(30), o(30);
        Counts counts(n, 10), offsets = {0, 10, 20};
        Counts recv_counts = counts;
        recv_counts[1] = -1;
        all_to_allv(context(t), in, counts, offsets, o, recv_counts, offsets);
      },
      [&](int r) {
        return std::vector<std::string>{"rank " + std::to_string(r), "peer 1", "-1 bytes",
                                        "receive buffer"};
      });
  // Arrays of the wrong length.
  expect_invalid_on_every_rank(
      n,
      [&](int, transport::Transport& t) {
        Bytes in(30), o(30);
        Counts counts(n, 10), offsets = {0, 10, 20}, short_offsets = {0, 10};
        all_to_allv(context(t), in, counts, short_offsets, o, counts, offsets);
      },
      [&](int r) {
        return std::vector<std::string>{"rank " + std::to_string(r), "send offsets has 2",
                                        "group has 3 ranks"};
      });
  // all_to_all with buffers that are not n equal blocks.
  expect_invalid_on_every_rank(
      n,
      [&](int, transport::Transport& t) {
        Bytes in(30), o(29);
        all_to_all(context(t), in, o, 10);
      },
      [&](int r) {
        return std::vector<std::string>{"rank " + std::to_string(r), "30-byte", "output 29"};
      });
}

// Every step exchanges a message, so ends that disagree on a block's size fail at once with
// the transport's size mismatch, even when one end thinks the block is empty.
TEST(AllToAllvTest, EndsThatDisagreeOnABlockSizeFailInsteadOfHanging) {
  for (std::int64_t sent : {0, 4}) {
    std::vector<std::string> messages(2);
    run_ranks(2, [&](int r, transport::Transport& t) {
      Bytes in(8), o(8);
      Counts send_counts = {4, 4}, recv_counts = {4, 4}, offsets = {0, 4};
      if (r == 0) send_counts[1] = sent;  // rank 1 still expects 3 bytes from rank 0
      if (r == 1) recv_counts[0] = 3;
      try {
        all_to_allv(context(t, 1, 5s), in, send_counts, offsets, o, recv_counts, offsets);
        messages[r] = "no error";
      } catch (const InvalidArgument& e) {
        messages[r] = e.what();
      }
    });
    for (int r = 0; r < 2; ++r) {
      EXPECT_NE(messages[r].find("size mismatch"), std::string::npos)
          << "sent " << sent << " rank " << r << ": " << messages[r];
    }
  }
}

TEST(AllGatherTest, EveryRanksBlockLandsInRankOrderForEveryWorldAndBlockSize) {
  for (int n = 1; n <= 8; ++n) {
    for (std::int64_t block : {0, 1, 7, 1000}) {
      std::vector<Bytes> out(n);
      run_ranks(n, [&](int r, transport::Transport& t) {
        Bytes in(static_cast<std::size_t>(block));
        for (std::int64_t i = 0; i < block; ++i) in[i] = origin(r, 0, i);
        Bytes o(static_cast<std::size_t>(n * block), kUntouched);
        all_gather(context(t), in, o);
        out[r] = std::move(o);
      });
      for (int r = 0; r < n; ++r) {
        for (int s = 0; s < n; ++s) {
          for (std::int64_t i = 0; i < block; ++i) {
            ASSERT_EQ(out[r][s * block + i], origin(s, 0, i))
                << "n " << n << " block " << block << " rank " << r << " from " << s;
          }
        }
      }
    }
  }
}

TEST(AllGatherTest, InPlaceAndReorderedRingGiveTheSameResult) {
  const int n = 5;
  const std::int64_t block = 333;
  std::vector<Bytes> out(n);
  run_ranks(n, [&](int r, transport::Transport& t) {
    Bytes o(static_cast<std::size_t>(n * block), kUntouched);
    for (std::int64_t i = 0; i < block; ++i) o[r * block + i] = origin(r, 0, i);
    const std::span<const std::byte> own(o.data() + r * block, static_cast<std::size_t>(block));
    all_gather(context(t), own, o, {{3, 0, 4, 2, 1}, 512 << 10});
    out[r] = std::move(o);
  });
  for (int r = 0; r < n; ++r) {
    for (int s = 0; s < n; ++s) {
      for (std::int64_t i = 0; i < block; ++i) {
        ASSERT_EQ(out[r][s * block + i], origin(s, 0, i)) << "rank " << r << " from " << s;
      }
    }
  }
}

TEST(AllGatherTest, AnOutputOfTheWrongSizeFailsOnEveryRank) {
  expect_invalid_on_every_rank(
      3,
      [&](int, transport::Transport& t) {
        Bytes in(10), o(31);
        all_gather(context(t), in, o);
      },
      [&](int r) {
        return std::vector<std::string>{"rank " + std::to_string(r), "30-byte", "got 31"};
      });
}

// Rank q's contribution to element i of rank d's result: exact in float32 sums and products.
double value(int q, int d, std::int64_t i) { return (q + 1) + ((d + i) % 5); }

// The closed form of element i of rank d's result over n ranks (PREMUL_SUM's factor is 0.5).
double expected(ReduceOp op, int n, int d, std::int64_t i) {
  const double m = static_cast<double>((d + i) % 5);
  const double sum = n * (n + 1) / 2.0 + n * m;
  switch (op) {
    case ReduceOp::kMax:
      return n + m;
    case ReduceOp::kAvg:
      return sum / n;
    case ReduceOp::kPremulSum:
      return 0.5 * sum;
    default:
      return sum;
  }
}

// Where a reduce_scatter writes its result: a buffer of its own, this rank's block of the input
// (in place), or a block-sized window of the input that starts one element in (overlapping two
// blocks, which the ring must not read after writing).
enum class Placement { kSeparate, kOwnBlock, kShifted };

template <typename T>
void check_reduce_scatter(int n, std::int64_t count, DType dtype, ReduceOp op,
                          std::int64_t segment_bytes, Placement placement = Placement::kSeparate,
                          std::vector<int> order = {}) {
  std::vector<std::vector<T>> out(n);
  std::vector<char> input_kept(n);  // not vector<bool>: ranks write it concurrently
  run_ranks(n, [&](int r, transport::Transport& t) {
    std::vector<T> in(static_cast<std::size_t>(n * count + 1));
    for (int d = 0; d < n; ++d) {
      for (std::int64_t i = 0; i < count; ++i) in[d * count + i] = static_cast<T>(value(r, d, i));
    }
    const std::vector<T> before = in;
    std::vector<T> separate(static_cast<std::size_t>(count));
    T* const o = placement == Placement::kSeparate   ? separate.data()
                 : placement == Placement::kOwnBlock ? in.data() + r * count
                                                     : in.data() + 1;
    reduce_scatter(context(t), dtype, {op, 0.5}, in.data(), o, count, {order, segment_bytes});
    out[r].assign(o, o + count);
    input_kept[r] = in == before;
  });
  for (int r = 0; r < n; ++r) {
    if (placement == Placement::kSeparate) {
      EXPECT_TRUE(input_kept[r]) << "rank " << r << " input changed";
    }
    for (std::int64_t i = 0; i < count; ++i) {
      const double expect = expected(op, n, r, i);
      ASSERT_NEAR(static_cast<double>(out[r][i]), expect, 1e-6 * std::abs(expect))
          << "n " << n << " count " << count << " rank " << r << " i " << i << " op "
          << reduce_op_name(op) << " dtype " << dtype_name(dtype) << " placement "
          << static_cast<int>(placement);
    }
  }
}

TEST(ReduceScatterTest, ClosedFormsForEveryWorldSizeCountAndOp) {
  for (int n = 1; n <= 8; ++n) {
    for (std::int64_t count : {0, 1, 7, 1000}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
        check_reduce_scatter<float>(n, count, DType::kFloat32, op, 512 << 10);
      }
      check_reduce_scatter<std::int32_t>(n, count, DType::kInt32, ReduceOp::kSum, 512 << 10);
    }
  }
}

TEST(ReduceScatterTest, SmallSegmentsGiveTheSameResult) {
  for (int n : {2, 3, 7}) {
    check_reduce_scatter<float>(n, 1001, DType::kFloat32, ReduceOp::kAvg, 12);
    check_reduce_scatter<std::int32_t>(n, 1001, DType::kInt32, ReduceOp::kSum, 12);
  }
}

// In place, the output is this rank's block of the input; shifted, it overlaps two blocks. Both
// must give the closed forms, with segments small enough that each step has several.
TEST(ReduceScatterTest, OutputInsideTheInputGivesTheSameResult) {
  for (int n : {1, 2, 3, 5}) {
    for (Placement placement : {Placement::kOwnBlock, Placement::kShifted}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
        check_reduce_scatter<float>(n, 1001, DType::kFloat32, op, 64, placement);
      }
      check_reduce_scatter<std::int32_t>(n, 7, DType::kInt32, ReduceOp::kSum, 8, placement);
    }
  }
}

TEST(ReduceScatterTest, AReorderedRingGivesTheSameResult) {
  for (Placement placement : {Placement::kSeparate, Placement::kOwnBlock}) {
    check_reduce_scatter<float>(4, 999, DType::kFloat32, ReduceOp::kSum, 256, placement,
                                {2, 0, 3, 1});
    check_reduce_scatter<std::int32_t>(5, 10, DType::kInt32, ReduceOp::kMax, 8, placement,
                                       {4, 1, 0, 3, 2});
  }
}

// Each rank's blocks in buffers of their own, written to a separate output, to this rank's own
// block (in place), or to another of its blocks (which the ring must not read after writing).
TEST(ReduceScatterTest, BlocksInSeparateBuffersGiveTheClosedForms) {
  enum class Out { kSeparate, kOwnBlock, kNextBlock };
  for (int n : {1, 2, 3, 5}) {
    for (Out where : {Out::kSeparate, Out::kOwnBlock, Out::kNextBlock}) {
      for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kPremulSum}) {
        constexpr std::int64_t count = 301;
        std::vector<std::vector<float>> out(n);
        std::vector<char> others_kept(n);
        run_ranks(n, [&](int r, transport::Transport& t) {
          std::vector<std::vector<float>> blocks(n, std::vector<float>(count));
          for (int d = 0; d < n; ++d) {
            for (std::int64_t i = 0; i < count; ++i) blocks[d][i] = value(r, d, i);
          }
          const auto before = blocks;
          std::vector<float> separate(count);
          const int into = where == Out::kNextBlock ? (r + 1) % n : r;
          float* o = where == Out::kSeparate ? separate.data() : blocks[into].data();
          std::vector<const void*> inputs;
          for (const auto& b : blocks) inputs.push_back(b.data());
          reduce_scatter_blocks(context(t), DType::kFloat32, {op, 0.5}, inputs, o, count,
                                {{}, 256});
          out[r].assign(o, o + count);
          bool kept = true;
          for (int d = 0; d < n; ++d) {
            if (where == Out::kSeparate || d != into) kept = kept && blocks[d] == before[d];
          }
          others_kept[r] = kept;
        });
        for (int r = 0; r < n; ++r) {
          EXPECT_TRUE(others_kept[r]) << "rank " << r << " changed a block it does not write";
          for (std::int64_t i = 0; i < count; ++i) {
            const double expect = expected(op, n, r, i);
            ASSERT_NEAR(out[r][i], expect, 1e-6 * std::abs(expect))
                << "n " << n << " rank " << r << " i " << i << " op " << reduce_op_name(op)
                << " output " << static_cast<int>(where);
          }
        }
      }
    }
  }
}

TEST(ReduceScatterTest, BadArgumentsFailOnEveryRankBeforeAnyMessage) {
  expect_invalid_on_every_rank(
      3,
      [&](int, transport::Transport& t) {
        std::vector<float> in(30), o(10);
        reduce_scatter(context(t), DType::kFloat32, {ReduceOp::kBxor, 1.0}, in.data(), o.data(),
                       10);
      },
      [&](int) { return std::vector<std::string>{"float32"}; });
  expect_invalid_on_every_rank(
      3,
      [&](int, transport::Transport& t) {
        std::vector<std::int32_t> in(30), o(10);
        reduce_scatter(context(t), DType::kInt32, {ReduceOp::kAvg, 1.0}, in.data(), o.data(), 10);
      },
      [&](int) { return std::vector<std::string>{"int32"}; });
  expect_invalid_on_every_rank(
      3,
      [&](int, transport::Transport& t) {
        float dummy = 0;
        reduce_scatter(context(t), DType::kFloat32, {}, &dummy, &dummy, -1);
      },
      [&](int r) {
        return std::vector<std::string>{"rank " + std::to_string(r), "-1"};
      });
}

}  // namespace
}  // namespace c10d::inline v1::algorithms
