// ShmTransport against a same-host peer that writes what no ShmTransport would: rank 0 is real,
// rank 1 a FakeShmPeer that takes part in the set-up with a segment of its own (shm_layout.h)
// and then writes raw messages into rank 0's ring. Headers that claim huge messages, floods of
// unexpected messages, corrupt headers: rank 0 allocates only what arrives, holds at most its
// limit per peer, and fails naming the peer.
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fake_shm_peer.h"
#include "transport/shared_memory.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace shm_fake;
using c10d::testing::memory_kib;

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

// A segment's name comes from the store, which anyone who can write it can fill: one that
// shm_open could not take, or that would reach outside /dev/shm, is refused before it is
// opened, and its error shows the name's start alone (a 1 MiB name once went whole into it).
TEST(ShmHostileTest, SegmentNamesFromTheStoreAreCheckedBeforeTheyAreOpened) {
  const std::string huge = "/" + std::string(1 << 20, 'x');
  for (const std::string& bad : {std::string(), std::string("/"), std::string("no-slash"),
                                 std::string("/a/../b"), std::string("/with space"),
                                 std::string("/esc\x1b[2J"), "/" + std::string(256, 'n'), huge}) {
    try {
      transport::SharedSegment::open(bad);
      ADD_FAILURE() << "opened '" << bad.substr(0, 40) << "'";
    } catch (const NetworkError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find("not a segment name"), std::string::npos) << what;
      EXPECT_NE(what.find(std::to_string(bad.size()) + " bytes"), std::string::npos) << what;
      EXPECT_LT(what.size(), 1000u) << what.substr(0, 200);
      EXPECT_EQ(what.find('\x1b'), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
