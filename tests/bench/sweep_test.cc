// The nccl-tests sweep that c10d-bench and c10d-mpi-reference share (bench/nccl_sweep.h), run
// on a one-rank backend whose all_reduce can be told to get a value wrong: the table's columns
// and footer, the JSON rows, and the exit status that scripts rely on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "cli_args.h"
#include "nccl_sweep.h"

namespace c10d::inline v1::bench {
namespace {

// A world of one rank. all_reduce over one rank returns the rank's input; with `corrupt`, one
// element of every result is off by one.
class OneRank final : public SweepBackend {
 public:
  explicit OneRank(bool corrupt) : corrupt_(corrupt) {}
  std::string name() const override { return "one"; }
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string unsupported(Collective, bool) const override { return ""; }
  const void* prepare(const OpCall& call) override {
    call_ = call;
    return call.recv;
  }
  void start() override {
    const std::size_t bytes = static_cast<std::size_t>(call_.count) * sizeof(float);
    if (!call_.in_place && bytes > 0) std::memcpy(call_.recv, call_.send, bytes);
    if (corrupt_ && call_.count > 0) static_cast<float*>(call_.recv)[call_.count - 1] += 1;
  }
  void complete() override {}
  void barrier() override {}
  double max_over_ranks(double value) override { return value; }
  std::int64_t sum_over_ranks(std::int64_t value) override { return value; }
  void all_gather_bytes(std::span<const char> mine, std::span<char> all) override {
    std::memcpy(all.data(), mine.data(), mine.size());
  }

 private:
  bool corrupt_;
  OpCall call_;
};

struct SweepRun {
  int status;
  std::string out;
};

SweepRun sweep(bool corrupt, std::vector<std::string> words) {
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  const ParsedArgs parsed = parse_sweep_args("sweep_test", argv, false);
  EXPECT_EQ(parsed.error, "");
  OneRank backend(corrupt);
  testing::internal::CaptureStdout();
  const int status = run_sweep(parsed.args, backend);
  return {status, testing::internal::GetCapturedStdout()};
}

std::vector<std::string> columns(const std::string& row) {
  std::istringstream in(row);
  std::vector<std::string> cols;
  for (std::string c; in >> c;) cols.push_back(c);
  return cols;
}

std::vector<std::string> rows_of(const std::string& out) {
  std::vector<std::string> rows;
  std::istringstream in(out);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '#') rows.push_back(line);
  }
  return rows;
}

TEST(SweepTest, PrintsARowPerSizeWithBothFormsAndTheFooter) {
  const SweepRun r =
      sweep(false, {"all_reduce", "-b", "8", "-e", "64", "-f", "2", "-n", "2", "-w", "1"});
  EXPECT_EQ(r.status, 0) << r.out;
  const auto rows = rows_of(r.out);
  ASSERT_EQ(rows.size(), 4u) << r.out;  // 8, 16, 32, 64 bytes
  // size count type redop root, then out-of-place and in-place time algbw busbw #wrong.
  const auto cols = columns(rows[0]);
  ASSERT_EQ(cols.size(), 13u) << rows[0];
  EXPECT_EQ(cols[0], "8");
  EXPECT_EQ(cols[1], "2");
  EXPECT_EQ(cols[2], "float");
  EXPECT_EQ(cols[3], "sum");
  EXPECT_EQ(cols[4], "-1");
  EXPECT_EQ(cols[8], "0");   // out of place: no wrong value
  EXPECT_EQ(cols[12], "0");  // in place
  EXPECT_NE(r.out.find("# Out of bounds values : 0 OK"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("# Avg bus bandwidth    : "), std::string::npos) << r.out;
}

TEST(SweepTest, AWrongValueIsCountedAndTheExitStatusIsOne) {
  const SweepRun r = sweep(true, {"all_reduce", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0"});
  EXPECT_EQ(r.status, 1) << r.out;
  EXPECT_NE(r.out.find("# Out of bounds values : 2 FAILED"), std::string::npos) << r.out;
  const auto rows = rows_of(r.out);
  ASSERT_EQ(rows.size(), 1u) << r.out;
  const auto cols = columns(rows[0]);
  ASSERT_EQ(cols.size(), 13u) << rows[0];
  EXPECT_EQ(cols[8], "1");   // one wrong value out of place
  EXPECT_EQ(cols[12], "1");  // and in place
}

TEST(SweepTest, JsonHoldsEveryMeasuredCell) {
  const std::string path =
      testing::TempDir() + "/sweep_test_" + std::to_string(::getpid()) + ".json";
  const SweepRun r = sweep(false, {"all_reduce", "-b", "8", "-e", "16", "-f", "2", "-n", "1", "-w",
                                   "0", "--json", path});
  EXPECT_EQ(r.status, 0) << r.out;
  std::ifstream in(path);
  std::stringstream json;
  json << in.rdbuf();
  std::remove(path.c_str());
  const std::string text = json.str();
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.front(), '[');
  std::size_t objects = 0;
  for (std::size_t at = text.find('{'); at != std::string::npos; at = text.find('{', at + 1)) {
    ++objects;
  }
  EXPECT_EQ(objects, 4u) << text;  // 2 sizes x out of place and in place
  for (const char* key : {"\"size\"", "\"count\"", "\"time_us\"", "\"busbw\"", "\"wrong\"",
                          "\"in_place\"", "\"backend\""}) {
    EXPECT_NE(text.find(key), std::string::npos) << key << " missing from " << text;
  }
}

// The parser's verdict on `words` (argv without the program): the error, or "" when it parsed.
std::string parse_error(std::vector<std::string> words) {
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  return parse_sweep_args("sweep_test", argv, false).error;
}

// Each refused command line, and what its error must say: the flag as typed and the values it
// takes (or the size and the element it falls short of).
TEST(SweepArgsTest, BadValuesAreRefusedNamingTheFlagAndWhatItTakes) {
  const std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> cases = {
      {{"all_reduce", "-c", "7"}, {"'7' for -c", "0 or 1"}},
      {{"all_reduce", "-z", "5"}, {"'5' for -z", "0 or 1"}},
      {{"all_reduce", "--check=2"}, {"'2' for --check", "0 or 1"}},
      {{"all_reduce", "-b", "1Q"}, {"'1Q' for -b", "whole number of bytes"}},
      {{"all_reduce", "-b", "99999999999999999999"}, {"for -b"}},
      {{"all_reduce", "-e", "1.3"}, {"'1.3' for -e", "whole number of bytes"}},
      {{"all_reduce", "-n", "-1"}, {"'-1' for -n", "from 1"}},
      {{"all_reduce", "-n", "0"}, {"'0' for -n"}},
      {{"all_reduce", "-n", "5x"}, {"'5x' for -n"}},
      {{"all_reduce", "-n", "99999999999999999999"}, {"for -n"}},
      {{"all_reduce", "-w", "+3"}, {"'+3' for -w"}},
      {{"all_reduce", "-f", "0"}, {"'0' for -f", "from 1"}},
      {{"all_reduce", "-r", "-2"}, {"'-2' for -r"}},
      {{"all_reduce", "-d", "float8"}, {"'float8' for -d", "bfloat16"}},
      {{"all_reduce", "-o", "mean"}, {"'mean' for -o", "avg"}},
      {{"all_reduce", "--json="}, {"--json needs a value"}},
      {{"all_reduce", "-q", "1"}, {"unknown flag -q"}},
      {{"all_reduce", "--frobnicate", "1"}, {"unknown flag --frobnicate"}},
      {{"all_reduce", "-n"}, {"-n needs a value"}},
      {{"all_reduce", "--backend", "tcp"}, {"unknown flag --backend"}},
      // Sizes: under one element, begin above end, steps that cannot advance an element.
      {{"all_reduce", "-b", "3", "-e", "3"}, {"minbytes 3", "one float element (4 bytes)"}},
      {{"all_reduce", "-b", "4", "-e", "4", "-d", "double"},
       {"minbytes 4", "one double element (8 bytes)"}},
      {{"all_reduce", "-b", "0", "-e", "64"}, {"minbytes 0"}},
      {{"all_reduce", "-b", "64", "-e", "8"}, {"minbytes 64 (-b) is above maxbytes 8 (-e)"}},
      {{"all_reduce", "-b", "4", "-e", "64", "-i", "2"}, {"stepbytes 2", "one float element"}},
      {{"all_reduce", "-b", "4", "-e", "64", "-i", "0"}, {"stepbytes 0"}},
      {{"all_reduce", "-o", "avg", "-d", "int32"}, {"avg needs a floating-point datatype"}},
  };
  for (const auto& [words, wanted] : cases) {
    const std::string error = parse_error(words);
    std::string line;
    for (const auto& w : words) line += w + " ";
    EXPECT_FALSE(error.empty()) << line << "was accepted";
    for (const auto& part : wanted) EXPECT_NE(error.find(part), std::string::npos) << line << error;
  }
}

TEST(SweepArgsTest, GoodCommandLinesParse) {
  std::vector<std::string> words = {
      "reduce_scatter", "-b8", "--maxbytes=1M", "-f", "2", "-c", "0", "-z", "1", "-d", "double",
      "--iters",        "3"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  const ParsedArgs parsed = parse_sweep_args("sweep_test", argv, false);
  ASSERT_EQ(parsed.error, "");
  EXPECT_EQ(parsed.args.collective, Collective::kReduceScatter);
  EXPECT_EQ(parsed.args.min_bytes, 8u);
  EXPECT_EQ(parsed.args.max_bytes, std::size_t{1} << 20);
  EXPECT_EQ(parsed.args.step_factor, 2u);
  EXPECT_FALSE(parsed.args.check);
  EXPECT_TRUE(parsed.args.blocking);
  EXPECT_EQ(parsed.args.dtype, DType::kFloat64);
  EXPECT_EQ(parsed.args.iters, 3);
  // A size between elements rounds down (as nccl-tests): 6 bytes of float is one element.
  EXPECT_EQ(parse_error({"all_reduce", "-b", "6", "-e", "6"}), "");
}

TEST(SweepArgsTest, SizesParseStrictly) {
  EXPECT_EQ(parse_size("1.5M"), std::size_t{3} << 19);
  EXPECT_EQ(parse_size("64k"), 65536u);
  EXPECT_EQ(parse_size("0.5K"), 512u);
  for (const char* bad : {"", "1Q", "1.3", "0.1K", "-8", "+8", " 8", "8 ", "inf", "nan", "1e19",
                          "99999999999999999999", "0x10", "8KB"}) {
    EXPECT_FALSE(parse_size(bad).has_value()) << bad;
  }
  EXPECT_EQ(parse_integer("12", 1, 20), 12);
  EXPECT_FALSE(parse_integer("12x", 1, 20).has_value());
  EXPECT_FALSE(parse_integer("21", 1, 20).has_value());
  EXPECT_FALSE(parse_integer("99999999999999999999", 1, 20).has_value());
  EXPECT_FALSE(parse_real("1e400", 0, 1e300).has_value());
  EXPECT_FALSE(parse_real("nan", 0, 1).has_value());
}

// A split collective gives each rank size/n: sizes that leave a rank no element are skipped
// with a note, and a sweep with no size large enough is refused once the world is known.
TEST(SweepArgsTest, SplitCollectivesSkipSizesUnderAnElementPerRank) {
  std::vector<std::string> words = {"all_gather", "-b", "4", "-e", "64", "-f", "2"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  const ParsedArgs parsed = parse_sweep_args("sweep_test", argv, false);
  ASSERT_EQ(parsed.error, "");
  EXPECT_EQ(first_sweep_size(parsed.args, 1), 4u);
  EXPECT_EQ(skipped_sizes_note(parsed.args, 1), "");
  EXPECT_EQ(first_sweep_size(parsed.args, 3), 16u);  // 4 and 8 bytes are under 12
  EXPECT_EQ(skipped_sizes_note(parsed.args, 3),
            "sizes below 16 bytes skipped: under one float element per rank for all_gather over "
            "3 ranks (12 bytes)");
  EXPECT_EQ(size_error(parsed.args, 16), "");
  EXPECT_EQ(first_sweep_size(parsed.args, 17), std::nullopt);
  const std::string error = size_error(parsed.args, 17);
  EXPECT_NE(error.find("no size from minbytes 4 (-b) to maxbytes 64 (-e) gives every rank one "
                       "float element for all_gather over 17 ranks (68 bytes)"),
            std::string::npos)
      << error;
  // all_reduce is not split: every size the parser accepts has an element.
  words[0] = "all_reduce";
  argv[0] = words[0].data();
  EXPECT_EQ(first_sweep_size(parse_sweep_args("sweep_test", argv, false).args, 17), 4u);
}

// Buffers that cannot fit in this host's memory are refused before any is allocated, naming
// the size and the memory it needs; the exit status is 2 (a bad argument), not a bad_alloc.
TEST(SweepTest, BuffersBeyondTheHostsMemoryAreRefusedUpFront) {
  std::vector<std::string> words = {"all_reduce", "-b", "8", "-e", "999999G", "-n", "1"};
  std::vector<char*> argv;
  for (auto& w : words) argv.push_back(w.data());
  const ParsedArgs parsed = parse_sweep_args("sweep_test", argv, false);
  ASSERT_EQ(parsed.error, "");
  OneRank backend(false);
  testing::internal::CaptureStderr();
  testing::internal::CaptureStdout();
  const int status = run_sweep(parsed.args, backend);
  const std::string out = testing::internal::GetCapturedStdout();
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(status, 2) << out << err;
  EXPECT_NE(err.find("maxbytes 1073740750258176 (-e, 977 TiB) needs 1.91 PiB of buffers per "
                     "process"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("MemAvailable"), std::string::npos) << err;
  EXPECT_EQ(rows_of(out).size(), 0u) << out;
}

TEST(SweepTest, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduce, 8), 1.0);
}

}  // namespace
}  // namespace c10d::inline v1::bench
