// The ProcessGroup conformance suite (tests/conformance) on the ICI backend, every chip a thread
// of this process: a 1-D ring, a 2-D torus with and without wraparound and a 3-D torus, so the
// torus algorithms (bidirectional and folded rings, multi-axis all_reduce, routed all_to_all,
// axis-by-axis broadcast) and the forwarding of far messages all meet every case.
#include <gtest/gtest.h>

#include <latch>
#include <thread>

#include "c10d/init.h"
#include "conformance.h"
#include "ici_threads.h"

namespace c10d::inline v1::tpu_ici {
namespace {

using namespace std::chrono_literals;

struct Slice {
  const char* topology;
  const char* wrap;
  int world;
};

class IciConformanceTest : public ::testing::TestWithParam<Slice> {};

TEST_P(IciConformanceTest, EveryCasePasses) {
  const Slice slice = GetParam();
  ProcessGroupICIOptions options;
  options.topology = slice.topology;
  options.wrap = slice.wrap;
  options.timeout = 30s;
  std::vector<std::vector<std::string>> failures(static_cast<std::size_t>(slice.world));
  conformance::Config config;
  config.large_count = 1 << 18;
  const auto errors = testing::run_ranks(slice.world, options, [&](int rank, ProcessGroup& pg) {
    failures[static_cast<std::size_t>(rank)] = conformance::run_conformance(pg, config).failures;
  });
  std::vector<std::string> all = errors;
  for (const auto& f : failures) all.insert(all.end(), f.begin(), f.end());
  EXPECT_TRUE(all.empty()) << all.size() << " failures:" << testing::joined(all);
}

INSTANTIATE_TEST_SUITE_P(Slices, IciConformanceTest,
                         ::testing::Values(Slice{"1", "", 1}, Slice{"3", "", 3},
                                           Slice{"2x3", "none", 6}, Slice{"4x2", "", 8},
                                           Slice{"2x2x2", "", 8}),
                         [](const auto& p) {
                           std::string name = std::string(p.param.topology) + "_" +
                                              (*p.param.wrap ? p.param.wrap : "preset");
                           for (auto& c : name) {
                             if (c == ',') c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace c10d::inline v1::tpu_ici
