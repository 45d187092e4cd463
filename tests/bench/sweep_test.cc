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
#include <vector>

#include "nccl_sweep.h"

namespace c10d::bench {
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

TEST(SweepTest, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllReduce, 4), 1.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllGather, 4), 0.75);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduceScatter, 8), 0.875);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kAllToAll, 2), 0.5);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kBroadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(Collective::kReduce, 8), 1.0);
}

}  // namespace
}  // namespace c10d::bench
