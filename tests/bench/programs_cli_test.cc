// The programs people run (examples/, bench/, c10d-icisim) take every flag as hostile until
// checked: an unknown flag, a value with trailing garbage, out of range or overflowing, a size
// whose buffers cannot fit in memory, each ends the program at once with a non-zero status and
// a message naming the flag (or variable) and what it takes. None of these runs starts a
// process group: each must fail while parsing, in well under the deadline. A case whose flag
// would fork many processes if it were taken carries a later bad flag too, so a regression
// fails the test without forking them.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "../store/child_process.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::TempDir;

struct Case {
  std::vector<std::string> argv;  // argv[0] relative to the build directory
  int code;                       // the exit status expected
  std::vector<std::string> said;  // each must appear in stderr
  test::EnvChanges env = {};
};

void expect_refused(const Case& c) {
  TempDir dir;
  std::vector<std::string> argv = c.argv;
  argv[0] = (test::build_dir() / argv[0]).string();
  std::string line;
  for (const auto& a : c.argv) line += a + " ";
  ChildProcess p(argv, c.env, dir.path(), "program");
  const auto exit = p.wait(std::chrono::steady_clock::now() + 30s);
  ASSERT_FALSE(exit.timed_out) << line;
  EXPECT_TRUE(exit.exited) << line << "signal " << exit.signal << "\n" << p.err();
  EXPECT_EQ(exit.code, c.code) << line << "\n" << p.out() << p.err();
  for (const auto& part : c.said) {
    EXPECT_NE(p.err().find(part), std::string::npos) << line << "\nstderr: " << p.err();
  }
}

TEST(ProgramsCliTest, ExamplesRefuseFlagsTheyDoNotTake) {
  for (const Case& c : std::vector<Case>{
           {{"examples/collectives_demo", "--backend", "mpi"}, 2, {"unknown flag '--backend'"}},
           {{"examples/collectives_demo", "extra"}, 2, {"unknown argument 'extra'"}},
           {{"examples/rendezvous_demo", "--timeout", "5"}, 2, {"unknown flag '--timeout'"}},
           {{"examples/rendezvous_demo", "env://", "extra"}, 2, {"unexpected argument 'extra'"}},
           {{"examples/rendezvous_demo"},
            1,
            {"C10D_DEMO_TIMEOUT_MS '99999999999999999999'"},
            {{"C10D_DEMO_TIMEOUT_MS", "99999999999999999999"}}},
           {{"examples/rendezvous_demo"},
            1,
            {"C10D_DEMO_TIMEOUT_MS ' 5'"},
            {{"C10D_DEMO_TIMEOUT_MS", " 5"}}},
       }) {
    expect_refused(c);
  }
}

TEST(ProgramsCliTest, C10dBenchValidatesEveryFlag) {
  for (const Case& c : std::vector<Case>{
           {{"bench/c10d-bench", "all_reduce", "-c", "7"}, 2, {"'7' for -c", "0 or 1"}},
           {{"bench/c10d-bench", "all_reduce", "-z", "5"}, 2, {"'5' for -z", "0 or 1"}},
           {{"bench/c10d-bench", "all_reduce", "-b", "3", "-e", "3"},
            2,
            {"minbytes 3", "one float element (4 bytes)"}},
           {{"bench/c10d-bench", "all_reduce", "-b", "1Q"}, 2, {"'1Q' for -b"}},
           {{"bench/c10d-bench", "all_reduce", "-n", "-1"}, 2, {"'-1' for -n"}},
           {{"bench/c10d-bench", "all_reduce", "-b", "99999999999999999999"}, 2, {"for -b"}},
           {{"bench/c10d-bench", "all_reduce", "--backend", "nccl"}, 2, {"unknown backend 'nccl'"}},
       }) {
    expect_refused(c);
  }
}

TEST(ProgramsCliTest, IcisimValidatesItsOwnFlags) {
  const std::string sim = "tools/c10d-icisim";
  for (const Case& c : std::vector<Case>{
           {{sim, "--topology", "4x4", "--link-gbps", "5x"}, 2, {"--link-gbps", "'5x'"}},
           {{sim, "--topology", "4x4", "--hop-latency-us", "-1"}, 2, {"--hop-latency-us", "'-1'"}},
           {{sim, "--topology", "4x4", "--link-gbps", "0"}, 2, {"--link-gbps", "positive"}},
           {{sim, "--topology", "4x4", "--preset"}, 2, {"--preset needs a value"}},
           {{sim, "--topology", "129x129", "-b", "8", "-e", "8"}, 2, {"more than 16384 chips"}},
           {{sim, "--topology", "4x4", "--collective", "all_gather", "-b", "4", "-e", "32"},
            2,
            {"gives every rank one float element for all_gather over 16 ranks (64 bytes)"}},
           {{sim, "--topology", "4x4", "-c", "7"}, 2, {"'7' for -c"}},
           {{sim, "--validate", "--topology", "4x4"}, 2, {"--validate takes no other flags"}},
       }) {
    expect_refused(c);
  }
}

TEST(ProgramsCliTest, OtherBenchmarksValidateTheirFlags) {
  for (const Case& c : std::vector<Case>{
           {{"bench/c10d-loopback-bench", "--iters", "5x"}, 1, {"--iters", "'5x'"}},
           // (--iters 0 comes later: a build that took the --ranks would stop there, not fork.)
           {{"bench/c10d-loopback-bench", "--ranks", "100000", "--iters", "0"},
            1,
            {"--ranks", "from 2 to 64"}},
           {{"bench/c10d-loopback-bench", "--buffer", "3G"}, 1, {"--buffer 3221225472"}},
           {{"bench/c10d-loopback-bench", "--sizes", "999999G"},
            1,
            {"--sizes 1073740750258176 needs", "MemAvailable"}},
           {{"bench/c10d-store-bench", "throughput", "--clients", "1,100000", "--runs", "0"},
            2,
            {"--clients takes an integer from 1 to 512, not '100000'"}},
           {{"bench/c10d-store-bench", "throughput", "--ops", "5x"}, 2, {"--ops", "'5x'"}},
           {{"bench/c10d-store-bench", "scale", "--clients", "4"},
            2,
            {"unknown flag --clients for mode scale"}},
           {{"bench/c10d-store-bench", "sideways"}, 2, {"unknown mode 'sideways'"}},
           {{"bench/c10d-mlp-bench", "--hidden", "5x"}, 2, {"--hidden", "'5x'"}},
           {{"bench/c10d-mlp-bench", "--steps", "0"}, 2, {"--steps", "'0'"}},
           {{"bench/c10d-mlp-bench", "--hidden", "65536", "--batch", "1048576"},
            2,
            {"--batch 1048576 --hidden 65536 needs", "MemAvailable"}},
           {{"bench/c10d-lazy-bench", "--n"}, 2, {"--n needs a value"}},
           {{"bench/c10d-lazy-bench", "--n", "1e3"}, 2, {"--n", "'1e3'"}},
           {{"bench/c10d-lazy-bench", "--n", "1099511627776"},
            2,
            {"--n 1099511627776 needs", "MemAvailable"}},
           {{"bench/c10d-ddp-bench", "--steps"}, 2, {"--steps needs a value"}},
           {{"bench/c10d-ddp-bench", "--steps", "5x"}, 2, {"--steps", "'5x'"}},
           {{"bench/c10d-ddp-bench", "--mode", "fast"}, 2, {"--mode", "'fast'"}},
       }) {
    expect_refused(c);
  }
}

}  // namespace
}  // namespace c10d::inline v1
