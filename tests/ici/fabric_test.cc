// The shared-memory fabric, chip by chip: bytes reach far chips through the routers of the
// chips between, virtual time follows link_model.h exactly, links serve first come first
// served, messages detour around a down link, failures end every wait, and receives from any
// source behave as on every transport (any_source_cases.h).
#include <gtest/gtest.h>

#include <latch>
#include <numeric>
#include <thread>

#include "../backends/transport_test_util.h"
#include "../transport/any_source_cases.h"
#include "backends/tpu_ici/ici_transport.h"
#include "c10d/errors.h"

namespace c10d::inline v1::tpu_ici {
namespace {

using namespace std::chrono_literals;
using transport::Clock;

constexpr double kB = 4.5e10;
constexpr double kL = 1e-6;
constexpr std::size_t kMiB = 1 << 20;

// Every rank a thread with its own IciTransport over one HashStore; all stay alive until every
// body returned.
void on_chips(const TopologySpec& spec, int world, const std::function<void(IciTransport&)>& body) {
  auto store = std::make_shared<HashStore>(std::chrono::seconds(20));
  std::latch done(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      {
        IciTransport chip(store, r, make_torus(spec, world), {.timeout = 20s});
        body(chip);
        done.arrive_and_wait();
      }
    });
  }
  for (auto& t : threads) t.join();
}

std::vector<std::byte> pattern(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = std::byte((i * 7 + static_cast<std::size_t>(seed)) & 0xff);
  return v;
}

auto deadline() { return Clock::now() + 20s; }

// The chips of a ring of `n`, as the transport cases want them: fn(rank, transport) on every
// chip's thread; the first error a body threw is rethrown.
void run_ring(int n, const std::function<void(int, transport::Transport&)>& fn) {
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  on_chips({.topology = std::to_string(n)}, n, [&](IciTransport& chip) {
    try {
      fn(chip.rank(), chip);
    } catch (...) {
      errors[static_cast<std::size_t>(chip.rank())] = std::current_exception();
    }
  });
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}
C10D_ANY_SOURCE_TESTS(IciAnySourceTest, run_ring)

// Packets carry their message's call (fabric_layout.h): a receive that meets a message of
// another call fails naming both, in one packet or many.
TEST(IciFabricTest, AMessageOfAnotherCallFailsItsReceiveNamingBothCallsBeforeSizes) {
  for (const std::size_t bytes : {std::size_t{32}, 3 * kMiB}) {
    SCOPED_TRACE(bytes);
    run_ring(2, [&](int r, transport::Transport& t) {
      c10d::testing::expect_calls_checked(r, t, bytes);
    });
  }
}

// A message to an any-source receive that crossed two links keeps its sender's rank.
TEST(IciFabricTest, AnAnySourceReceiveNamesAFarSender) {
  on_chips({.topology = "5"}, 5, [](IciTransport& chip) {
    if (chip.rank() == 2) {
      chip.isend(0, 3, pattern(100, 2))->wait(deadline());
    } else if (chip.rank() == 0) {
      std::vector<std::byte> got(100);
      auto req = chip.irecv_any(3, got);
      req->wait(deadline());
      EXPECT_EQ(req->source(), 2);
      EXPECT_EQ(got, pattern(100, 2));
    }
  });
}

TEST(IciFabricTest, AFarMessageIsForwardedAndTakesHopsTimesLatencyPlusItsBytes) {
  on_chips({.topology = "8"}, 8, [](IciTransport& chip) {
    const auto data = pattern(kMiB, 3);
    if (chip.rank() == 0) {
      chip.isend(3, 1, data)->wait(deadline());
      // A send is done when its last byte left the first link.
      EXPECT_NEAR(chip.clock(), kMiB / kB, 1e-15);
    } else if (chip.rank() == 3) {
      std::vector<std::byte> got(kMiB);
      chip.irecv(0, 1, got)->wait(deadline());
      EXPECT_EQ(got, data);
      EXPECT_NEAR(chip.clock(), 3 * kL + kMiB / kB, 1e-15);
    }
    if (chip.rank() == 1) {
      // Rank 1 forwarded every byte on (1)->(2) (wait for its router to hand it on).
      for (int i = 0; i < 1000 && chip.link_stats()[0].bytes < kMiB; ++i) {
        std::this_thread::sleep_for(1ms);
      }
      const auto links = chip.link_stats();
      ASSERT_EQ(links.size(), 2u);
      EXPECT_EQ(links[0].bytes, kMiB) << links[0].name;
      EXPECT_EQ(links[1].bytes, 0u) << links[1].name;
    }
  });
}

TEST(IciFabricTest, ALinkServesItsMessagesFirstComeFirstServed) {
  on_chips({.topology = "2"}, 2, [](IciTransport& chip) {
    const auto a = pattern(kMiB, 1), b = pattern(kMiB, 2);
    if (chip.rank() == 0) {
      auto r1 = chip.isend(1, 7, a);
      auto r2 = chip.isend(1, 7, b);
      r1->wait(deadline());
      r2->wait(deadline());
    } else {
      std::vector<std::byte> x(kMiB), y(kMiB);
      chip.irecv(0, 7, x)->wait(deadline());
      EXPECT_NEAR(chip.clock(), kL + kMiB / kB, 1e-15);
      chip.irecv(0, 7, y)->wait(deadline());
      // The second waited for the first to leave the link.
      EXPECT_NEAR(chip.clock(), kL + 2 * kMiB / kB, 1e-15);
      EXPECT_EQ(x, a);
      EXPECT_EQ(y, b);
    }
  });
}

TEST(IciFabricTest, MessagesDetourAroundADownLink) {
  on_chips({.topology = "6", .down_links = "1-2"}, 6, [](IciTransport& chip) {
    const auto data = pattern(kMiB, 5);
    if (chip.rank() == 1) chip.isend(2, 1, data)->wait(deadline());
    if (chip.rank() == 2) {
      std::vector<std::byte> got(kMiB);
      chip.irecv(1, 1, got)->wait(deadline());
      EXPECT_EQ(got, data);
      EXPECT_NEAR(chip.clock(), 5 * kL + kMiB / kB, 1e-15);  // 1 -> 0 -> 5 -> 4 -> 3 -> 2
    }
  });
}

TEST(IciFabricTest, ACutLineFailsTheSendNamingTheLink) {
  on_chips({.topology = "4", .wrap = "none", .down_links = "1-2"}, 4, [](IciTransport& chip) {
    if (chip.rank() != 0) return;
    std::vector<std::byte> data(8);
    try {
      chip.isend(3, 1, data);
      FAIL() << "expected NetworkError";
    } catch (const NetworkError& e) {
      EXPECT_NE(std::string(e.what()).find("link (1)->(2) (rank 1 -> rank 2, axis 0 +) is down"),
                std::string::npos)
          << e.what();
    }
  });
}

TEST(IciFabricTest, AnAbortReachesEveryChipNamingTheFirstRank) {
  on_chips({.topology = "2x2"}, 4, [](IciTransport& chip) {
    if (chip.rank() == 3) {
      chip.abort(std::make_exception_ptr(NetworkError("rank 3 lost its host")));
      return;
    }
    std::vector<std::byte> never(8);
    auto r = chip.irecv((chip.rank() + 1) % 3, 9, never);
    try {
      r->wait(deadline());
      FAIL() << "expected NetworkError";
    } catch (const NetworkError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 3 failed: rank 3 lost its host"),
                std::string::npos)
          << e.what();
    }
  });
}

// Messages that arrive before their receives wait in chunks of 1 MiB allocated as packets
// come: sizes around the chunk size and 64 MiB, two hops away, arrive exact; so does a message
// whose receive is posted while it arrives.
TEST(IciFabricTest, UnexpectedMessagesInChunksArriveExact) {
  const std::vector<std::size_t> sizes = {kMiB - 1, kMiB, kMiB + 1, 3 * kMiB + 5, 64 * kMiB};
  on_chips({.topology = "4"}, 4, [&](IciTransport& chip) {
    const int n = static_cast<int>(sizes.size());
    if (chip.rank() == 0) {
      std::vector<std::vector<std::byte>> msgs;
      for (int i = 0; i < n; ++i) msgs.push_back(pattern(sizes[i], 20 + i));
      const auto last = pattern(8, 9);
      std::vector<std::unique_ptr<transport::Request>> reqs;
      for (int i = 0; i < n; ++i) reqs.push_back(chip.isend(2, 10 + i, msgs[i]));
      reqs.push_back(chip.isend(2, 99, last));
      transport::wait_all(reqs, deadline());
    } else if (chip.rank() == 2) {
      std::vector<std::byte> last(8);
      chip.irecv(0, 99, last)->wait(deadline());  // everything before it is here, unexpected
      EXPECT_EQ(last, pattern(8, 9));
      for (int i = 0; i < n; ++i) {
        std::vector<std::byte> got(sizes[i]);
        chip.irecv(0, 10 + i, got)->wait(deadline());
        EXPECT_TRUE(got == pattern(sizes[i], 20 + i)) << "message of " << sizes[i] << " bytes";
      }
      // Posted while it arrives: the chunks so far are copied, the rest lands in place.
      std::vector<std::byte> big(64 * kMiB);
      std::this_thread::sleep_for(5ms);
      chip.irecv(0, 50, big)->wait(deadline());
      EXPECT_TRUE(big == pattern(64 * kMiB, 50));
    }
    if (chip.rank() == 0) {
      const auto big = pattern(64 * kMiB, 50);
      chip.isend(2, 50, big)->wait(deadline());
    }
  });
}

TEST(IciFabricTest, SizeMismatchesAndDeadlinesFailTheReceive) {
  on_chips({.topology = "2"}, 2, [](IciTransport& chip) {
    std::vector<std::byte> buf(16);
    if (chip.rank() == 0) {
      chip.isend(1, 1, std::span(buf).first(8))->wait(deadline());
      return;
    }
    EXPECT_THROW(chip.irecv(0, 1, buf)->wait(deadline()), InvalidArgument);
    EXPECT_THROW(chip.irecv(0, 2, buf)->wait(Clock::now() + 50ms), TimeoutError);
  });
}

// A request that times out is a PeerTimeout naming the peer and the tag (so a group names the
// rank it waited for), with what the chip last got from that peer.
TEST(IciFabricTest, ATimedOutRequestNamesThePeerTheTagAndWhatCameLastFromIt) {
  on_chips({.topology = "2"}, 2, [](IciTransport& chip) {
    std::vector<std::byte> buf(8);
    if (chip.rank() == 0) {
      chip.isend(1, 7, buf)->wait(deadline());
      return;
    }
    chip.irecv(0, 7, buf)->wait(deadline());
    try {
      chip.irecv(0, 9, buf)->wait(Clock::now() + 50ms);
      ADD_FAILURE() << "the receive did not time out";
    } catch (const transport::PeerTimeout& e) {
      EXPECT_EQ(e.peer(), 0);
      EXPECT_TRUE(e.heard().known);
      EXPECT_EQ(e.heard().tag, 7u);
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 1 irecv from rank 0 (" + transport::tag_string(9) +
                          ", 8 bytes) timed out on the ICI fabric"),
                std::string::npos)
          << what;
      EXPECT_NE(what.find("last heard from it"), std::string::npos) << what;
    }
  });
}

}  // namespace
}  // namespace c10d::inline v1::tpu_ici
