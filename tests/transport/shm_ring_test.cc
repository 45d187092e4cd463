// ShmRing: the byte stream comes out as it went in across the end of the data (and across 2^64
// of the counters), full and empty at their exact bounds, batches seen by the other side only
// once published, the writer-waiting mark, and a writer and a reader on two threads through two
// mappings of one shared-memory segment, every byte checked.
#include "transport/shm_ring.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "c10d/errors.h"
#include "transport/shared_memory.h"

namespace c10d::inline v1::transport {
namespace {

using namespace std::chrono_literals;

// Byte `i` of the test stream: differs per position, so a lost, doubled or shifted byte shows.
std::byte stream_byte(std::uint64_t i) {
  return std::byte(((i * 0x9e3779b1u) >> 11 ^ i ^ (i >> 8)) & 0xff);
}

std::vector<std::byte> stream(std::uint64_t from, std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t k = 0; k < n; ++k) v[k] = stream_byte(from + k);
  return v;
}

// A ring in this process's memory, header and data as in a segment, aligned as a mapping is.
class Ring {
 public:
  explicit Ring(std::size_t capacity)
      : memory_(static_cast<std::byte*>(std::aligned_alloc(4096, round(capacity)))),
        ring_(ShmRing::create(memory_.get(), capacity)) {}
  ShmRing& operator*() { return ring_; }
  ShmRing* operator->() { return &ring_; }
  std::byte* data() const { return memory_.get() + kShmRingHeaderBytes; }

 private:
  static std::size_t round(std::size_t capacity) {
    return (kShmRingHeaderBytes + capacity + 4095) / 4096 * 4096;
  }
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<std::byte, Free> memory_;
  ShmRing ring_;
};

std::vector<std::byte> read_n(ShmRing& ring, std::size_t n) {
  std::vector<std::byte> out(n);
  ring.read(out);
  return out;
}

TEST(ShmRingTest, StartsEmptyWithItsWholeCapacityFree) {
  Ring r(64);
  EXPECT_EQ(r->capacity(), 64u);
  EXPECT_EQ(r->room(), 64u);
  EXPECT_EQ(r->available(), 0u);
  EXPECT_TRUE(r->empty());
  EXPECT_EQ(r->header().head.load(), 0u);
  EXPECT_EQ(r->header().tail.load(), 0u);
  EXPECT_EQ(r->header().writer_waiting.load(), 0u);
}

TEST(ShmRingTest, FillsToExactlyItsCapacityAndEmptiesToZero) {
  Ring r(256);
  r->write(stream(0, 256));
  EXPECT_EQ(r->room(), 0u);
  EXPECT_EQ(r->available(), 256u);
  EXPECT_FALSE(r->empty());
  EXPECT_EQ(read_n(*r, 256), stream(0, 256));
  EXPECT_EQ(r->room(), 256u);
  EXPECT_TRUE(r->empty());
}

TEST(ShmRingTest, AWriteAcrossTheEndWrapsToTheStartOfTheData) {
  Ring r(64);
  r->write(stream(0, 40));
  EXPECT_EQ(read_n(*r, 40), stream(0, 40));
  r->write(stream(40, 50));  // 24 bytes at the end of the data, 26 at its start
  for (std::size_t k = 0; k < 24; ++k) EXPECT_EQ(r.data()[40 + k], stream_byte(40 + k)) << k;
  for (std::size_t k = 0; k < 26; ++k) EXPECT_EQ(r.data()[k], stream_byte(64 + k)) << k;
  EXPECT_EQ(r->room(), 14u);
  EXPECT_EQ(read_n(*r, 50), stream(40, 50));
}

TEST(ShmRingTest, PeekCopiesFromAnOffsetAcrossTheEndWithoutConsuming) {
  Ring r(64);
  r->write(stream(0, 60));
  r->consume(60);
  r->write(stream(60, 30));
  std::vector<std::byte> got(20);
  r->peek(2, got);  // positions 62..81: the last 2 bytes of the data, then 18 from its start
  EXPECT_EQ(got, stream(62, 20));
  EXPECT_EQ(r->available(), 30u);
  EXPECT_EQ(read_n(*r, 30), stream(60, 30));
}

TEST(ShmRingTest, PiecesOfEverySizeComeOutAsOneStream) {
  Ring r(128);
  std::uint64_t written = 0;
  std::uint64_t read = 0;
  std::mt19937 rng(7);
  while (read < 100000) {
    const std::size_t w = std::min<std::uint64_t>(rng() % 129, r->room());
    r->write(stream(written, w));
    written += w;
    const std::size_t n = std::min<std::uint64_t>(rng() % 129, r->available());
    ASSERT_EQ(read_n(*r, n), stream(read, n)) << "at byte " << read;
    read += n;
    ASSERT_EQ(r->available(), written - read);
    ASSERT_EQ(r->room(), 128 - (written - read));
  }
}

TEST(ShmRingTest, EmptyWritesAndReadsMoveNothing) {
  Ring r(64);
  r->write({});
  EXPECT_TRUE(r->empty());
  r->write(stream(0, 10));
  r->read({});
  r->peek(10, {});
  EXPECT_EQ(r->available(), 10u);
}

TEST(ShmRingTest, AOneByteRingPassesAStreamByteByByte) {
  Ring r(1);
  for (std::uint64_t i = 0; i < 1000; ++i) {
    ASSERT_EQ(r->room(), 1u);
    r->write(stream(i, 1));
    ASSERT_EQ(r->room(), 0u);
    ASSERT_FALSE(r->room_for(1));
    ASSERT_EQ(read_n(*r, 1), stream(i, 1));
    ASSERT_TRUE(r->take_writer_waiting());
  }
}

TEST(ShmRingTest, CountersThatCross2To64KeepTheirDifference) {
  Ring r(64);
  const std::uint64_t near_end = std::numeric_limits<std::uint64_t>::max() - 20;
  r->header().head.store(near_end);
  r->header().tail.store(near_end);
  std::uint64_t at = near_end;  // stream positions mod 2^64, as the counters
  for (int i = 0; i < 10; ++i) {
    r->write(stream(at, 48));
    EXPECT_EQ(r->available(), 48u);
    EXPECT_EQ(r->room(), 16u);
    EXPECT_EQ(read_n(*r, 48), stream(at, 48)) << i;
    at += 48;
  }
  EXPECT_LT(r->header().tail.load(), near_end);  // it wrapped
}

TEST(ShmRingTest, AWriterBatchIsSeenOnlyOncePublished) {
  Ring r(128);
  ShmRing::Writer w = r->writer();
  EXPECT_EQ(w.room(), 128u);
  w.write(stream(0, 30));
  w.skip(2);  // padding: the reader gets what the data held there
  w.write(stream(32, 40));
  EXPECT_EQ(w.room(), 56u);
  EXPECT_EQ(r->available(), 0u);  // nothing published yet
  w.publish();
  EXPECT_EQ(r->available(), 72u);
  const auto got = read_n(*r, 72);
  EXPECT_TRUE(std::equal(got.begin(), got.begin() + 30, stream(0, 30).begin()));
  EXPECT_TRUE(std::equal(got.begin() + 32, got.end(), stream(32, 40).begin()));
}

TEST(ShmRingTest, AWriterBatchSeesRoomMadeAfterItBeganOnlyInTheNextBatch) {
  Ring r(64);
  r->write(stream(0, 64));
  ShmRing::Writer w = r->writer();
  r->consume(32);
  EXPECT_EQ(w.room(), 0u);  // the reader's position as the batch began
  EXPECT_EQ(r->writer().room(), 32u);
}

TEST(ShmRingTest, AReaderBatchFreesRoomOnlyOncePublished) {
  Ring r(64);
  r->write(stream(0, 64));
  ShmRing::Reader rd = r->reader();
  std::vector<std::byte> got(16);
  rd.read(got);
  EXPECT_EQ(got, stream(0, 16));
  rd.peek(0, got);  // the batch's position moved; the shared one did not
  EXPECT_EQ(got, stream(16, 16));
  rd.skip(16);
  EXPECT_EQ(rd.available(), 32u);
  EXPECT_EQ(r->room(), 0u);
  rd.publish();
  EXPECT_EQ(r->room(), 32u);
  EXPECT_EQ(read_n(*r, 32), stream(32, 32));
}

TEST(ShmRingTest, AReaderBatchSeesBytesWrittenAfterItBeganOnlyInTheNextBatch) {
  Ring r(64);
  ShmRing::Reader rd = r->reader();
  r->write(stream(0, 8));
  EXPECT_EQ(rd.available(), 0u);
  EXPECT_EQ(r->reader().available(), 8u);
}

TEST(ShmRingTest, AWriterThatFindsNoRoomMarksTheRingAndTheReaderTakesTheMarkOnce) {
  Ring r(64);
  EXPECT_TRUE(r->room_for(64));
  EXPECT_EQ(r->header().writer_waiting.load(), 0u);  // room: no mark
  r->write(stream(0, 60));
  EXPECT_TRUE(r->room_for(4));
  EXPECT_FALSE(r->room_for(5));
  EXPECT_EQ(r->header().writer_waiting.load(), 1u);
  r->consume(10);
  EXPECT_TRUE(r->take_writer_waiting());
  EXPECT_FALSE(r->take_writer_waiting());
  EXPECT_TRUE(r->room_for(14));
}

TEST(ShmRingTest, ASizeThatIsNotAPowerOfTwoIsRefused) {
  Ring r(64);
  for (std::size_t bad : {std::size_t{0}, std::size_t{3}, std::size_t{100}, std::size_t{65}}) {
    EXPECT_THROW(static_cast<void>(ShmRing(&r->header(), r.data(), bad)), InvalidArgument) << bad;
  }
  EXPECT_THROW(static_cast<void>(ShmRing(nullptr, r.data(), 64)), InvalidArgument);
}

TEST(ShmRingTest, TheDoorbellIsBumpedAlwaysAndWakesASleeper) {
  std::atomic<std::uint32_t> bell{0};
  std::atomic<std::uint32_t> sleepers{0};
  ring_doorbell(bell, sleepers);
  EXPECT_EQ(bell.load(), 1u);
  std::atomic<bool> woke{false};
  sleepers.store(1);
  std::thread sleeper([&] {
    futex_wait(bell, 1, std::chrono::microseconds(20s));
    woke.store(true);
  });
  std::this_thread::sleep_for(50ms);  // most likely asleep by now; if not, the wait returns at once
  const auto start = std::chrono::steady_clock::now();
  ring_doorbell(bell, sleepers);
  sleeper.join();
  EXPECT_TRUE(woke.load());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
  EXPECT_EQ(bell.load(), 2u);
}

// A writer and a reader thread through two mappings of one segment (as two processes map it),
// pieces of random sizes through every member, until `total` bytes passed; every byte is
// checked, and a checksum of the whole. Fails rather than hangs past a deadline.
void stress(std::size_t capacity, std::uint64_t total, std::size_t max_piece) {
  const std::string name = owned_segment_name("c10d-ringtest", std::to_string(capacity));
  SharedSegment mine = SharedSegment::create(name, kShmRingHeaderBytes + capacity);
  SharedSegment theirs = SharedSegment::open(name);
  mine.unlink();
  ASSERT_NE(mine.data(), theirs.data());
  ShmRing writer_ring = ShmRing::create(mine.data(), capacity);
  ShmRing reader_ring = ShmRing::at(theirs.data(), capacity);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  const auto late = [&] { return std::chrono::steady_clock::now() > deadline; };

  std::uint64_t sent_sum = 0;
  std::thread writer([&] {
    std::mt19937_64 rng(1);
    std::vector<std::byte> piece;
    for (std::uint64_t at = 0; at < total && !late();) {
      const std::size_t want = std::min<std::uint64_t>(1 + rng() % max_piece, total - at);
      const std::uint64_t room = writer_ring.room();
      if (room == 0) {
        if (!writer_ring.room_for(1)) std::this_thread::yield();
        continue;
      }
      const std::size_t n = std::min<std::uint64_t>(want, room);
      piece = stream(at, n);
      for (std::byte b : piece) sent_sum = sent_sum * 31 + std::to_integer<unsigned>(b);
      if (rng() % 2 == 0) {
        writer_ring.write(piece);
      } else {  // a batch of two pieces, one publication
        ShmRing::Writer w = writer_ring.writer();
        w.write(std::span(piece).first(n / 2));
        w.write(std::span(piece).subspan(n / 2));
        w.publish();
      }
      at += n;
    }
  });

  std::uint64_t got_sum = 0;
  std::uint64_t bad = 0;
  std::uint64_t first_bad = 0;
  std::mt19937_64 rng(2);
  std::vector<std::byte> piece;
  for (std::uint64_t at = 0; at < total && !late();) {
    const std::uint64_t available = reader_ring.available();
    if (available == 0) {
      std::this_thread::yield();
      continue;
    }
    const std::size_t n = std::min<std::uint64_t>(1 + rng() % max_piece, available);
    piece.resize(n);
    switch (rng() % 3) {
      case 0:
        reader_ring.read(piece);
        break;
      case 1:
        reader_ring.peek(0, piece);
        reader_ring.consume(n);
        break;
      default: {  // a batch of two pieces, one publication
        ShmRing::Reader r = reader_ring.reader();
        r.read(std::span(piece).first(n / 2));
        r.read(std::span(piece).subspan(n / 2));
        r.publish();
      }
    }
    if (reader_ring.take_writer_waiting()) std::this_thread::yield();  // the writer looks again
    for (std::size_t k = 0; k < n; ++k) {
      if (piece[k] != stream_byte(at + k) && bad++ == 0) first_bad = at + k;
      got_sum = got_sum * 31 + std::to_integer<unsigned>(piece[k]);
    }
    at += n;
  }
  writer.join();
  ASSERT_FALSE(late()) << "the stream did not pass within a minute";
  EXPECT_EQ(bad, 0u) << "first wrong byte at " << first_bad;
  EXPECT_EQ(got_sum, sent_sum);
  EXPECT_TRUE(reader_ring.empty());
  EXPECT_EQ(reader_ring.header().tail.load(), total);
}

// 1 MiB wraps the ring 16,384 times. 4 MiB, every piece a hand-off between the threads, passed
// in 2.4 s on a quiet 2-core machine and ran past the minute beside a sanitizer build.
TEST(ShmRingTest, TwoThreadsStreamThroughATinyRingWrappingEveryFewBytes) {
  stress(64, std::uint64_t{1} << 20, 64);
}

TEST(ShmRingTest, TwoThreadsStreamThroughA64KiBRingInPiecesUpToItsSize) {
  stress(std::size_t{64} << 10, std::uint64_t{64} << 20, std::size_t{64} << 10);
}

}  // namespace
}  // namespace c10d::inline v1::transport
