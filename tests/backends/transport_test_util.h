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
#include <string>
#include <vector>

#include "../algorithms/ranks.h"
#include "algorithms/context.h"
#include "algorithms/halving_doubling_all_reduce.h"
#include "algorithms/ring_all_reduce.h"
#include "c10d/errors.h"
#include "transport/transport.h"

namespace c10d::inline v1::testing {

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
