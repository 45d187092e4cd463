// ShmTransport against a same-host peer that writes what no ShmTransport would: rank 0 is real,
// rank 1 a FakeShmPeer that takes part in the set-up with a segment of its own (shm_layout.h)
// and then writes raw messages into rank 0's ring. Headers that claim huge messages, floods of
// unexpected messages, corrupt headers: rank 0 allocates only what arrives, holds at most its
// limit per peer, and fails naming the peer.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "backends/gloo_like/shm_layout.h"
#include "backends/gloo_like/shm_transport.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "transport/shared_memory.h"
#include "transport_test_util.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;
using c10d::testing::memory_kib;
using c10d::testing::pattern;
using c10d::testing::soon;
using transport::Clock;

constexpr std::size_t kRing = std::size_t{64} << 10;
constexpr transport::Tag kProbeTag = transport::make_tag(1, 7);
constexpr transport::Tag kOtherTag = transport::make_tag(1, 100);

std::atomic<int> group_counter{0};

// Rank 1 of a two-rank group on this host, made of raw shared memory: it publishes its host
// key and a segment of the layout ShmTransport checks, maps rank 0's, and then writes messages
// into the ring rank 0 reads from it (ring 0: rank 1 is rank 0's only same-host peer).
class FakeShmPeer {
 public:
  FakeShmPeer(Store& store, const std::string& group, std::size_t ring_bytes)
      : ring_bytes_(ring_bytes) {
    using namespace shm;
    // Numbered as a real rank numbers its set-up (backends/common/setup_watch.h).
    const std::int64_t attempt = store.add(group + "/setup/attempt/1", 1);
    const std::string prefix = group + "/shm/" + std::to_string(attempt) + "/";
    store.set(prefix + "host/1", shm_host_key());
    own_ = transport::SharedSegment::create(
        "/c10d-fake-shm-" + std::to_string(::getpid()) + "-" + group, ring_offset(1, ring_bytes));
    auto* h = new (own_.data()) SegmentHeader{};
    h->magic = kSegmentMagic;
    h->version = kVersion;
    h->rank = 1;
    h->rings = 1;
    h->ring_bytes = ring_bytes;
    h->pid = ::getpid();
    new (own_.data() + ring_offset(0, ring_bytes)) RingHeader{};
    store.set(prefix + "segment/1", own_.name());
    const std::string theirs = prefix + "segment/0";
    store.wait(std::span<const std::string>(&theirs, 1), 20000ms);
    real_ = transport::SharedSegment::open(store.get_string(theirs));
    real_header_ = reinterpret_cast<SegmentHeader*>(real_.data());
    ring_ = reinterpret_cast<RingHeader*>(real_.data() + ring_offset(0, ring_bytes));
    data_ = real_.data() + ring_offset(0, ring_bytes) + kRingHeaderBytes;
    store.set(prefix + "mapped/1", "1");
    const std::string mapped = prefix + "mapped/0";
    store.wait(std::span<const std::string>(&mapped, 1), 20000ms);
    own_.unlink();
  }

  // Writes `bytes` into the ring as room appears, calling `progress` (which makes rank 0 read)
  // while it is full; false at the deadline or once `progress` says to stop.
  bool write(std::span<const std::byte> bytes, const std::function<bool()>& progress,
             Clock::time_point deadline) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const std::uint64_t head = ring_->head.load(std::memory_order_acquire);
      const std::uint64_t room = ring_bytes_ - (tail_ - head);
      const std::size_t n = std::min<std::size_t>(room, bytes.size() - done);
      for (std::size_t i = 0; i < n; ++i) data_[(tail_ + i) & (ring_bytes_ - 1)] = bytes[done + i];
      tail_ += n;
      done += n;
      ring_->tail.store(tail_, std::memory_order_release);
      real_header_->doorbell.fetch_add(1, std::memory_order_seq_cst);
      transport::futex_wake(real_header_->doorbell);
      if (done < bytes.size() && (!progress() || Clock::now() > deadline)) return false;
    }
    return true;
  }

  // A message header as ShmTransport writes one (the next sequence number unless given), and
  // `payload` padded to 64 bytes; `claimed` is what the header says the payload has.
  std::vector<std::byte> message(transport::Tag tag, std::span<const std::byte> payload,
                                 std::uint64_t claimed) {
    shm::MessageHeader h;
    h.tag = tag;
    h.bytes = claimed;
    h.sequence = sequence_++;
    std::vector<std::byte> out(sizeof h + shm::padded(payload.size()));
    std::memcpy(out.data(), &h, sizeof h);
    if (!payload.empty()) std::memcpy(out.data() + sizeof h, payload.data(), payload.size());
    return out;
  }
  std::vector<std::byte> message(transport::Tag tag, std::span<const std::byte> payload) {
    return message(tag, payload, payload.size());
  }
  void skip_sequence() { ++sequence_; }

 private:
  std::size_t ring_bytes_;
  transport::SharedSegment own_;
  transport::SharedSegment real_;
  shm::SegmentHeader* real_header_ = nullptr;
  shm::RingHeader* ring_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t tail_ = 0;
  std::uint64_t sequence_ = 0;
};

struct Met {
  std::shared_ptr<HashStore> store;
  std::unique_ptr<ShmTransport> rank0;
  std::unique_ptr<FakeShmPeer> fake;
};

Met meet_fake_peer(std::uint64_t max_unexpected_bytes = 0) {
  Met m;
  m.store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "shmhostile" + std::to_string(group_counter++);
  std::exception_ptr error;
  std::thread real([&] {
    try {
      m.rank0 = std::make_unique<ShmTransport>(
          m.store, 0, 2,
          ShmTransportOptions{.group_name = group,
                              .timeout = 20s,
                              .ring_bytes = kRing,
                              .max_unexpected_bytes = max_unexpected_bytes});
    } catch (...) {
      error = std::current_exception();
    }
  });
  try {
    m.fake = std::make_unique<FakeShmPeer>(*m.store, group, kRing);
  } catch (...) {
    real.join();
    throw;
  }
  real.join();
  if (error) std::rethrow_exception(error);
  EXPECT_EQ(m.rank0->same_host_peers(), 1);
  return m;
}

// Progress for the fake's writes: rank 0 reads while `req` is pending; false once it is done.
std::function<bool()> progress_of(transport::Request& req) {
  return [&req] {
    try {
      return !req.test();
    } catch (const std::exception&) {
      return false;  // failed: rank 0 reads no more
    }
  };
}

// The NetworkError `req` fails with.
std::string network_error(transport::Request& req) {
  try {
    req.wait(Clock::now() + 10s);
  } catch (const NetworkError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not a NetworkError: " << e.what();
    return e.what();
  }
  ADD_FAILURE() << "the request succeeded";
  return "";
}

std::int64_t grown_kib(const char* field, std::uint64_t before) {
  return static_cast<std::int64_t>(memory_kib(field)) - static_cast<std::int64_t>(before);
}

TEST(ShmHostileTest, AHeaderClaimingAHugeMessageAllocatesOnlyWhatArrives) {
  Met m = meet_fake_peer();
  std::vector<std::byte> got(8);
  auto pending = m.rank0->irecv(1, kProbeTag, got);
  const auto rss = memory_kib("VmRSS");
  const auto mapped = memory_kib("VmSize");
  const auto payload = pattern(1 << 20, 3);
  // Claims 2^40 bytes (the most a header may), sends 1 MiB of them through the 64 KiB ring.
  auto msg = m.fake->message(kOtherTag, payload, shm::kMaxMessageBytes);
  ASSERT_TRUE(m.fake->write(msg, progress_of(*pending), soon()));
  EXPECT_FALSE(pending->test());
  EXPECT_LT(grown_kib("VmRSS", rss), 32 << 10);
  EXPECT_LT(grown_kib("VmSize", mapped), 512 << 10);
}

TEST(ShmHostileTest, AHugeClaimPastTheLimitFailsTheChannelNamingThePeer) {
  Met m = meet_fake_peer(256 << 10);
  std::vector<std::byte> got(8);
  auto pending = m.rank0->irecv(1, kProbeTag, got);
  auto msg = m.fake->message(kOtherTag, pattern(1 << 20, 3), shm::kMaxMessageBytes);
  m.fake->write(msg, progress_of(*pending), soon());
  const std::string what = network_error(*pending);
  EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("limit of 262144 bytes"), std::string::npos) << what;
}

TEST(ShmHostileTest, AFloodOfSmallUnexpectedMessagesPastTheLimitFailsNamingPeerAndLimit) {
  Met m = meet_fake_peer(64 << 10);
  std::vector<std::byte> got(8);
  auto pending = m.rank0->irecv(1, kProbeTag, got);
  std::vector<std::byte> flood;
  for (int i = 0; i < 2000; ++i) {
    const auto one = m.fake->message(kOtherTag + i % 5, pattern(i % 2 == 0 ? 0 : 8, i));
    flood.insert(flood.end(), one.begin(), one.end());
  }
  m.fake->write(flood, progress_of(*pending), soon());
  const std::string what = network_error(*pending);
  EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("limit of 65536 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("C10D_MAX_UNEXPECTED_BYTES"), std::string::npos) << what;
  EXPECT_THROW(m.rank0->irecv(1, kOtherTag, got)->wait(soon()), NetworkError);
}

TEST(ShmHostileTest, UnexpectedBytesCountOnlyUntilTheirReceivesTakeThem) {
  Met m = meet_fake_peer(64 << 10);
  constexpr int kMessages = 50;  // 50 * (320 + 128) bytes: under the limit at any time
  for (int round = 0; round < 20; ++round) {
    std::vector<std::byte> batch;
    for (int i = 0; i < kMessages; ++i) {
      const auto one = m.fake->message(kOtherTag + i, pattern(320, round * kMessages + i));
      batch.insert(batch.end(), one.begin(), one.end());
    }
    std::vector<std::byte> marker(8);
    auto last = m.rank0->irecv(1, kProbeTag, marker);
    const auto end = m.fake->message(kProbeTag, pattern(8, round));
    batch.insert(batch.end(), end.begin(), end.end());
    ASSERT_TRUE(m.fake->write(batch, progress_of(*last), soon()));
    last->wait(soon());  // every message before it is read, none of them posted
    for (int i = 0; i < kMessages; ++i) {
      std::vector<std::byte> got(320);
      m.rank0->irecv(1, kOtherTag + i, got)->wait(soon());
      ASSERT_EQ(got, pattern(320, round * kMessages + i)) << "round " << round << " message " << i;
    }
  }
}

TEST(ShmHostileTest, CorruptHeadersFailTheChannelNamingPeerAndFault) {
  struct Case {
    const char* named;
    std::function<std::vector<std::byte>(FakeShmPeer&)> make;
  };
  const Case cases[] = {
      {"over the limit of 1099511627776",
       [](FakeShmPeer& f) { return f.message(kOtherTag, {}, shm::kMaxMessageBytes + 1); }},
      {"sequence number 1 where 0 comes next",
       [](FakeShmPeer& f) {
         f.skip_sequence();
         return f.message(kOtherTag, pattern(8, 1));
       }},
      {"magic 0x21",
       [](FakeShmPeer& f) {
         auto msg = f.message(kOtherTag, pattern(8, 1));
         std::memset(msg.data(), 0, 4);
         msg[0] = std::byte{0x21};
         return msg;
       }},
  };
  for (const Case& c : cases) {
    Met m = meet_fake_peer();
    std::vector<std::byte> got(8);
    auto pending = m.rank0->irecv(1, kProbeTag, got);
    m.fake->write(c.make(*m.fake), progress_of(*pending), soon());
    const std::string what = network_error(*pending);
    EXPECT_NE(what.find("from rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find(c.named), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
