// The TCP transport's frame header check (tcp_wire.h: decode_frame_header) and abort-notice
// decoder: a table of kinds and faults, and a seeded fuzz of random and mutated headers and
// payloads, each placed just before an inaccessible page so a read past its end would crash.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backends/gloo_like/tcp_wire.h"

namespace c10d::inline v1::gloo_like {
namespace {

// Bytes that end where an inaccessible page begins.
class Guarded {
 public:
  explicit Guarded(std::size_t capacity) {
    page_ = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
    pages_ = (capacity + page_ - 1) / page_ + 1;
    void* p =
        ::mmap(nullptr, pages_ * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<std::byte*>(p);
    ::mprotect(base_ + (pages_ - 1) * page_, page_, PROT_NONE);
  }
  ~Guarded() { ::munmap(base_, pages_ * page_); }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;

  // `bytes`, copied to end at the guard page.
  std::span<const std::byte> place(std::span<const std::byte> bytes) {
    std::byte* at = base_ + (pages_ - 1) * page_ - bytes.size();
    if (!bytes.empty()) std::memcpy(at, bytes.data(), bytes.size());
    return {at, bytes.size()};
  }

 private:
  std::size_t page_ = 0;
  std::size_t pages_ = 0;
  std::byte* base_ = nullptr;
};

FrameFault decode(std::uint64_t tag, std::uint64_t length, FrameHeader& out) {
  const auto bytes = encode_frame_header(tag, length);
  return decode_frame_header(bytes, out);
}

TEST(FrameHeaderTest, KindsAndFaults) {
  FrameHeader h;
  EXPECT_EQ(decode(42, 1000, h), FrameFault::kNone);
  EXPECT_EQ(h.kind, FrameKind::kData);
  EXPECT_EQ(h.tag, 42u);
  EXPECT_EQ(h.length, 1000u);
  EXPECT_EQ(decode(7, kMaxMessageBytes, h), FrameFault::kNone);
  EXPECT_EQ(decode(7, kMaxMessageBytes + 1, h), FrameFault::kTooLong);
  EXPECT_EQ(h.length, kMaxMessageBytes + 1);  // the values are kept for the error
  EXPECT_EQ(decode(7, ~std::uint64_t{0}, h), FrameFault::kTooLong);
  EXPECT_EQ(decode(kGoodbyeTag, 0, h), FrameFault::kNone);
  EXPECT_EQ(h.kind, FrameKind::kGoodbye);
  EXPECT_EQ(decode(kGoodbyeTag, 1, h), FrameFault::kGoodbyeWithPayload);
  EXPECT_EQ(decode(kAbortTag, 4, h), FrameFault::kNone);
  EXPECT_EQ(h.kind, FrameKind::kAbort);
  EXPECT_EQ(decode(kAbortTag, 4 + kMaxAbortMessageBytes, h), FrameFault::kNone);
  EXPECT_EQ(decode(kAbortTag, 3, h), FrameFault::kAbortLength);
  EXPECT_EQ(decode(kAbortTag, 4 + kMaxAbortMessageBytes + 1, h), FrameFault::kAbortLength);
  EXPECT_EQ(decode(kAbortTag, kMaxMessageBytes * 2, h), FrameFault::kAbortLength);

  decode(9, kMaxMessageBytes + 1, h);
  const std::string text = describe_frame_fault(FrameFault::kTooLong, h);
  EXPECT_NE(text.find("1099511627777"), std::string::npos) << text;
  EXPECT_NE(text.find("1099511627776"), std::string::npos) << text;
  decode(kAbortTag, 3, h);
  EXPECT_NE(describe_frame_fault(FrameFault::kAbortLength, h).find("length 3"), std::string::npos);
}

// A data frame carries its call after tag and length (little-endian, bytes 16-23); 0 unchecked.
TEST(FrameHeaderTest, TheCallRidesAfterTagAndLength) {
  const auto bytes = encode_frame_header(42, 1000, 0x0102ff0000000400);
  EXPECT_EQ(kFrameHeaderBytes, 24u);
  EXPECT_EQ(get_le<std::uint64_t>(bytes.data() + 16), 0x0102ff0000000400u);
  EXPECT_EQ(bytes[16], std::byte{0x00});
  EXPECT_EQ(bytes[23], std::byte{0x01});
  FrameHeader h;
  ASSERT_EQ(decode_frame_header(bytes, h), FrameFault::kNone);
  EXPECT_EQ(h.tag, 42u);
  EXPECT_EQ(h.length, 1000u);
  EXPECT_EQ(h.call, 0x0102ff0000000400u);
  ASSERT_EQ(decode(42, 1000, h), FrameFault::kNone);
  EXPECT_EQ(h.call, 0u);
}

TEST(FrameHeaderTest, TheFrameOfAnAbortNoticeDecodesAsOne) {
  const auto frame = encode_abort_notice({2, std::string(10000, 'y')});
  FrameHeader h;
  ASSERT_EQ(decode_frame_header(
                std::span<const std::byte, kFrameHeaderBytes>(frame.data(), kFrameHeaderBytes), h),
            FrameFault::kNone);
  EXPECT_EQ(h.kind, FrameKind::kAbort);
  EXPECT_EQ(h.length, frame.size() - kFrameHeaderBytes);
}

// Random and mutated headers and abort-notice payloads: the decoders take whatever comes,
// read nothing outside it (the guard page), and what they accept keeps the protocol's bounds.
TEST(FrameHeaderFuzzTest, RandomAndMutatedHeadersAndAbortNoticesNeverCrashOrReadOutOfBounds) {
  std::mt19937_64 rng(20261130);
  Guarded guard(8192);
  const std::uint64_t tags[] = {0, 1, 42, kGoodbyeTag, kAbortTag, kAbortTag - 1, ~std::uint64_t{0}};
  const std::uint64_t lengths[] = {0,
                                   1,
                                   3,
                                   4,
                                   5,
                                   4 + kMaxAbortMessageBytes,
                                   5 + kMaxAbortMessageBytes,
                                   kMaxMessageBytes,
                                   kMaxMessageBytes + 1,
                                   ~std::uint64_t{0}};
  int accepted = 0;
  int refused = 0;
  for (int iter = 0; iter < 200000; ++iter) {
    std::array<std::byte, kFrameHeaderBytes> raw{};
    if (iter % 4 == 0) {
      for (auto& b : raw) b = static_cast<std::byte>(rng());
    } else {
      raw = encode_frame_header(tags[rng() % std::size(tags)], lengths[rng() % std::size(lengths)]);
      for (int m = 0, n = static_cast<int>(rng() % 3); m < n; ++m) {
        raw[rng() % raw.size()] = static_cast<std::byte>(rng());
      }
    }
    const auto placed = guard.place(raw);
    FrameHeader h;
    const FrameFault fault = decode_frame_header(
        std::span<const std::byte, kFrameHeaderBytes>(placed.data(), kFrameHeaderBytes), h);
    ASSERT_EQ(h.tag, get_le<std::uint64_t>(raw.data()));
    ASSERT_EQ(h.length, get_le<std::uint64_t>(raw.data() + 8));
    ASSERT_EQ(h.call, get_le<std::uint64_t>(raw.data() + 16));
    if (fault != FrameFault::kNone) {
      ++refused;
      ASSERT_FALSE(describe_frame_fault(fault, h).empty());
      continue;
    }
    ++accepted;
    switch (h.kind) {
      case FrameKind::kData:
        ASSERT_NE(h.tag, kGoodbyeTag);
        ASSERT_NE(h.tag, kAbortTag);
        ASSERT_LE(h.length, kMaxMessageBytes);
        break;
      case FrameKind::kGoodbye:
        ASSERT_EQ(h.tag, kGoodbyeTag);
        ASSERT_EQ(h.length, 0u);
        break;
      case FrameKind::kAbort: {
        ASSERT_EQ(h.tag, kAbortTag);
        ASSERT_GE(h.length, 4u);
        ASSERT_LE(h.length, 4 + kMaxAbortMessageBytes);
        // The payload a reader would then take: random or a real notice's, mutated, cut.
        std::vector<std::byte> payload(h.length);
        for (auto& b : payload) b = static_cast<std::byte>(rng());
        const auto notice = guard.place(payload);
        const AbortNotice back = decode_abort_notice(notice);
        ASSERT_EQ(back.message.size(), h.length - 4);
        for (std::size_t i = 0; i < back.message.size(); ++i) {
          const auto sent = static_cast<unsigned char>(payload[4 + i]);
          const bool control = sent < 0x20 || sent == 0x7f;
          ASSERT_EQ(back.message[i], control ? '?' : static_cast<char>(sent));
        }
        break;
      }
    }
  }
  // Payloads of any length, shorter than a notice and longer than the limit, alike.
  for (int iter = 0; iter < 20000; ++iter) {
    std::vector<std::byte> payload(rng() % 6000);
    for (auto& b : payload) b = static_cast<std::byte>(rng());
    const AbortNotice back = decode_abort_notice(guard.place(payload));
    if (payload.size() < 4) {
      ASSERT_EQ(back.lost_rank, -1);
      ASSERT_TRUE(back.message.empty());
    } else {
      ASSERT_EQ(back.message.size(), std::min(payload.size() - 4, kMaxAbortMessageBytes));
    }
  }
  EXPECT_GT(accepted, 10000);
  EXPECT_GT(refused, 10000);
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
