// c10drun's flight recorder parts, in-process: the --trace-dir and --hang-timeout flags, the
// progress counters of --hang-timeout (progress_watch.h, with core/progress_file.h's writer),
// and what the verdict asks and reads (verdict.h).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../store/child_process.h"
#include "core/progress_file.h"
#include "launcher/launch_options.h"
#include "launcher/progress_watch.h"
#include "launcher/verdict.h"

namespace c10d::inline v1::launcher {
namespace {

using namespace std::chrono_literals;

std::string usage_error(const std::vector<std::string>& args) {
  try {
    parse_launch_options(args);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

TEST(VerdictOptionsTest, TraceDirAndHangTimeoutParse) {
  const LaunchOptions none = parse_launch_options({"p"});
  EXPECT_FALSE(none.trace_dir.has_value());
  EXPECT_EQ(none.hang_timeout, 0s);
  const LaunchOptions set =
      parse_launch_options({"--trace-dir", "/tmp/t", "--hang_timeout=30", "p"});
  EXPECT_EQ(set.trace_dir, "/tmp/t");
  EXPECT_EQ(set.hang_timeout, 30s);
  EXPECT_EQ(usage_error({"--trace-dir=", "p"}), "--trace-dir is empty");
  EXPECT_EQ(usage_error({"--hang-timeout", "0", "p"}),
            "--hang-timeout 0 is out of range [1, 604800]");
}

// The watch sees a rank's counter move (written as a rank's c10d writes it) and calls the job
// hung once none moved for the timeout; its files go with it.
TEST(ProgressWatchTest, ACounterThatStopsMovingForTheTimeoutIsAHang) {
  std::string dir;
  {
    ProgressWatch watch(1s, 2);
    dir = std::filesystem::path(watch.file_of(1)).parent_path();
    const auto t0 = ProgressWatch::Clock::now();
    EXPECT_FALSE(watch.hung(t0 + 300ms));
    EXPECT_EQ(watch.completed(), 0u);
    ASSERT_EQ(::setenv(core::progress::kFileEnv, watch.file_of(1).c_str(), 1), 0);
    core::progress::op_completed();
    core::progress::op_completed();
    ::unsetenv(core::progress::kFileEnv);
    EXPECT_FALSE(watch.hung(t0 + 900ms));  // moved
    EXPECT_EQ(watch.completed(), 2u);
    EXPECT_FALSE(watch.hung(t0 + 1800ms));  // still for 0.9 s
    EXPECT_TRUE(watch.hung(t0 + 2100ms));   // still for 1.2 s (looks come 250 ms apart)
  }
  EXPECT_FALSE(std::filesystem::exists(dir)) << dir;
}

TEST(TraceVerdictTest, CatchesSignalReadsProc) {
  struct sigaction sa {};
  sa.sa_handler = [](int) {};
  struct sigaction old {};
  ASSERT_EQ(::sigaction(SIGUSR2, &sa, &old), 0);
  EXPECT_TRUE(catches_signal(::getpid(), SIGUSR2));
  ::sigaction(SIGUSR2, &old, nullptr);
  EXPECT_FALSE(catches_signal(::getpid(), SIGUSR2));
}

// The old dumps of this node's ranks go when the job starts; a process that would die of
// SIGUSR1 is not sent it, and the verdict says why it left no dump.
TEST(TraceVerdictTest, OldDumpsGoAndAProcessWithoutTheHandlerIsNotAsked) {
  test::TempDir dir;
  const auto traces = dir.path() / "traces";
  std::filesystem::create_directories(traces);
  std::ofstream(dump_path(traces.string(), 0)) << "{}";
  std::ofstream(dump_path(traces.string(), 7)) << "{}";  // another node's rank
  TraceVerdict verdict(traces.string(), {0, 1});
  EXPECT_FALSE(std::filesystem::exists(dump_path(traces.string(), 0)));
  EXPECT_TRUE(std::filesystem::exists(dump_path(traces.string(), 7)));
  std::filesystem::remove(dump_path(traces.string(), 7));

  test::ChildProcess sleeper({"/bin/sleep", "30"}, {}, dir.path(), "sleeper");
  const std::vector<ProcessView> processes = {{0, sleeper.pid(), true, 'S'}};
  verdict.request(processes);
  EXPECT_TRUE(verdict.ready(processes));  // nobody asked, nothing to wait for
  EXPECT_TRUE(sleeper.running());         // SIGUSR1 would have killed it
  const auto lines = verdict.lines({});
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], "no dumps to analyze");
  EXPECT_EQ(lines[1],
            "rank 0 left no dump: it does not dump on request (no flight recorder SIGUSR1 "
            "handler)");
}

}  // namespace
}  // namespace c10d::inline v1::launcher
