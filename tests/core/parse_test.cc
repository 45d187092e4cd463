// core/parse.h: strict numbers (the whole text, within bounds, no wrapping of a sign or of an
// overflow), environment variables whose errors name the variable, its value and the bound,
// and size arithmetic that reports overflow instead of wrapping.
#include "core/parse.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstdint>
#include <limits>

#include "c10d/errors.h"

namespace c10d::inline v1::core {
namespace {

TEST(ParseTest, IntegersAreTheWholeTextWithinTheirBounds) {
  EXPECT_EQ(parse_uint("65536", 0, 1 << 20).value, 65536u);
  EXPECT_EQ(parse_int("-5", -10, 10).value, -5);
  for (const char* bad : {"", " 1", "1 ", "+1", "1x", "0x10", "1e3", "1.0"}) {
    EXPECT_FALSE(parse_uint(bad, 0, 100).value) << "'" << bad << "'";
    EXPECT_FALSE(parse_int(bad, 0, 100).value) << "'" << bad << "'";
  }
  // A sign is never wrapped into a huge unsigned value.
  const auto negative = parse_uint("-1", 0, std::numeric_limits<std::uint64_t>::max());
  EXPECT_FALSE(negative.value);
  EXPECT_NE(negative.error.find("'-1'"), std::string::npos) << negative.error;
  // Past the type: out of range, naming the bounds.
  const auto huge = parse_uint("18446744073709551616", 0, 7);
  EXPECT_FALSE(huge.value);
  EXPECT_NE(huge.error.find("out of range [0, 7]"), std::string::npos) << huge.error;
  const auto above = parse_int("9223372036854775807", 1, 1000);
  EXPECT_NE(above.error.find("9223372036854775807 is out of range [1, 1000]"), std::string::npos)
      << above.error;
}

TEST(ParseTest, DoublesAreFiniteAndWithinTheirBounds) {
  EXPECT_DOUBLE_EQ(*parse_double("45.5", 0, 100).value, 45.5);
  for (const char* bad : {"inf", "nan", "-inf", "1e400", "0x1p3", "4 5", "45GB", ""}) {
    EXPECT_FALSE(parse_double(bad, 0, 1e9).value) << bad;
  }
  EXPECT_FALSE(parse_double("0", 1e-3, 1).value);
}

TEST(ParseTest, FlagsAreBooleanWords) {
  EXPECT_EQ(parse_flag("off").value, false);
  EXPECT_EQ(parse_flag("1").value, true);
  EXPECT_FALSE(parse_flag("2").value);
}

TEST(ParseTest, EnvironmentErrorsNameTheVariableItsValueAndTheBound) {
  ::unsetenv("C10D_PARSE_TEST");
  EXPECT_FALSE(env_uint("C10D_PARSE_TEST", 1, 10));
  ::setenv("C10D_PARSE_TEST", "", 1);
  EXPECT_FALSE(env_uint("C10D_PARSE_TEST", 1, 10));  // empty: not given
  ::setenv("C10D_PARSE_TEST", "7", 1);
  EXPECT_EQ(env_uint("C10D_PARSE_TEST", 1, 10), 7u);
  for (const char* bad : {"9223372036854775808", "11", "-3", "7abc"}) {
    ::setenv("C10D_PARSE_TEST", bad, 1);
    try {
      env_uint("C10D_PARSE_TEST", 1, 10);
      ADD_FAILURE() << bad << " was taken";
    } catch (const InvalidArgument& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("C10D_PARSE_TEST=") + bad), std::string::npos) << what;
      EXPECT_NE(what.find("[1, 10]"), std::string::npos) << what;
    }
  }
  ::unsetenv("C10D_PARSE_TEST");
}

TEST(ParseTest, SizeArithmeticReportsOverflow) {
  EXPECT_EQ(checked_mul_add(2, 128 + (std::size_t{1} << 20), 4096), 4096 + 2 * (128 + (1 << 20)));
  // The segment of two rings of 2^63 bytes that once wrapped to 4352 bytes.
  EXPECT_FALSE(checked_mul_add(2, (std::size_t{1} << 63) + 128, 4096));
  EXPECT_FALSE(checked_mul_add(1, std::numeric_limits<std::size_t>::max(), 1));
}

TEST(ParseTest, TimeoutsAreBounded) {
  EXPECT_NO_THROW(check_timeout(Milliseconds(1), "t"));
  EXPECT_NO_THROW(check_timeout(kMaxTimeout, "t"));
  EXPECT_THROW(check_timeout(Milliseconds(0), "t"), InvalidArgument);
  try {
    check_timeout(Milliseconds::max(), "the group");
    ADD_FAILURE();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("2147483647"), std::string::npos) << e.what();
  }
}

// Bytes from a store or a peer that go into a message: cut, control characters made '?', the
// rest (UTF-8 included) kept.
TEST(ParseTest, PrintableCutsAndMasksControlCharacters) {
  EXPECT_EQ(printable("rank 3 died"), "rank 3 died");
  EXPECT_EQ(printable(std::string_view("a\nb\x1b[2J\x7f\0c", 10)), "a?b?[2J??c");
  EXPECT_EQ(printable("caf\xc3\xa9"), "caf\xc3\xa9");
  EXPECT_EQ(printable("abcdef", 3), "abc");
  EXPECT_EQ(printable("", 3), "");
}

}  // namespace
}  // namespace c10d::inline v1::core
