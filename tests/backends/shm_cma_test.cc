// ShmTransport's single-copy messages (shm_cma.cc), every rank a thread (so the receiver copies
// out of its own process, which the kernel always allows; tests/fault/shm_cma_process_test.cc
// runs ranks as processes): sizes around the threshold, unaligned buffers, many in flight both
// ways; a send completes only once its receiver copied it, so its buffer may go then; a message
// whose receive is late is buffered after its grace, so ranks that wait for their sends first do
// not deadlock; turned off by option and by C10D_SHM_CMA=0; a deadline, a taken-back send and an
// abort in the middle of a copy.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <latch>
#include <optional>
#include <string>
#include <thread>

#include "../rank_threads.h"
#include "backends/gloo_like/shm_transport.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "transport_test_util.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;
using c10d::testing::pattern;
using c10d::testing::Release;
using c10d::testing::soon;
using transport::Clock;

constexpr std::size_t kMin = kDefaultSingleCopyMinBytes;
std::atomic<int> group_counter{0};

// `n` thread ranks over shared memory (1 MiB rings unless `ring_bytes` says); `single_copy` and
// `min_bytes` (0: the default) as the options say. Each rank owns its transport, and may
// destroy it early.
void run_owning_ranks(int n, const std::function<void(int, std::unique_ptr<ShmTransport>&)>& fn,
                      std::optional<bool> single_copy = std::nullopt, std::size_t min_bytes = 0,
                      std::size_t ring_bytes = 1 << 20) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "shmcma" + std::to_string(group_counter++);
  test::run_rank_threads(n, [&](int r) {
    auto t =
        std::make_unique<ShmTransport>(store, r, n,
                                       ShmTransportOptions{.group_name = group,
                                                           .timeout = 20s,
                                                           .ring_bytes = ring_bytes,
                                                           .single_copy = single_copy,
                                                           .single_copy_min_bytes = min_bytes});
    fn(r, t);
  });
}

void run_ranks(int n, const std::function<void(int, ShmTransport&)>& fn,
               std::optional<bool> single_copy = std::nullopt, std::size_t min_bytes = 0) {
  run_owning_ranks(
      n, [&](int r, std::unique_ptr<ShmTransport>& t) { fn(r, *t); }, single_copy, min_bytes);
}

// Every rank sends every other one messages of sizes around the threshold (and of several
// copy chunks), from and into buffers at odd offsets, all posted before any is waited for.
TEST(ShmSingleCopyTest, SizesAroundTheThresholdUnalignedAndManyInFlightArriveExactBothWays) {
  const std::vector<std::size_t> sizes = {
      kMin - 1, kMin, kMin + 1, kMin + 4095, 3 * kMin + 13, (5u << 20) + 7, (1u << 20) + 1, 100};
  run_ranks(3, [&](int r, ShmTransport& t) {
    std::vector<std::vector<std::byte>> out, in;
    std::vector<std::unique_ptr<transport::Request>> reqs;
    for (int q = 0; q < 3; ++q) {
      if (q == r) continue;
      EXPECT_TRUE(t.single_copy_to(q));
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        const int tag = static_cast<int>(i % 3);  // several messages per tag: FIFO per tag
        in.emplace_back(sizes[i] + 3);
        reqs.push_back(t.irecv(q, tag, std::span(in.back()).subspan(3)));
        auto data = pattern(sizes[i], r * 100 + static_cast<int>(i));
        out.emplace_back(sizes[i] + 1);
        std::memcpy(out.back().data() + 1, data.data(), data.size());
        reqs.push_back(t.isend(q, tag, std::span(out.back()).subspan(1)));
      }
    }
    transport::wait_all(reqs, soon());
    std::size_t k = 0;
    for (int q = 0; q < 3; ++q) {
      if (q == r) continue;
      for (std::size_t i = 0; i < sizes.size(); ++i, ++k) {
        const auto want = pattern(sizes[i], q * 100 + static_cast<int>(i));
        EXPECT_TRUE(std::equal(want.begin(), want.end(), in[k].begin() + 3))
            << "rank " << r << " from " << q << ": " << sizes[i] << " bytes";
      }
    }
  });
}

// A send of the threshold and more (here 256 KiB), though its ring has room, completes only once
// the receiver copied it (the receiver does not poll meanwhile: nothing copies the message into
// a buffer); then its buffer may be unmapped, and what the receiver got is exact.
TEST(ShmSingleCopyTest, ASendCompletesOnlyOnceItsReceiverCopiedItAndItsBufferMayGoThen) {
  constexpr std::size_t kBytes = 512 << 10;  // half the ring
  std::latch go(1);
  run_ranks(
      2,
      [&](int r, ShmTransport& t) {
        if (r == 0) {
          void* mem =
              ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
          ASSERT_NE(mem, MAP_FAILED);
          const auto data = pattern(kBytes, 9);
          std::memcpy(mem, data.data(), kBytes);
          auto send = t.isend(1, 1, {static_cast<const std::byte*>(mem), kBytes});
          std::this_thread::sleep_for(100ms);
          EXPECT_FALSE(send->test()) << "the receive is not even posted";
          go.count_down();
          send->wait(soon());
          std::memset(mem, 0xee, kBytes);
          ::munmap(mem, kBytes);
          t.isend(1, 3, pattern(8, 2))->wait(soon());  // the buffer is gone
        } else {
          go.wait();
          std::vector<std::byte> done(8), got(kBytes);
          t.irecv(0, 1, got)->wait(soon());
          t.irecv(0, 3, done)->wait(soon());
          EXPECT_EQ(got, pattern(kBytes, 9));
        }
      },
      std::nullopt, 256 << 10);
}

// Each rank waits for its own send before it posts its receive: the other's message, parked
// without a receive, is copied into a buffer after its grace, so both sends complete.
TEST(ShmSingleCopyTest, RanksThatWaitForTheirSendsBeforeReceivingDoNotDeadlock) {
  constexpr std::size_t kBytes = 2 << 20;
  run_ranks(2, [&](int r, ShmTransport& t) {
    const auto start = Clock::now();
    t.isend(1 - r, 5, pattern(kBytes, r))->wait(soon());
    std::vector<std::byte> got(kBytes);
    t.irecv(1 - r, 5, got)->wait(soon());
    EXPECT_EQ(got, pattern(kBytes, 1 - r));
    EXPECT_LT(Clock::now() - start, 2s);
  });
}

// Off by option, or by C10D_SHM_CMA=0 (read at set-up): a send of the threshold (here 256 KiB)
// and more goes through the ring, completing while the receive is not posted yet.
TEST(ShmSingleCopyTest, TurnedOffByOptionOrEnvironmentLargeSendsGoThroughTheRing) {
  const char* was = std::getenv("C10D_SHM_CMA");
  const std::optional<std::string> saved = was ? std::optional<std::string>(was) : std::nullopt;
  for (const bool by_env : {false, true}) {
    if (by_env) ::setenv("C10D_SHM_CMA", "0", 1);
    run_ranks(
        2,
        [&](int r, ShmTransport& t) {
          EXPECT_FALSE(t.single_copy_to(1 - r));
          const auto data = pattern(512 << 10, r);
          if (r == 0) {
            t.isend(1, 1, data)->wait(soon());  // into the ring, the receive not posted
            t.isend(1, 2, pattern(8, 0))->wait(soon());
          } else {
            std::vector<std::byte> go(8), got(data.size());
            t.irecv(0, 2, go)->wait(soon());
            t.irecv(0, 1, got)->wait(soon());
            EXPECT_EQ(got, pattern(512 << 10, 0));
          }
        },
        by_env ? std::nullopt : std::optional<bool>(false), 256 << 10);
    if (saved) {
      ::setenv("C10D_SHM_CMA", saved->c_str(), 1);
    } else {
      ::unsetenv("C10D_SHM_CMA");
    }
  }
}

// A receive's deadline passes in the middle of a 64 MiB copy (1 MiB per turn): the wait throws
// PeerTimeout, and a second wait finishes it exact.
TEST(ShmSingleCopyTest, ADeadlineInTheMiddleOfACopyHoldsAndTheCopyGoesOn) {
  constexpr std::size_t kBytes = 64 << 20;
  run_ranks(2, [&](int r, ShmTransport& t) {
    if (r == 0) {
      t.isend(1, 1, pattern(kBytes, 3))->wait(soon());
      return;
    }
    std::vector<std::byte> got(kBytes);
    auto recv = t.irecv(0, 1, got);
    const auto start = Clock::now();
    EXPECT_THROW(recv->wait(start + 1ms), transport::PeerTimeout);
    EXPECT_LT(Clock::now() - start, 200ms);
    recv->wait(soon());
    EXPECT_TRUE(got == pattern(kBytes, 3));
  });
}

// A send whose request goes away before its receiver copied it (its wait timed out) takes the
// message back: the receive that later takes it fails, naming the sender, and the stream goes on.
TEST(ShmSingleCopyTest, ASendTakenBackBeforeItsCopyFailsItsReceiveAndTheStreamGoesOn) {
  constexpr std::size_t kBytes = kMin;
  std::latch taken_back(1);
  run_ranks(2, [&](int r, ShmTransport& t) {
    if (r == 0) {
      {
        auto data = pattern(kBytes, 4);
        auto send = t.isend(1, 1, data);
        EXPECT_THROW(send->wait(Clock::now() + 50ms), transport::PeerTimeout);
      }  // the request, then its buffer, go
      taken_back.count_down();
      t.isend(1, 2, pattern(8, 5))->wait(soon());
      return;
    }
    taken_back.wait();  // rank 1 copies nothing before: a sleep here lost the race under load
    std::vector<std::byte> next(8), got(kBytes);
    t.irecv(0, 2, next)->wait(soon());
    EXPECT_EQ(next, pattern(8, 5));
    try {
      t.irecv(0, 1, got)->wait(soon());
      ADD_FAILURE() << "a message taken back was delivered";
    } catch (const NetworkError& e) {
      EXPECT_NE(std::string(e.what()).find("rank 0 took its single-copy message back"),
                std::string::npos)
          << e.what();
    }
  });
}

// An abort while a 64 MiB copy is under way fails the receive at once, and the sender's
// pending single-copy send when its own transport aborts.
TEST(ShmSingleCopyTest, AnAbortInTheMiddleOfACopyFailsBothSides) {
  constexpr std::size_t kBytes = 64 << 20;
  std::latch aborted(1);
  run_ranks(2, [&](int r, ShmTransport& t) {
    if (r == 0) {
      const auto data = pattern(kBytes, 6);
      auto send = t.isend(1, 1, data);
      aborted.wait();
      t.abort(std::make_exception_ptr(NetworkError("test abort on rank 0")));
      EXPECT_THROW(send->wait(soon()), NetworkError);
      return;
    }
    std::vector<std::byte> got(kBytes);
    auto recv = t.irecv(0, 1, got);
    EXPECT_THROW(recv->wait(Clock::now() + 2ms), transport::PeerTimeout);  // under way
    std::thread aborter([&] {
      t.abort(std::make_exception_ptr(NetworkError("test abort on rank 1")));
      aborted.count_down();
    });
    const auto start = Clock::now();
    EXPECT_THROW(recv->wait(soon()), NetworkError);
    EXPECT_LT(Clock::now() - start, 2s);
    aborter.join();
  });
}

// The receiver of a single-copy message owes its sender an acknowledgement, written to its ring
// once the ring has room. Rank 0 fills its ring to rank 1 exactly, then copies rank 1's message
// (its receive completes, the ack still owed) and closes its transport at once: the close
// writes the ack first, as rank 1 frees the room, so rank 1's send completes.
TEST(ShmSingleCopyTest, AnAckOwedWhenTheReceiverClosesIsWrittenBeforeItCloses) {
  constexpr std::size_t kRing = 64 << 10;
  constexpr std::size_t kBytes = 256 << 10;  // single-copy
  constexpr std::size_t kFill = kRing - 64;  // one message header and this fill the ring
  std::latch sent(1), received(1);
  run_owning_ranks(
      2,
      [&](int r, std::unique_ptr<ShmTransport>& t) {
        c10d::testing::ack_owed_at_close(
            r, *t, kBytes, kFill, t->single_copy_to(1 - r), [&] { t.reset(); }, sent, received);
      },
      std::nullopt, kBytes, kRing);
}

// A receiver that closes its transport without taking a single-copy message will never copy it:
// the sender's send fails at once, naming the receiver, rather than waiting for its deadline.
TEST(ShmSingleCopyTest, ASendToAReceiverThatClosedWithoutTakingItFailsNamingIt) {
  constexpr std::size_t kBytes = 256 << 10;
  std::latch sent(1);
  run_owning_ranks(
      2,
      [&](int r, std::unique_ptr<ShmTransport>& t) {
        if (r == 0) {
          sent.wait();
          t.reset();
          return;
        }
        Release release(sent);
        ASSERT_TRUE(t->single_copy_to(0));
        const auto data = pattern(kBytes, 0);
        auto send = t->isend(0, 1, data);
        release.now();
        const auto start = Clock::now();
        try {
          send->wait(start + 10s);
          ADD_FAILURE() << "a message nobody copied was acknowledged";
        } catch (const transport::PeerTimeout& e) {
          ADD_FAILURE() << "timed out instead of naming the closed receiver: " << e.what();
        } catch (const NetworkError& e) {
          EXPECT_NE(std::string(e.what()).find(
                        "rank 0 closed its shared-memory transport without acknowledging"),
                    std::string::npos)
              << e.what();
        }
        EXPECT_LT(Clock::now() - start, 2s);
      },
      std::nullopt, kBytes);
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
