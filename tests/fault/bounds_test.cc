// Sizes and times that come from users are bounded before anything is computed from them:
// C10D_SHM_RING_BYTES=2^63 once passed its check, the segment size wrapped to 4352 bytes and
// the ranks died with SIGSEGV writing past it. Each refusal is an InvalidArgument naming the
// variable (or option), its value and the bound. Process-wide settings read once per process
// (C10D_SPIN_US, LOCAL_WORLD_SIZE, C10D_LAZY_CACHE) are tried in child processes.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "../store/child_process.h"
#include "backends/gloo_like/shm_transport.h"
#include "backends/tpu_ici/ici_transport.h"
#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/store.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;

// Sets a variable for the scope of one check.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ~ScopedEnv() { ::unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

void expect_names(const std::string& what, const std::vector<std::string>& parts) {
  for (const auto& part : parts) EXPECT_NE(what.find(part), std::string::npos) << what;
}

TEST(BoundsTest, ShmRingBytesFromTheEnvironmentCannotWrapTheSegmentSize) {
  for (const char* value : {"9223372036854775808", "18446744073709551616", "-65536", "65536x",
                            "2147483648", "100000"}) {
    SCOPED_TRACE(value);
    ScopedEnv env("C10D_SHM_RING_BYTES", value);
    auto store = std::make_shared<HashStore>(5000ms);
    std::atomic<int> refused{0};
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        try {
          gloo_like::ShmTransport t(store, r, 3,
                                    gloo_like::ShmTransportOptions{
                                        .group_name = std::string("ring") + value, .timeout = 5s});
          ADD_FAILURE() << "rank " << r << " accepted C10D_SHM_RING_BYTES=" << value;
        } catch (const InvalidArgument& e) {
          expect_names(e.what(), {"C10D_SHM_RING_BYTES", value, "1073741824"});
          ++refused;
        }
      });
    }
    for (auto& t : ranks) t.join();
    EXPECT_EQ(refused.load(), 3);
  }
}

TEST(BoundsTest, IciRingBytesAboveTheBoundAreRefused) {
  auto store = std::make_shared<HashStore>(2000ms);
  tpu_ici::FabricOptions options;
  options.ring_bytes = std::size_t{1} << 40;  // a power of two, but past the header's u32
  try {
    tpu_ici::IciTransport t(store, 0, tpu_ici::Torus({1}, {false}, 1e9, 1e-6), options);
    ADD_FAILURE() << "a ring of 2^40 bytes was taken";
  } catch (const InvalidArgument& e) {
    expect_names(e.what(), {"ring_bytes", "1099511627776", "1073741824"});
  }
}

TEST(BoundsTest, IciLinkNumbersFromTheEnvironmentAreFiniteAndBounded) {
  for (const auto& [name, value] :
       std::vector<std::pair<const char*, const char*>>{{"C10D_ICI_LINK_GBPS", "inf"},
                                                        {"C10D_ICI_LINK_GBPS", "1e300"},
                                                        {"C10D_ICI_LINK_GBPS", "45GB"},
                                                        {"C10D_ICI_HOP_LATENCY_US", "nan"},
                                                        {"C10D_ICI_HOP_LATENCY_US", "-1"}}) {
    SCOPED_TRACE(std::string(name) + "=" + value);
    ScopedEnv env(name, value);
    try {
      make_process_group_ici(std::make_shared<HashStore>(2000ms), 0, 1, {});
      ADD_FAILURE() << "taken";
    } catch (const InvalidArgument& e) {
      expect_names(e.what(), {std::string(name) + "=" + value, "1000000"});
    }
  }
}

TEST(BoundsTest, TimeoutsFromTheEnvironmentAndTheOptionsAreBounded) {
  for (const char* value : {"9223372036854775807", "2147483648", "0", "-5", "30s"}) {
    SCOPED_TRACE(value);
    ScopedEnv env("C10D_TIMEOUT_MS", value);
    InitOptions options;
    options.init_method = "file:///nonexistent/never/opened";
    options.rank = 0;
    options.world_size = 1;
    try {
      init_process_group(options);
      ADD_FAILURE() << "taken";
    } catch (const InvalidArgument& e) {
      expect_names(e.what(), {std::string("C10D_TIMEOUT_MS=") + value, "2147483647"});
    }
  }
  InitOptions options;
  options.init_method = "file:///nonexistent/never/opened";
  options.rank = 0;
  options.world_size = 1;
  options.timeout = Milliseconds::max();
  try {
    init_process_group(options);
    ADD_FAILURE() << "taken";
  } catch (const InvalidArgument& e) {
    expect_names(e.what(), {std::to_string(Milliseconds::max().count()), "2147483647"});
  }
  ProcessGroupTCPOptions tcp;
  tcp.timeout = Milliseconds(std::int64_t{1} << 40);
  try {
    make_process_group_tcp(std::make_shared<HashStore>(2000ms), 0, 1, tcp);
    ADD_FAILURE() << "taken";
  } catch (const InvalidArgument& e) {
    expect_names(e.what(), {"1099511627776", "2147483647"});
  }
}

// A one-rank TCP group in a child with `name`=`value`: it must fail naming both and the bound.
void expect_child_refuses(const char* name, const char* value, const std::string& bound) {
  SCOPED_TRACE(std::string(name) + "=" + value);
  test::TempDir dir;
  test::ChildProcess child({(test::build_dir() / "tests" / "pg_fault_child").string(), "sum", "1"},
                           {{name, value},
                            {"C10D_INIT_METHOD", "file://" + (dir.path() / "store").string()},
                            {"RANK", "0"},
                            {"WORLD_SIZE", "1"},
                            {"C10D_BACKEND", "tcp"}},
                           dir.path(), "child");
  const auto exit = child.wait(test::Clock::now() + 30s);
  EXPECT_TRUE(exit.exited && exit.code == 1) << child.describe();
  expect_names(child.out(), {std::string(name) + "=" + value, bound});
}

TEST(BoundsTest, ProcessWideSettingsAreParsedStrictlyAndBounded) {
  expect_child_refuses("C10D_SPIN_US", "-1", "1000000");
  expect_child_refuses("C10D_SPIN_US", "9223372036854775807", "1000000");
  expect_child_refuses("LOCAL_WORLD_SIZE", "4x", "1048576");
  expect_child_refuses("LOCAL_WORLD_SIZE", "0", "1048576");
  expect_child_refuses("C10D_SHM", "maybe", "boolean");
}

}  // namespace
}  // namespace c10d::inline v1
