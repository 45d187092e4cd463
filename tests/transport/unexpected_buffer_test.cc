// UnexpectedBuffer: chunks allocated in order and only as asked, bytes back exact across chunk
// boundaries; and the strict reading of C10D_MAX_UNEXPECTED_BYTES.
#include "transport/unexpected_buffer.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "c10d/errors.h"

namespace c10d::inline v1::transport {
namespace {

constexpr std::uint64_t kChunk = UnexpectedBuffer::kChunkBytes;

std::vector<std::byte> bytes(std::size_t n, int seed) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((i * 31 + seed + (i >> 20)) & 0xff);
  return v;
}

// Writes `data` into `buf` in pieces of `piece` bytes, as a reader would.
void fill(UnexpectedBuffer& buf, const std::vector<std::byte>& data, std::size_t piece) {
  std::uint64_t at = 0;
  while (at < data.size()) {
    const auto room = buf.span_at(at);
    const std::size_t n = std::min<std::size_t>({room.size(), piece, data.size() - at});
    std::memcpy(room.data(), data.data() + at, n);
    at += n;
  }
}

TEST(UnexpectedBufferTest, NothingIsAllocatedForAClaimUntilBytesAreWritten) {
  UnexpectedBuffer huge(std::uint64_t{1} << 40);
  EXPECT_EQ(huge.allocated(), 0u);
  EXPECT_EQ(huge.allocation_at(0), kChunk);
  const auto first = huge.span_at(0);
  EXPECT_EQ(first.size(), kChunk);
  EXPECT_EQ(huge.allocated(), kChunk);
  EXPECT_EQ(huge.allocation_at(10), 0u);  // within the first chunk
  EXPECT_EQ(huge.span_at(kChunk - 3).size(), 3u);
  EXPECT_EQ(huge.allocation_at(kChunk), kChunk);
  huge.release();
  EXPECT_EQ(huge.allocated(), 0u);
}

TEST(UnexpectedBufferTest, TheLastChunkIsOnlyAsLongAsTheMessage) {
  UnexpectedBuffer buf(kChunk + 5);
  buf.span_at(0);
  EXPECT_EQ(buf.allocation_at(kChunk), 5u);
  EXPECT_EQ(buf.span_at(kChunk).size(), 5u);
  EXPECT_EQ(buf.allocated(), kChunk + 5);
  UnexpectedBuffer empty(0);
  EXPECT_EQ(empty.allocated(), 0u);
  empty.copy_to({});
}

TEST(UnexpectedBufferTest, BytesComeBackExactAcrossChunkBoundaries) {
  for (const std::size_t size :
       {std::size_t{1}, std::size_t{4096}, std::size_t(kChunk - 1), std::size_t(kChunk),
        std::size_t(kChunk + 1), std::size_t(3 * kChunk + 777)}) {
    for (const std::size_t piece : {std::size_t{1000}, std::size_t{65536}, std::size_t(kChunk)}) {
      const auto data = bytes(size, static_cast<int>(piece));
      UnexpectedBuffer buf(size);
      fill(buf, data, piece);
      EXPECT_EQ(buf.allocated(), size);
      std::vector<std::byte> out(size);
      buf.copy_to(out);
      EXPECT_EQ(out, data) << "size " << size << " piece " << piece;
      std::vector<std::byte> head(size / 2);  // a prefix, as shared memory copies one
      buf.copy_to(head);
      EXPECT_TRUE(std::equal(head.begin(), head.end(), data.begin()));
    }
  }
}

TEST(MaxUnexpectedBytesTest, TheOptionWinsThenTheVariableThenTheDefault) {
  ::unsetenv("C10D_MAX_UNEXPECTED_BYTES");
  EXPECT_EQ(max_unexpected_bytes(0), kDefaultMaxUnexpectedBytes);
  EXPECT_EQ(max_unexpected_bytes(4096), 4096u);
  ::setenv("C10D_MAX_UNEXPECTED_BYTES", "123456", 1);
  EXPECT_EQ(max_unexpected_bytes(0), 123456u);
  EXPECT_EQ(max_unexpected_bytes(7), 7u);
  ::setenv("C10D_MAX_UNEXPECTED_BYTES", "", 1);  // empty counts as unset
  EXPECT_EQ(max_unexpected_bytes(0), kDefaultMaxUnexpectedBytes);
  ::unsetenv("C10D_MAX_UNEXPECTED_BYTES");
}

TEST(MaxUnexpectedBytesTest, GarbageZeroAndOverflowAreRefusedNamingTheVariableAndTheFault) {
  EXPECT_EQ(parse_max_unexpected_bytes("18446744073709551615"), ~std::uint64_t{0});
  EXPECT_EQ(parse_max_unexpected_bytes("1"), 1u);
  // The faults in core::parse_uint's words, after the variable and its value.
  const std::pair<const char*, const char*> bad[] = {{"", "is empty"},
                                                     {"0", "0 is out of range [1, "},
                                                     {"18446744073709551616", "is out of range"},
                                                     {"-1", "not a whole number"},
                                                     {"+5", "not a whole number"},
                                                     {" 5", "not a whole number"},
                                                     {"5 ", "not a whole number"},
                                                     {"1G", "not a whole number"},
                                                     {"0x10", "not a whole number"},
                                                     {"lots", "not a whole number"}};
  for (const auto& [text, fault] : bad) {
    try {
      parse_max_unexpected_bytes(text);
      ADD_FAILURE() << "\"" << text << "\" was taken";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("C10D_MAX_UNEXPECTED_BYTES=\"") + text + "\""),
                std::string::npos)
          << what;
      EXPECT_NE(what.find(fault), std::string::npos) << what;
    }
  }
}

TEST(MaxUnexpectedBytesTest, TheLimitErrorNamesPeerBytesLimitAndVariable) {
  try {
    std::rethrow_exception(unexpected_limit_error("rank 3", 5, 70000, 65536));
  } catch (const NetworkError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("rank 3: peer rank 5"), std::string::npos) << what;
    EXPECT_NE(what.find("70000 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("limit of 65536 bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("C10D_MAX_UNEXPECTED_BYTES"), std::string::npos) << what;
  }
}

}  // namespace
}  // namespace c10d::inline v1::transport
