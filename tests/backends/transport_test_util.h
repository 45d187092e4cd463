// What the transport tests share: this process's open sockets, a deadline far enough off for any
// of them, a byte pattern that differs per seed and per 512-byte block (so a shifted or swapped
// chunk shows), this process's memory as the kernel counts it, the all-reduce algorithms checked
// against closed forms over a transport, and what a pending receive's heard() says.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <string>
#include <vector>

#include "../algorithms/ranks.h"
#include "../transport/call_mismatch.h"
#include "algorithms/context.h"
#include "algorithms/halving_doubling_all_reduce.h"
#include "algorithms/ring_all_reduce.h"
#include "c10d/errors.h"
#include "transport/transport.h"

namespace c10d::inline v1::testing {

// Counts `latch` down once: at now(), else when it goes. A rank whose part throws still releases
// the ranks that wait for it, which then fail at their deadlines rather than hang.
class Release {
 public:
  explicit Release(std::latch& latch) : latch_(latch) {}
  Release(const Release&) = delete;
  Release& operator=(const Release&) = delete;
  ~Release() { now(); }
  void now() {
    if (!done_) latch_.count_down();
    done_ = true;
  }

 private:
  std::latch& latch_;
  bool done_ = false;
};

// Open sockets of this process: the links in /proc/self/fd that name a socket.
inline int open_sockets() {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const auto target = std::filesystem::read_symlink(e.path(), ec);
    if (!ec && target.string().starts_with("socket:")) ++n;
  }
  return n;
}

inline transport::Clock::time_point soon() {
  return transport::Clock::now() + std::chrono::seconds(20);
}

inline std::vector<std::byte> pattern(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((i * 131 + seed * 7 + (i >> 9)) & 0xff);
  return v;
}

// An acknowledgement owed at close (backends/gloo_like/shm_cma.cc): rank 0 fills its ring to
// rank 1 with a message of `fill` bytes (with its header, exactly the ring), copies rank 1's
// single-copy message of `bytes` (its receive completes, the ack still owed) and closes its
// transport at once (`close`); rank 1 then frees the room, and its send must complete.
// `single_copy`: whether rank 1's sends to rank 0 go single-copy, as the scenario needs.
inline void ack_owed_at_close(int r, transport::Transport& t, std::size_t bytes, std::size_t fill,
                              bool single_copy, const std::function<void()>& close,
                              std::latch& sent, std::latch& received) {
  if (r == 0) {
    Release release(received);
    sent.wait();
    auto send = t.isend(1, 2, pattern(fill, 1));
    std::vector<std::byte> got(bytes);
    t.irecv(1, 1, got)->wait(soon());
    EXPECT_EQ(got, pattern(bytes, 0));
    send->wait(soon());
    release.now();
    close();
    return;
  }
  Release release(sent);
  ASSERT_TRUE(single_copy);
  const auto data = pattern(bytes, 0);
  auto send = t.isend(0, 1, data);
  release.now();
  received.wait();
  std::vector<std::byte> got(fill);
  t.irecv(0, 2, got)->wait(soon());
  EXPECT_EQ(got, pattern(fill, 1));
  send->wait(transport::Clock::now() + std::chrono::seconds(5));
}

// A field of /proc/self/status in KiB ("VmRSS": resident; "VmSize": all mapped, so an
// allocation shows even before its pages are touched); 0 when absent.
inline std::uint64_t memory_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

// Runs fn(rank, transport) on `n` ranks of the transport under test.
using RunRanks =
    std::function<void(int n, const std::function<void(int, transport::Transport&)>& fn)>;

// Ring (with `segment`-element segments) and halving-doubling all_reduce sums of `count` floats
// on 2..max_ranks ranks, every element of every rank against its closed form.
inline void expect_all_reduce_closed_forms(const RunRanks& run, int max_ranks, std::int64_t count,
                                           std::int64_t segment) {
  using algorithms::testing::expected;
  using algorithms::testing::value;
  for (int n = 2; n <= max_ranks; ++n) {
    for (bool ring : {true, false}) {
      std::vector<std::vector<float>> out(n);
      run(n, [&](int r, transport::Transport& t) {
        std::vector<float> data(count);
        for (std::int64_t i = 0; i < count; ++i) data[i] = static_cast<float>(value(r, i));
        algorithms::Context ctx{t, transport::make_tag(0, 1), soon()};
        if (ring) {
          algorithms::ring_all_reduce(ctx, DType::kFloat32, {ReduceOp::kSum, 1.0}, data.data(),
                                      count, {{}, segment});
        } else {
          algorithms::halving_doubling_all_reduce(ctx, DType::kFloat32, {ReduceOp::kSum, 1.0},
                                                  data.data(), count);
        }
        out[r] = std::move(data);
      });
      for (int r = 0; r < n; ++r) {
        for (std::int64_t i = 0; i < count; ++i) {
          ASSERT_EQ(out[r][i], static_cast<float>(expected(ReduceOp::kSum, n, i)))
              << "n " << n << " ring " << ring << " rank " << r << " i " << i;
        }
      }
    }
  }
}

// Two ranks: a pending receive's heard() says what its rank last heard from the receive's peer,
// and only reads: nothing before a message came from it, then the last one's tag, while the
// receive stays pending.
inline void expect_heard_names_the_last_message(int r, transport::Transport& t) {
  const auto data = pattern(8, r);
  std::vector<std::byte> got(8);
  if (r == 0) {
    t.irecv(1, 4, got)->wait(soon());
    t.isend(1, 5, data)->wait(soon());
    t.irecv(1, 6, got)->wait(soon());  // stays until rank 1 looked: a closed peer fails a receive
    return;
  }
  std::vector<std::byte> never(4);
  auto pending = t.irecv(0, 7, never);
  EXPECT_FALSE(pending->heard().known);
  t.isend(0, 4, data)->wait(soon());  // rank 0 sends tag 5 only after this
  t.irecv(0, 5, got)->wait(soon());
  const transport::PeerActivity heard = pending->heard();
  EXPECT_TRUE(heard.known);
  EXPECT_EQ(heard.tag, 5u);
  EXPECT_LT(heard.ago, std::chrono::seconds(20));
  EXPECT_FALSE(pending->test());
  EXPECT_EQ(pending->heard().tag, 5u);
  t.isend(0, 6, data)->wait(soon());
}

// Two ranks, each message of `bytes`: a receive that meets a message of another call fails with
// a CallMismatch naming both calls (compared before sizes: the receive's buffer is twice the
// message), whether the receive was posted first or the message came first; the message is
// dropped and the next one (of the next op: this one is lost) arrives whole. The op's other
// receive (another lane, whose message the other call never sends) fails with it, rather than
// wait. Rank 0 sends, rank 1 receives; unchecked messages on other tags say when to go on.
inline void expect_calls_checked(int r, transport::Transport& t, std::size_t bytes) {
  constexpr transport::Call kMine = 0x0101ff0000001000;    // what rank 1 runs
  constexpr transport::Call kTheirs = 0x0102ff0000001000;  // what rank 0 sends
  const transport::Tag tag = transport::make_tag(0, 5);
  const auto data = pattern(bytes, 1);
  std::byte token{1};
  if (r == 0) {
    t.irecv(1, 100, std::span(&token, 1))->wait(soon());  // rank 1's receive is posted
    t.isend(1, tag, data, kTheirs)->wait(soon());
    // Nothing more of the op until rank 1 saw its other receive fail: a message that waits
    // unexpected would fail it too (check_arrived_call).
    t.irecv(1, 103, std::span(&token, 1))->wait(soon());
    t.isend(1, tag, data, kTheirs)->wait(soon());  // this one waits for its receive
    t.isend(1, 101, std::span(&token, 1))->wait(soon());
    t.isend(1, transport::make_tag(0, 6), data, kMine)->wait(soon());
    t.irecv(1, 102, std::span(&token, 1))->wait(soon());  // open until rank 1 posted everything
    return;
  }
  const transport::Tag lane = transport::lane_tag(tag, 0, 1);
  for (int posted_first : {1, 0}) {
    std::vector<std::byte> got(2 * bytes, std::byte{0});
    std::vector<std::byte> other_got(bytes);
    std::unique_ptr<transport::Request> recv;
    std::unique_ptr<transport::Request> other;
    if (posted_first) {
      other = t.irecv(0, lane, other_got, kMine);
      recv = t.irecv(0, tag, got, kMine);
      t.isend(0, 100, std::span(&token, 1))->wait(soon());
    } else {
      t.irecv(0, 101, std::span(&token, 1))->wait(soon());  // behind the message, in its stream
      recv = t.irecv(0, tag, got, kMine);
      other = t.irecv(0, lane, other_got, kMine);
    }
    SCOPED_TRACE(posted_first ? "the receive posted first" : "the message came first");
    const std::string what = expect_call_mismatch(*recv, {1, 0, tag, kMine, kTheirs}, soon());
    EXPECT_NE(what.find("0x102ff0000001000"), std::string::npos) << what;
    EXPECT_EQ(got, std::vector<std::byte>(2 * bytes, std::byte{0}));  // nothing copied
    expect_call_mismatch(*other, {1, 0, posted_first ? tag : lane, kMine, kTheirs}, soon());
    if (posted_first) t.isend(0, 103, std::span(&token, 1))->wait(soon());
  }
  std::vector<std::byte> got(bytes);
  t.irecv(0, transport::make_tag(0, 6), got, kMine)->wait(soon());
  EXPECT_EQ(got, data);
  t.isend(0, 102, std::span(&token, 1))->wait(soon());
}

// The error of type E that `req` fails with before `deadline`; a failure of the test when it
// fails otherwise or succeeds.
template <typename E>
std::string error_of(transport::Request& req,
                     transport::Clock::time_point deadline = transport::Clock::now() +
                                                             std::chrono::seconds(10)) {
  try {
    req.wait(deadline);
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not the expected type: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the request succeeded";
  return "";
}

inline std::string network_error(transport::Request& req,
                                 transport::Clock::time_point deadline = transport::Clock::now() +
                                                                         std::chrono::seconds(10)) {
  return error_of<NetworkError>(req, deadline);
}

}  // namespace c10d::inline v1::testing
