// The log level from the environment: a name that is not a level is said once, through the
// logger (so a log reader sees it as the warning it is), and the process goes on at warn.
#include "core/logging.h"

#include <gtest/gtest.h>

#include "../store/child_process.h"
#include "c10d/errors.h"

namespace c10d::inline v1::core {
namespace {

TEST(LoggingTest, ABadLevelIsSaidOnceThroughTheLoggerAndWarnIsUsed) {
  test::TempDir dir;
  test::ChildProcess child({(test::build_dir() / "tests" / "log_level_child").string()},
                           {{"C10D_LOG_LEVEL", "loud"}}, dir.path(), "child");
  const test::ChildExit exit = child.wait(test::Clock::now() + std::chrono::seconds(30));
  ASSERT_TRUE(exit.exited && exit.code == 0) << child.describe();
  const std::string err = child.err();
  EXPECT_EQ(test::occurrences(err, "C10D_LOG_LEVEL ignored"), 1u) << err;
  EXPECT_NE(err.find("] C10D_LOG_LEVEL ignored, warn used instead: unknown log level 'loud'"),
            std::string::npos)
      << err;
  EXPECT_EQ(err.rfind("[c10d WARN ", 0), 0u) << "not a logger line: " << err;
  EXPECT_NE(err.find("] a warning\n"), std::string::npos) << err;
  EXPECT_EQ(err.find("an info line"), std::string::npos) << err;
}

TEST(LoggingTest, LevelsParseInAnyCaseAndUnknownOnesAreRefused) {
  EXPECT_EQ(parse_log_level("INFO"), LogLevel::kInfo);
  EXPECT_EQ(parse_log_level("warning"), LogLevel::kWarn);
  EXPECT_EQ(parse_log_level("none"), LogLevel::kOff);
  EXPECT_THROW(parse_log_level("loud"), InvalidArgument);
}

}  // namespace
}  // namespace c10d::inline v1::core
