// The ICI fabric against a neighbour that writes packets no chip would: chip 0 of a line of two
// is real, chip 1 a FakeChip that meets it through the store with a segment of the layout
// fabric_layout.h draws, and then writes raw packets into the ring chip 0 reads from it. Claims
// of huge messages, floods of unexpected messages, packets out of place: chip 0 allocates only
// what arrives, holds at most its limit per source, and fails naming the source.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "../backends/transport_test_util.h"
#include "backends/tpu_ici/fabric_layout.h"
#include "backends/tpu_ici/ici_transport.h"
#include "backends/tpu_ici/shm_segment.h"
#include "c10d/errors.h"
#include "c10d/store.h"

namespace c10d::inline v1::tpu_ici {
namespace {

using namespace std::chrono_literals;
using transport::Clock;

constexpr std::size_t kRing = std::size_t{1} << 20;
constexpr Hop kMinus = 1;  // axis 0, direction -: from chip 1 to chip 0

std::atomic<int> group_counter{0};

std::uint64_t memory_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1));
  }
  return 0;
}

std::int64_t grown_kib(const char* field, std::uint64_t before) {
  return static_cast<std::int64_t>(memory_kib(field)) - static_cast<std::int64_t>(before);
}

Torus line_of_two() { return make_torus({.topology = "2"}, 2); }

// Chip 1 of a line of two, made of raw shared memory: takes part in the set-up as
// IciTransport::Chip does (fabric_setup.cc), then writes packets into chip 0's ring for hop -.
class FakeChip {
 public:
  FakeChip(Store& store, const std::string& group) : store_(store) {
    prefix_ =
        "ici/" + group + "/" + std::to_string(store.add("ici/" + group + "/generation/1", 1)) + "/";
    const std::string& prefix = prefix_;
    const std::string token_key = prefix + "token";
    store.wait(std::span<const std::string>(&token_key, 1), 20000ms);
    own_ = SharedSegment::create("/c10d-ici-fake-" + std::to_string(::getpid()) + "-" + group,
                                 segment_bytes(2, kRing));
    auto* h = new (own_.data()) ChipHeader();
    h->magic = kSegmentMagic;
    h->version = kLayoutVersion;
    h->rank = 1;
    h->world = 2;
    h->rings = 2;
    h->ring_bytes = kRing;
    h->pid = ::getpid();
    for (std::size_t k = 0; k < 2; ++k) {
      new (own_.data() + kChipHeaderBytes + k * (kRingHeaderBytes + kRing)) RingHeader();
    }
    header_ = h;
    store.set(prefix + "ready/1", own_.name());
    const std::string real_key = prefix + "ready/0";
    store.wait(std::span<const std::string>(&real_key, 1), 20000ms);
    real_ = SharedSegment::open(store.get_string(real_key));
    real_header_ = reinterpret_cast<ChipHeader*>(real_.data());
    std::byte* r = real_.data() + kChipHeaderBytes + kMinus * (kRingHeaderBytes + kRing);
    ring_ = ShmRing(reinterpret_cast<RingHeader*>(r), r + kRingHeaderBytes, kRing);
    if (store.add(prefix + "mapped", 1) == 2) store.set(prefix + "all_mapped", "1");
    const std::string all = prefix + "all_mapped";
    store.wait(std::span<const std::string>(&all, 1), 20000ms);
    own_.unlink();
  }
  // Says it is leaving, as a chip does, so chip 0's shutdown need not wait for it.
  ~FakeChip() { store_.add(prefix_ + "leaving", 1); }
  FakeChip(const FakeChip&) = delete;
  FakeChip& operator=(const FakeChip&) = delete;

  // A packet from chip 1 to chip 0 as a chip writes one.
  PacketHeader packet(transport::Tag tag, std::uint64_t seq, std::uint64_t message_bytes,
                      std::uint64_t offset, std::uint32_t payload_bytes) const {
    PacketHeader h;
    h.hops = 1;
    h.route[0] = kMinus;
    h.src = 1;
    h.dst = 0;
    h.tag = tag;
    h.seq = seq;
    h.message_bytes = message_bytes;
    h.offset = offset;
    h.payload_bytes = payload_bytes;
    return h;
  }

  // Writes a packet once the ring has room; false at the deadline (chip 0 reads no more).
  bool write(const PacketHeader& h, std::span<const std::byte> payload,
             Clock::time_point deadline) {
    while (ring_.room() < packet_bytes(h)) {
      if (Clock::now() > deadline) return false;
      std::this_thread::sleep_for(100us);
    }
    write_packet(ring_, h, payload);
    real_header_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(real_header_->doorbell);
    return true;
  }

  // Says this chip failed, as a chip that aborts does (naming `origin` as the rank that failed
  // first); chip 0's router sees it.
  void fail(const std::string& why, std::int32_t origin = 1) {
    header_->abort_origin = origin;
    header_->reason_bytes = static_cast<std::uint32_t>(why.size());
    std::memcpy(header_->reason, why.data(), why.size());
    header_->state.store(kAborted, std::memory_order_release);
    real_header_->doorbell.fetch_add(1, std::memory_order_seq_cst);
    futex_wake(real_header_->doorbell);
  }

 private:
  Store& store_;
  std::string prefix_;
  SharedSegment own_;
  SharedSegment real_;
  ChipHeader* header_ = nullptr;
  ChipHeader* real_header_ = nullptr;
  ShmRing ring_;
};

struct Met {
  std::shared_ptr<HashStore> store;
  std::unique_ptr<IciTransport> chip0;
  std::unique_ptr<FakeChip> fake;
};

Met meet_fake_chip(std::uint64_t max_unexpected_bytes = 0) {
  Met m;
  m.store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "icihostile" + std::to_string(group_counter++);
  std::exception_ptr error;
  std::thread real([&] {
    try {
      m.chip0 = std::make_unique<IciTransport>(
          m.store, 0, line_of_two(),
          FabricOptions{.group_name = group,
                        .timeout = 20s,
                        .ring_bytes = kRing,
                        .max_unexpected_bytes = max_unexpected_bytes});
    } catch (...) {
      error = std::current_exception();
    }
  });
  try {
    m.fake = std::make_unique<FakeChip>(*m.store, group);
  } catch (...) {
    real.join();
    throw;
  }
  real.join();
  if (error) std::rethrow_exception(error);
  return m;
}

using testing::network_error;

constexpr transport::Tag kProbeTag = 7;
constexpr transport::Tag kOtherTag = 100;

// The probe found a message's first packet allocating what the message claims, at once.
TEST(IciHostileTest, AFirstPacketClaimingAHugeMessageAllocatesOnlyWhatArrives) {
  Met m = meet_fake_chip();
  std::vector<std::byte> got(8);
  auto pending = m.chip0->irecv(1, kProbeTag, got);
  const auto rss = memory_kib("VmRSS");
  const auto mapped = memory_kib("VmSize");
  const std::vector<std::byte> payload(kMaxPayloadBytes, std::byte{0x33});
  for (std::uint64_t offset = 0; offset < (1u << 20); offset += kMaxPayloadBytes) {
    ASSERT_TRUE(
        m.fake->write(m.fake->packet(kOtherTag, 0, kMaxMessageBytes, offset, kMaxPayloadBytes),
                      payload, Clock::now() + 10s));
  }
  std::this_thread::sleep_for(100ms);  // the router delivers what came
  EXPECT_FALSE(pending->test());
  EXPECT_LT(grown_kib("VmRSS", rss), 32 << 10);
  EXPECT_LT(grown_kib("VmSize", mapped), 512 << 10);
  // Then chip 1 fails: chip 0 fails naming it.
  m.fake->fail("chip 1 gives up");
  const std::string what = network_error(*pending);
  EXPECT_NE(what.find("rank 1 failed: chip 1 gives up"), std::string::npos) << what;
}

TEST(IciHostileTest, AFloodOfSmallUnexpectedMessagesPastTheLimitFailsNamingSourceAndLimit) {
  Met m = meet_fake_chip(64 << 10);
  std::vector<std::byte> got(8);
  auto pending = m.chip0->irecv(1, kProbeTag, got);
  const std::vector<std::byte> eight(8, std::byte{1});
  for (std::uint64_t seq = 0; seq < 2000; ++seq) {
    const std::uint32_t len = seq % 2 == 0 ? 0 : 8;
    const auto h = m.fake->packet(kOtherTag + seq % 5, seq, len, 0, len);
    if (!m.fake->write(h, std::span(eight).first(len), Clock::now() + 200ms)) break;
  }
  const std::string what = network_error(*pending);
  EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("limit of 65536 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("C10D_MAX_UNEXPECTED_BYTES"), std::string::npos) << what;
}

TEST(IciHostileTest, AHugeClaimPastTheLimitFailsNamingTheSource) {
  Met m = meet_fake_chip(256 << 10);
  std::vector<std::byte> got(8);
  auto pending = m.chip0->irecv(1, kProbeTag, got);
  const std::vector<std::byte> payload(kMaxPayloadBytes, std::byte{0x44});
  for (std::uint64_t offset = 0; offset < (1u << 20); offset += kMaxPayloadBytes) {
    // Chip 0 stops reading once it failed: a short wait for room.
    if (!m.fake->write(m.fake->packet(kOtherTag, 0, kMaxMessageBytes, offset, kMaxPayloadBytes),
                       payload, Clock::now() + 200ms)) {
      break;
    }
  }
  const std::string what = network_error(*pending);
  EXPECT_NE(what.find("peer rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("limit of 262144 bytes"), std::string::npos) << what;
}

TEST(IciHostileTest, PacketsOutOfPlaceFailTheChipNamingTheSource) {
  struct Case {
    const char* named;
    std::function<void(FakeChip&)> send;
  };
  const std::vector<std::byte> payload(100, std::byte{5});
  const auto later = Clock::now() + 10s;
  const Case cases[] = {
      {"message too big",
       [&](FakeChip& f) {
         f.write(f.packet(kOtherTag, 0, kMaxMessageBytes + 1, 0, 0), {}, later);
       }},
      {"rank 1 sent bytes 300 to 400",  // a gap: bytes 100 to 300 never came
       [&](FakeChip& f) {
         f.write(f.packet(kOtherTag, 0, 1000, 0, 100), payload, later);
         f.write(f.packet(kOtherTag, 0, 1000, 300, 100), payload, later);
       }},
      {"first packet of its message 0 twice",
       [&](FakeChip& f) {
         f.write(f.packet(kOtherTag, 0, 1000, 0, 100), payload, later);
         f.write(f.packet(kOtherTag, 0, 1000, 0, 100), payload, later);
       }},
      {"has hop 200 in its route",
       [&](FakeChip& f) {
         auto h = f.packet(kOtherTag, 0, 100, 0, 100);
         h.hops = 2;
         h.route[1] = 200;
         f.write(h, payload, later);
       }},
  };
  for (const Case& c : cases) {
    Met m = meet_fake_chip();
    std::vector<std::byte> got(8);
    auto pending = m.chip0->irecv(1, kProbeTag, got);
    c.send(*m.fake);
    const std::string what = network_error(*pending);
    EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
    EXPECT_NE(what.find(c.named), std::string::npos) << what;
  }
}

// A neighbour's abort notice is its own to write: a rank outside the slice is blamed on the
// neighbour, and its text reaches the error printable.
TEST(IciHostileTest, ANeighboursAbortNoticeIsReadAsUntrustedText) {
  Met m = meet_fake_chip();
  std::vector<std::byte> got(8);
  auto pending = m.chip0->irecv(1, kProbeTag, got);
  m.fake->fail(std::string("bad\x1b[2Jnews\n"), 1 << 30);
  const std::string what = network_error(*pending);
  EXPECT_NE(what.find("rank 1 failed"), std::string::npos) << what;
  EXPECT_EQ(what.find(std::to_string(1 << 30)), std::string::npos) << what;
  EXPECT_EQ(what.find('\x1b'), std::string::npos) << what;
  EXPECT_NE(what.find("news"), std::string::npos) << what;
}

TEST(IciHostileTest, UnexpectedBytesCountOnlyUntilTheirReceivesTakeThem) {
  Met m = meet_fake_chip(64 << 10);
  constexpr int kMessages = 50;  // 50 * (320 + 128) bytes: under the limit at any time
  std::uint64_t seq = 0;
  for (int round = 0; round < 20; ++round) {
    for (int i = 0; i < kMessages; ++i) {
      std::vector<std::byte> payload(320, static_cast<std::byte>(round * kMessages + i));
      ASSERT_TRUE(m.fake->write(m.fake->packet(kOtherTag + i, seq++, 320, 0, 320), payload,
                                Clock::now() + 10s));
    }
    for (int i = 0; i < kMessages; ++i) {
      std::vector<std::byte> got(320);
      m.chip0->irecv(1, kOtherTag + i, got)->wait(Clock::now() + 10s);
      ASSERT_EQ(got, std::vector<std::byte>(320, static_cast<std::byte>(round * kMessages + i)))
          << "round " << round << " message " << i;
    }
  }
}

}  // namespace
}  // namespace c10d::inline v1::tpu_ici
