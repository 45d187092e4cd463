// Single-copy descriptors (shm_layout.h: kSingleCopy) from a same-host peer that lies: rank 0 is
// real, rank 1 a FakeShmPeer (fake_shm_peer.h) that rank 0 can read (it is this very process).
// A descriptor is untrusted input: a bad address, a span that runs past the sender's mapping, a
// length other than the receive's, a descriptor from a peer that never passed the probe or from
// another process, an acknowledgement of nothing. Rank 0 never crashes, never reads outside the
// advertised span, and fails the receive or the channel naming the peer and the fault.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "fake_shm_peer.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace shm_fake;

// After a refused descriptor the channel goes on: a message of the ring arrives exact.
void expect_stream_goes_on(Met& m) {
  std::vector<std::byte> next(8);
  auto recv = m.rank0->irecv(1, kOtherTag, next);
  ASSERT_TRUE(m.fake->write(m.fake->message(kOtherTag, pattern(8, 2)), progress_of(*recv), soon()));
  recv->wait(soon());
  EXPECT_EQ(next, pattern(8, 2));
}

TEST(ShmSingleCopyHostileTest, ABadAddressFailsTheReceiveNamingThePeerAndTheChannelGoesOn) {
  Met m = meet_fake_peer(0, true);
  std::vector<std::byte> got(64 << 10);
  auto recv = m.rank0->irecv(1, kProbeTag, got);
  ASSERT_TRUE(
      m.fake->write(m.fake->single_copy(kProbeTag, 4096, got.size()), progress_of(*recv), soon()));
  const std::string what = error_of<NetworkError>(*recv);
  EXPECT_NE(what.find("out of rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("0x1000"), std::string::npos) << what;
  EXPECT_NE(what.find("process_vm_readv: Bad address"), std::string::npos) << what;
  expect_stream_goes_on(m);
}

// The span starts in a mapped page and runs into one that is not: the copy fails rather than
// delivering part of it, and nothing past the span is read (the next page is unmapped).
TEST(ShmSingleCopyHostileTest, ASpanRunningPastTheSendersMappingFailsTheReceive) {
  Met m = meet_fake_peer(0, true);
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  auto* mem = static_cast<std::byte*>(
      ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  ASSERT_NE(mem, MAP_FAILED);
  ASSERT_EQ(::munmap(mem + page, page), 0);
  std::vector<std::byte> got(page);
  auto recv = m.rank0->irecv(1, kProbeTag, got);
  const auto address = reinterpret_cast<std::uintptr_t>(mem) + 100;
  ASSERT_TRUE(
      m.fake->write(m.fake->single_copy(kProbeTag, address, page), progress_of(*recv), soon()));
  const std::string what = error_of<NetworkError>(*recv);
  EXPECT_NE(what.find("Bad address"), std::string::npos) << what;
  EXPECT_NE(what.find(fmt::format("{} bytes", page)), std::string::npos) << what;
  ::munmap(mem, page);
  expect_stream_goes_on(m);
}

// A descriptor of more bytes than the receive holds fails the receive as any size mismatch
// does, naming the peer and both sizes; nothing is copied.
TEST(ShmSingleCopyHostileTest, ADescriptorLongerThanTheReceiveFailsAsASizeMismatch) {
  Met m = meet_fake_peer(0, true);
  const auto data = pattern(1 << 20, 1);
  std::vector<std::byte> got(4096, std::byte{0x5a});
  auto recv = m.rank0->irecv(1, kProbeTag, got);
  const auto address = reinterpret_cast<std::uintptr_t>(data.data());
  ASSERT_TRUE(m.fake->write(m.fake->single_copy(kProbeTag, address, data.size()),
                            progress_of(*recv), soon()));
  const std::string what = error_of<InvalidArgument>(*recv);
  EXPECT_NE(what.find("from rank 1 has 1048576 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("4096"), std::string::npos) << what;
  EXPECT_EQ(got, std::vector<std::byte>(4096, std::byte{0x5a}));
  expect_stream_goes_on(m);
}

// Descriptors a peer may not send, and acknowledgements of nothing, fail the channel naming
// the peer and the fault.
TEST(ShmSingleCopyHostileTest, ForbiddenDescriptorsAndStrayAcknowledgementsFailTheChannel) {
  static const std::vector<std::byte> data = pattern(1 << 20, 1);
  const auto address = reinterpret_cast<std::uintptr_t>(data.data());
  struct Case {
    const char* named;
    bool probed;
    std::function<std::vector<std::byte>(FakeShmPeer&)> make;
  };
  const Case cases[] = {
      {"a single-copy message, which this rank does not take from it", false,
       [&](FakeShmPeer& f) { return f.single_copy(kOtherTag, address, data.size()); }},
      {"not the peer's pid", true,
       [&](FakeShmPeer& f) { return f.single_copy(kOtherTag, address, data.size(), 1); }},
      {"a single-copy message of 0 bytes", true,
       [&](FakeShmPeer& f) { return f.single_copy(kOtherTag, address, 0); }},
      {"a single-copy message of 16 bytes at 0xfffffffffffffff8", true,
       [&](FakeShmPeer& f) { return f.single_copy(kOtherTag, ~std::uint64_t{7}, 16); }},
      {"an acknowledgement of message 5, which awaits none", true,
       [&](FakeShmPeer& f) { return f.ack(5); }},
      {"a message of kind 7", true,
       [&](FakeShmPeer& f) {
         auto msg = f.single_copy(kOtherTag, address, 8);
         const std::uint16_t kind = 7;
         std::memcpy(msg.data() + offsetof(shm::MessageHeader, kind), &kind, sizeof kind);
         return msg;
       }},
  };
  for (const Case& c : cases) {
    Met m = meet_fake_peer(0, c.probed);
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
