// TCPTransport's read side against a peer that sends what no TCPTransport would: rank 0 is real,
// rank 1 a RawPeer (raw_tcp_peer.h) that completes the handshake and then writes raw frames.
// Headers that claim huge messages, floods of unexpected messages, mismatched sizes, an abort
// notice whose on_abort throws, random and mutated frames, and a connection reset under a send
// with more queued: the rank allocates only what arrives, holds at most its limit per peer,
// and either keeps working or fails naming the peer.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "../memory_use.h"
#include "backends/common/setup_watch.h"
#include "backends/gloo_like/tcp_transport.h"
#include "backends/gloo_like/tcp_wire.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "raw_tcp_peer.h"
#include "transport/unexpected_buffer.h"
#include "transport_test_util.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;
using c10d::testing::memory_kib;
using c10d::testing::network_error;
using c10d::testing::pattern;
using c10d::testing::soon;
using testing::connect_as_rank;
using testing::RawPeer;
using transport::Clock;

constexpr transport::Tag kProbeTag = transport::make_tag(1, 7);
constexpr transport::Tag kOtherTag = transport::make_tag(1, 100);

std::atomic<int> group_counter{0};

// Rank 0 of a two-rank group, real, and rank 1 played by a RawPeer. The real rank connects
// eagerly: the raw peer waits for its connection in set-up (the read side, under test, is the
// same either way).
struct Met {
  std::shared_ptr<HashStore> store;
  std::unique_ptr<TCPTransport> rank0;
  RawPeer raw;
};

Met meet_raw_peer(TCPTransportOptions options = {}) {
  Met m;
  m.store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "hostile" + std::to_string(group_counter++);
  options.host = "127.0.0.1";
  options.timeout = 20s;
  options.connect = TCPConnect::kEager;
  std::exception_ptr error;
  {
    std::jthread real([&] {  // joined however connect_as_rank ends
      try {
        m.rank0 = std::make_unique<TCPTransport>(m.store, 0, 2, group, options);
      } catch (...) {
        error = std::current_exception();
      }
    });
    m.raw = connect_as_rank(*m.store, group, 1, 2, 0, soon());
  }
  if (error) std::rethrow_exception(error);
  return m;
}

std::int64_t grown_kib(const char* field, std::uint64_t before) {
  return static_cast<std::int64_t>(memory_kib(field)) - static_cast<std::int64_t>(before);
}

// The probe found a 2^40-byte claim allocated at once (std::bad_alloc on the io thread, the
// rank dead in 0.2 s). 16 GiB is a claim an overcommitting kernel would map: VmSize shows it.
TEST(TCPHostileTest, AHeaderClaimingAHugeMessageOnAnUnpostedTagAllocatesOnlyWhatArrives) {
  for (const std::uint64_t claim : {kMaxMessageBytes, std::uint64_t{16} << 30}) {
    SCOPED_TRACE("claim " + std::to_string(claim));
    Met m = meet_raw_peer();
    std::vector<std::byte> got(8);
    auto pending = m.rank0->irecv(1, kProbeTag, got);
    const auto rss = memory_kib("VmRSS");
    const auto mapped = memory_kib("VmSize");
    ASSERT_TRUE(m.raw.send(encode_frame_header(kOtherTag, claim), soon()));
    ASSERT_TRUE(m.raw.send(pattern(1 << 20, 3), soon()));
    // Past the park grace (20 ms) the rank buffers what came, and only that.
    std::this_thread::sleep_for(300ms);
    EXPECT_FALSE(pending->test());
    EXPECT_LT(grown_kib("VmRSS", rss), 32 << 10);
    EXPECT_LT(grown_kib("VmSize", mapped), 512 << 10);
    m.raw.close();
    const std::string what = network_error(*pending, soon());
    EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
  }
}

TEST(TCPHostileTest, AFloodOfSmallUnexpectedMessagesPastTheLimitFailsNamingPeerAndLimit) {
  TCPTransportOptions options;
  options.max_unexpected_bytes = 64 << 10;
  Met m = meet_raw_peer(options);
  std::vector<std::byte> got(8);
  auto pending = m.rank0->irecv(1, kProbeTag, got);
  // Empty messages count too (128 bytes each): 2000 of them and of 8 bytes, ~264 KiB counted.
  std::vector<std::byte> flood;
  for (int i = 0; i < 2000; ++i) {
    const std::size_t len = i % 2 == 0 ? 0 : 8;
    const auto h = encode_frame_header(kOtherTag + i % 5, len);
    flood.insert(flood.end(), h.begin(), h.end());
    flood.resize(flood.size() + len, std::byte{0x5a});
  }
  m.raw.send(flood, soon());  // the rank may close the connection midway
  const std::string what = network_error(*pending, Clock::now() + 10s);
  EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("limit of 65536 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("C10D_MAX_UNEXPECTED_BYTES"), std::string::npos) << what;
  // The transport failed as a whole.
  EXPECT_THROW(m.rank0->isend(1, kProbeTag, got)->wait(soon()), NetworkError);
}

// The limit counts what is held now: messages taken by their receives no longer count.
TEST(TCPHostileTest, UnexpectedBytesCountOnlyUntilTheirReceivesTakeThem) {
  TCPTransportOptions options;
  options.max_unexpected_bytes = 64 << 10;
  Met m = meet_raw_peer(options);
  constexpr int kMessages = 100;  // 100 * (256 + 128) bytes: under the limit at any time
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < kMessages; ++i) {
      ASSERT_TRUE(m.raw.send_frame(kOtherTag + i, pattern(256, round * kMessages + i), soon()));
    }
    for (int i = 0; i < kMessages; ++i) {
      std::vector<std::byte> got(256);
      m.rank0->irecv(1, kOtherTag + i, got)->wait(soon());
      ASSERT_EQ(got, pattern(256, round * kMessages + i)) << "round " << round << " message " << i;
    }
  }
}

TEST(TCPHostileTest, AMessageLargerThanItsReceiveIsReadThroughASmallBufferAndDropped) {
  Met m = meet_raw_peer();
  std::vector<std::byte> small(16);
  auto mismatched = m.rank0->irecv(1, kProbeTag, small);
  ASSERT_TRUE(m.raw.send_frame(kProbeTag, pattern(4 << 20, 5), soon()));
  ASSERT_TRUE(m.raw.send_frame(kOtherTag, pattern(100, 6), soon()));
  try {
    mismatched->wait(soon());
    ADD_FAILURE() << "a 4 MiB message matched a 16-byte receive";
  } catch (const InvalidArgument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the message from rank 1 has 4194304 bytes"), std::string::npos) << what;
  }
  std::vector<std::byte> next(100);
  m.rank0->irecv(1, kOtherTag, next)->wait(soon());  // the stream goes on after the dropped one
  EXPECT_EQ(next, pattern(100, 6));

  // A claim of 2^40 bytes against a posted receive allocates nothing for it either.
  const auto mapped = memory_kib("VmSize");
  auto claimed = m.rank0->irecv(1, kProbeTag, small);
  ASSERT_TRUE(m.raw.send(encode_frame_header(kProbeTag, kMaxMessageBytes), soon()));
  ASSERT_TRUE(m.raw.send(pattern(1 << 20, 7), soon()));
  EXPECT_THROW(claimed->wait(soon()), InvalidArgument);
  std::this_thread::sleep_for(100ms);
  EXPECT_LT(grown_kib("VmSize", mapped), 512 << 10);
  m.raw.close();
  auto later = m.rank0->irecv(1, kOtherTag, next);
  const std::string what = network_error(*later, soon());
  EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
}

TEST(TCPHostileTest, HeadersThisProtocolNeverSendsEndTheConnectionNamingPeerAndFault) {
  struct Case {
    std::uint64_t tag;
    std::uint64_t length;
    const char* named;
  };
  for (const Case& c : {Case{kOtherTag, kMaxMessageBytes + 1, "over the limit of 1099511627776"},
                        Case{kGoodbyeTag, 5, "goodbye frame with length 5"},
                        Case{kAbortTag, 2, "abort notice of length 2"},
                        Case{kAbortTag, 4 + kMaxAbortMessageBytes + 1, "abort notice of length"}}) {
    Met m = meet_raw_peer();
    std::vector<std::byte> got(8);
    auto pending = m.rank0->irecv(1, kProbeTag, got);
    ASSERT_TRUE(m.raw.send(encode_frame_header(c.tag, c.length), soon()));
    const std::string what = network_error(*pending, Clock::now() + 10s);
    EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find(c.named), std::string::npos) << what;
  }
}

// An abort notice makes the io thread abort the transport, which calls on_abort: one that
// throws used to unwind the io thread (std::terminate). Now the transport fails as it should.
TEST(TCPHostileTest, AnOnAbortThatThrowsOnTheIoThreadLeavesTheRankFailedCleanly) {
  TCPTransportOptions options;
  options.fail_all_on_peer_loss = true;
  std::atomic<int> calls{0};
  options.on_abort = [&calls](std::exception_ptr) {
    ++calls;
    throw std::runtime_error("on_abort exploded");
  };
  Met m = meet_raw_peer(options);
  std::vector<std::byte> got(8);
  auto pending = m.rank0->irecv(1, kProbeTag, got);
  ASSERT_TRUE(m.raw.send(encode_abort_notice({-1, "the raw peer gives up"}), soon()));
  // Nobody polls the socket: the io thread reads the notice.
  for (auto until = Clock::now() + 5s; calls.load() == 0 && Clock::now() < until;) {
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(calls.load(), 1);
  const std::string what = network_error(*pending, soon());
  EXPECT_NE(what.find("peer rank 1 aborted"), std::string::npos) << what;
  EXPECT_NE(what.find("the raw peer gives up"), std::string::npos) << what;
  EXPECT_THROW(m.rank0->isend(1, kProbeTag, got)->wait(soon()), NetworkError);
}

// Three ranks: 0 and 1 real, 2 a RawPeer whose abort notice says it made no progress, sent to
// rank 0 alone. Rank 0 passes the failure on to rank 1, which must say what rank 0 heard (rank 2
// made no progress), not that rank 2 is gone: the relayed notice dropped the flag.
TEST(TCPHostileTest, ARankThatMadeNoProgressIsNamedSoByTheRanksTheNoticeIsRelayedTo) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "relay" + std::to_string(group_counter++);
  TCPTransportOptions options{"127.0.0.1", 20s};
  options.fail_all_on_peer_loss = true;
  options.connect = TCPConnect::kEager;  // the raw peer waits for the real ranks' connections
  std::unique_ptr<TCPTransport> real[2];
  std::exception_ptr errors[2];
  std::vector<RawPeer> raw;
  {
    std::jthread threads[2];
    for (int r = 0; r < 2; ++r) {
      threads[r] = std::jthread([&, r] {
        try {
          real[r] = std::make_unique<TCPTransport>(store, r, 3, group, options);
        } catch (...) {
          errors[r] = std::current_exception();
        }
      });
    }
    raw = connect_as_rank(*store, group, 2, 3, std::vector<int>{0, 1}, soon());
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  std::vector<std::byte> got0(8), got1(8);
  auto at0 = real[0]->irecv(1, kProbeTag, got0);
  auto at1 = real[1]->irecv(0, kProbeTag, got1);
  ASSERT_TRUE(
      raw[0].send(encode_abort_notice({2, "rank 2: all_reduce #4 timed out", true}), soon()));
  const std::string heard = network_error(*at0, soon());
  EXPECT_NE(heard.find("rank 0: peer rank 2 made no progress (rank 2 reports: rank 2: "
                       "all_reduce #4 timed out)"),
            std::string::npos)
      << heard;
  const std::string relayed = network_error(*at1, soon());
  EXPECT_NE(relayed.find("rank 1: peer rank 2 made no progress (rank 0 reports: rank 0: peer "
                         "rank 2 made no progress"),
            std::string::npos)
      << relayed;
}

// A set-up failure record ("<rank>\n<reason>", setup_watch.h) is read strictly: anyone who can
// write the store can write it, and it goes into every rank's error. A rank that is not a
// decimal number ("2x" was once printed as the rank that failed) makes it a record that names no
// rank; the reason is bounded and made printable.
TEST(TCPHostileTest, ASetUpFailureRecordIsReadStrictlyAndItsReasonBounded) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const auto error_of = [&](const std::string& record) -> std::string {
    backends::SetupWatch watch(store, "forged" + std::to_string(group_counter++), 0);
    store->set(watch.group() + "/setup/failure/" + std::to_string(watch.attempt()),
               std::string_view(record));
    try {
      watch.check();
    } catch (const NetworkError& e) {
      return e.what();
    }
    ADD_FAILURE() << "the record was not reported";
    return {};
  };
  for (const std::string bad : {"2x\nwhy", " 2\nwhy", "-1\nwhy", "99999999999\nwhy", "why"}) {
    const std::string what = error_of(bad);
    EXPECT_NE(what.find("rank 0: the set-up of group 'forged"), std::string::npos) << what;
    EXPECT_NE(what.find("names no rank"), std::string::npos) << what;
  }
  const std::string what = error_of("3\nred\x1b[31m" + std::string(10000, 'x'));
  EXPECT_NE(what.find("failed on rank 3: red?[31mxxx"), std::string::npos) << what;
  EXPECT_LT(what.size(), 4096u + 1024u) << "the reason was not bounded";
}

// Frames for one round of the live fuzz below: valid ones, lies about lengths, reserved tags
// with odd lengths, garbage; some mutated. `clean` keeps to whole valid data frames.
std::vector<std::byte> fuzz_frames(std::mt19937_64& rng, bool clean) {
  std::vector<std::byte> out;
  const auto bytes = [&](std::size_t n) {
    std::vector<std::byte> b(n);
    for (auto& x : b) x = static_cast<std::byte>(rng());
    return b;
  };
  const int frames = 1 + static_cast<int>(rng() % 10);
  for (int i = 0; i < frames; ++i) {
    std::vector<std::byte> f;
    const auto put_header = [&](std::uint64_t tag, std::uint64_t len) {
      const auto h = encode_frame_header(tag, len);
      f.insert(f.end(), h.begin(), h.end());
    };
    const auto put = [&](const std::vector<std::byte>& b) {
      f.insert(f.end(), b.begin(), b.end());
    };
    switch (clean ? 0 : rng() % 8) {
      case 0: {  // a whole data frame on another tag
        const std::size_t len = rng() % 3000;
        put_header(kOtherTag + rng() % 4, len);
        put(bytes(len));
        break;
      }
      case 1: {  // a large claim, a little of it sent
        const std::uint64_t claims[] = {std::uint64_t{1} << 20, std::uint64_t{1} << 30,
                                        kMaxMessageBytes, kMaxMessageBytes + 1, ~std::uint64_t{0}};
        put_header(kOtherTag + rng() % 4, claims[rng() % 5]);
        put(bytes(rng() % 100000));
        break;
      }
      case 2:
        put_header(kGoodbyeTag, 0);
        break;
      case 3:
        put_header(kGoodbyeTag, rng() % 100);
        break;
      case 4: {
        std::string message(rng() % 5000, 'x');
        for (char& ch : message) ch = static_cast<char>(rng());
        put(encode_abort_notice({static_cast<std::int32_t>(rng() % 8) - 3, message}));
        break;
      }
      case 5: {  // the abort tag with any length
        const std::uint64_t len = rng() % 10000;
        put_header(kAbortTag, len);
        put(bytes(std::min<std::uint64_t>(len, rng() % 8000)));
        break;
      }
      case 6:
        put(bytes(16 + rng() % 64));
        break;
      default: {  // the probe's tag with another size: its receive fails, the stream goes on
        const std::size_t len = 65 + rng() % 2000;
        put_header(kProbeTag, len);
        put(bytes(len));
        break;
      }
    }
    if (!clean && rng() % 3 == 0 && !f.empty()) {
      if (rng() % 2 == 0) {
        for (int k = 0, n = 1 + static_cast<int>(rng() % 3); k < n; ++k) {
          f[rng() % std::min<std::size_t>(f.size(), kFrameHeaderBytes)] =
              static_cast<std::byte>(rng());
        }
      } else {
        f.resize(rng() % f.size());
      }
    }
    out.insert(out.end(), f.begin(), f.end());
  }
  return out;
}

// A live rank fed random and mutated frames, then a probe message, then a closed connection:
// it either delivers the probe exact or fails the probe's receive with an error naming rank 1;
// it never crashes, hangs, or grows by what the headers claim.
TEST(TCPHostileTest, RandomAndMutatedFramesFromARawPeerNeverCrashTheRank) {
  std::mt19937_64 rng(20261130);
  // The heap, not the resident set: under ASan the 60 rounds' freed buffers stay resident in
  // its quarantine (memory_use.h).
  const std::size_t heap = c10d::testing::heap_bytes();
  const auto mapped = memory_kib("VmSize");
  int delivered = 0;
  int failed = 0;
  for (int round = 0; round < 60; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    TCPTransportOptions options;
    options.max_unexpected_bytes = 256 << 10;
    Met m = meet_raw_peer(options);
    std::vector<std::byte> got(64);
    auto probe = m.rank0->irecv(1, kProbeTag, got);
    const bool clean = round % 3 == 0;
    const auto frames = fuzz_frames(rng, clean);
    const auto deadline = Clock::now() + 10s;
    if (m.raw.send(frames, deadline)) m.raw.send_frame(kProbeTag, pattern(64, round), deadline);
    m.raw.close();
    try {
      probe->wait(deadline);
      EXPECT_EQ(got, pattern(64, round));
      ++delivered;
    } catch (const TimeoutError& e) {
      ADD_FAILURE() << "the rank hung: " << e.what();
    } catch (const Error& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
      ++failed;
    }
    if (clean) {
      EXPECT_EQ(got, pattern(64, round)) << "valid frames only, yet the probe failed";
    }
  }
  EXPECT_GT(delivered, 10);
  EXPECT_GT(failed, 10);
  EXPECT_LT(c10d::testing::heap_bytes(), heap + (std::size_t{64} << 20)) << "bytes on the heap";
  EXPECT_LT(grown_kib("VmSize", mapped), 1 << 20);
}

TEST(TCPHostileTest, AMaxUnexpectedBytesVariableThatIsNotAPositiveCountIsRefusedNamingIt) {
  auto store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  for (const char* bad : {"lots", "0", "-5", "12x", "99999999999999999999999"}) {
    ::setenv("C10D_MAX_UNEXPECTED_BYTES", bad, 1);
    try {
      TCPTransport t(store, 0, 1, "badvar" + std::to_string(group_counter++), {"127.0.0.1", 5s});
      ADD_FAILURE() << bad << " was taken";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("C10D_MAX_UNEXPECTED_BYTES=\"") + bad), std::string::npos)
          << what;
    }
  }
  ::setenv("C10D_MAX_UNEXPECTED_BYTES", "4096", 1);
  EXPECT_NO_THROW(TCPTransport(store, 0, 1, "goodvar", {"127.0.0.1", 5s}));
  ::unsetenv("C10D_MAX_UNEXPECTED_BYTES");
}

// A peer's connection that this rank writes on is reset while a send to it is being written and
// another is queued, and a third comes after the first one's write failed, with the read side
// still open: no send starts until the connection is killed (a second after the failed write,
// when the read side has not explained it). One did (the next send posted woke the io thread,
// which started the queued one), failed too and took the first one's place as the failed write,
// so that nothing completed the first: its wait hung.
TEST(TCPHostileTest, SendsAfterAWriteFailedWaitForTheKillAndAllFailNamingThePeer) {
  Met m = meet_raw_peer();
  const auto big = pattern(16 << 20, 1);  // far over the socket buffers: the first stays writing
  auto first = m.rank0->isend(1, kProbeTag, big);
  auto second = m.rank0->isend(1, kProbeTag, big);
  std::this_thread::sleep_for(100ms);
  ASSERT_FALSE(first->test()) << "16 MiB fit in the socket buffers: the test needs more";
  m.raw.close_in();                    // with bytes unread: the kernel resets it
  std::this_thread::sleep_for(200ms);  // the first one's write fails; the kill is 1 s after
  // Posted with no thread polling, it wakes the io thread to write the queue (a waiter that
  // polled would write it itself, and keep a send whose write fails queued).
  auto third = m.rank0->isend(1, kProbeTag, big);
  std::this_thread::sleep_for(100ms);
  for (auto* send : {&first, &second, &third}) {
    const std::string what = network_error(**send, Clock::now() + 10s);
    EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
