// The conformance suite (conformance.h) with every rank a thread over the in-process transport:
// the TransportProcessGroup (the TCP and ICI backends' group) for world sizes 1 to 8, one group
// per world size running every case; then again with the algorithms forced the other way, so
// the small counts also run the ring all-reduce and the chain broadcast.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <latch>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/common/transport_process_group.h"
#include "conformance.h"
#include "transport/inproc_transport.h"

namespace c10d::inline v1::conformance {
namespace {

using namespace std::chrono_literals;

// A group with three planted bugs, to show the suite catches them: all_reduce computes MAX as
// SUM, all_gather_into_tensor swaps the first and last elements of its output, and recv
// matches tags 1 and 2 the wrong way round.
class BrokenGroup final : public ProcessGroup {
 public:
  explicit BrokenGroup(std::shared_ptr<ProcessGroup> pg)
      : ProcessGroup(pg->rank(), pg->size()), pg_(std::move(pg)) {}
  std::string backend_name() const override { return "broken"; }
  std::shared_ptr<Work> all_reduce(std::vector<Tensor> t, const AllreduceOptions& o) override {
    AllreduceOptions bent = o;
    if (bent.reduce.op == ReduceOp::kMax) bent.reduce.op = ReduceOp::kSum;
    return pg_->all_reduce(std::move(t), bent);
  }
  std::shared_ptr<Work> broadcast(std::vector<Tensor> t, const BroadcastOptions& o) override {
    return pg_->broadcast(std::move(t), o);
  }
  std::shared_ptr<Work> reduce(Tensor t, const ReduceOptions& o) override {
    return pg_->reduce(std::move(t), o);
  }
  std::shared_ptr<Work> all_gather(std::vector<Tensor> out, Tensor in,
                                   const AllgatherOptions& o) override {
    return pg_->all_gather(std::move(out), std::move(in), o);
  }
  std::shared_ptr<Work> all_gather_into_tensor(Tensor out, Tensor in,
                                               const AllgatherOptions& o) override {
    auto work = pg_->all_gather_into_tensor(out, std::move(in), o);
    work->wait(30s);
    if (out.numel() >= 2) {
      const std::size_t size = element_size(out.dtype());
      auto bytes = out.bytes();
      std::swap_ranges(bytes.begin(), bytes.begin() + size, bytes.end() - size);
    }
    return work;
  }
  std::shared_ptr<Work> reduce_scatter(Tensor out, std::vector<Tensor> in,
                                       const ReduceScatterOptions& o) override {
    return pg_->reduce_scatter(std::move(out), std::move(in), o);
  }
  std::shared_ptr<Work> reduce_scatter_tensor(Tensor out, Tensor in,
                                              const ReduceScatterOptions& o) override {
    return pg_->reduce_scatter_tensor(std::move(out), std::move(in), o);
  }
  std::shared_ptr<Work> all_to_all(Tensor out, Tensor in, const AllToAllOptions& o) override {
    return pg_->all_to_all(std::move(out), std::move(in), o);
  }
  std::shared_ptr<Work> gather(std::vector<Tensor> out, Tensor in,
                               const GatherOptions& o) override {
    return pg_->gather(std::move(out), std::move(in), o);
  }
  std::shared_ptr<Work> scatter(Tensor out, std::vector<Tensor> in,
                                const ScatterOptions& o) override {
    return pg_->scatter(std::move(out), std::move(in), o);
  }
  std::shared_ptr<Work> barrier(const BarrierOptions& o) override { return pg_->barrier(o); }
  std::shared_ptr<Work> send(std::vector<Tensor> t, int dst, const SendRecvOptions& o) override {
    return pg_->send(std::move(t), dst, o);
  }
  std::shared_ptr<Work> recv(std::vector<Tensor> t, int src, const SendRecvOptions& o) override {
    SendRecvOptions bent = o;
    if (o.tag == 1 || o.tag == 2) bent.tag = 3 - o.tag;
    return pg_->recv(std::move(t), src, bent);
  }
  std::shared_ptr<Work> recv_any_source(std::vector<Tensor> t, const SendRecvOptions& o) override {
    return pg_->recv_any_source(std::move(t), o);
  }
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    return pg_->new_group(ranks);
  }
  void abort() override { pg_->abort(); }

 private:
  std::shared_ptr<ProcessGroup> pg_;
};

// Runs the suite on `n` threads, one group each, the ranks on the pretend hosts of `hosts` (empty:
// one host); answers every rank's failures.
std::vector<std::string> run_threads(int n, const Config& config, const std::string& algo = "",
                                     bool broken = false, const std::vector<int>& hosts = {}) {
  auto world = hosts.empty() ? std::make_shared<transport::InProcWorld>(n)
                             : std::make_shared<transport::InProcWorld>(n, hosts);
  std::vector<std::vector<std::string>> failures(static_cast<std::size_t>(n));
  // Every group stays alive until every rank is done: a rank that finished first must not
  // tear down while its peers still run their last op.
  std::latch done(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      auto& mine = failures[static_cast<std::size_t>(r)];
      std::shared_ptr<ProcessGroup> pg;
      try {
        pg = backends::make_transport_process_group(
            std::make_shared<transport::InProcTransport>(world, r),
            {.backend_name = "inproc", .timeout = 30s, .algo = algo});
        if (broken) pg = std::make_shared<BrokenGroup>(pg);
        const Summary summary = run_conformance(*pg, config);
        mine = summary.failures;
        if (r == 0 && std::getenv("C10D_CONFORMANCE_TIMES") != nullptr) {
          for (const auto& t : summary.times) {
            std::printf("world %d %-24s %7.3f s\n", n, t.name.c_str(), t.seconds);
          }
        }
      } catch (const std::exception& e) {
        mine.push_back("world " + std::to_string(n) + " rank " + std::to_string(r) + ": threw " +
                       e.what());
      }
      done.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
  std::vector<std::string> all;
  for (auto& f : failures) all.insert(all.end(), f.begin(), f.end());
  return all;
}

std::string join(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n  " + l;
  return s;
}

class ThreadsConformanceTest : public ::testing::TestWithParam<int> {};

TEST_P(ThreadsConformanceTest, EveryCasePasses) {
  const auto failures = run_threads(GetParam(), Config{});
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures:" << join(failures);
}

// Halving-doubling and the binomial tree are what the small counts take by default, the ring and
// the chain what the large ones take; forcing the others covers both at every count.
TEST_P(ThreadsConformanceTest, EveryCasePassesWithTheOtherAlgorithms) {
  Config config;
  config.only = {"all_reduce", "broadcast", "nan", "subgroups", "large_counts"};
  config.large_count = 1 << 18;  // halving-doubling on 1 MiB is enough to make the point
  const auto failures = run_threads(GetParam(), config, "all_reduce=ring,broadcast=chain");
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures:" << join(failures);
  const auto hd = run_threads(GetParam(), config, "all_reduce=hd,broadcast=tree");
  EXPECT_TRUE(hd.empty()) << hd.size() << " failures:" << join(hd);
}

// Ranks on pretend hosts (InProcWorld's host map): 2 hosts of 2, 3 of 2, 2 of 3, and 2 of 2 whose
// ranks interleave; every case with the hierarchical algorithms forced at every count, then
// chosen automatically (all_gather and reduce_scatter hierarchical, all_reduce and broadcast
// from their thresholds; the subgroups case sees subgroups of its own layout).
TEST(ThreadsConformanceHostsTest, EveryCasePassesHierarchicalOnPretendHosts) {
  for (const std::vector<int>& hosts :
       {std::vector<int>{0, 0, 1, 1}, std::vector<int>{0, 0, 1, 1, 2, 2},
        std::vector<int>{0, 0, 0, 1, 1, 1}, std::vector<int>{0, 1, 0, 1}}) {
    const int n = static_cast<int>(hosts.size());
    for (const char* algo : {"hier", ""}) {
      Config config;
      config.large_count = 1 << 18;
      const auto failures = run_threads(n, config, algo, false, hosts);
      EXPECT_TRUE(failures.empty()) << "world " << n << " algo '" << algo
                                    << "': " << failures.size() << " failures:" << join(failures);
    }
  }
  // The flat ring over hosts whose ranks interleave visits them host by host: 0, 2, 1, 3.
  Config flat;
  flat.only = {"all_reduce", "all_gather_into_tensor", "reduce_scatter_tensor", "large_counts"};
  flat.large_count = 1 << 18;
  const auto failures = run_threads(4, flat, "flat,all_reduce=ring", false, {0, 1, 0, 1});
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures:" << join(failures);
}

TEST(ThreadsConformanceSelfTest, TheSuiteCatchesPlantedBugs) {
  Config config;
  config.only = {"all_reduce", "all_gather_into_tensor", "send_recv"};
  config.counts = {7};
  config.max_failures = 1000;
  const auto failures = run_threads(3, config, "", /*broken=*/true);
  const auto mentions = [&](const std::string& what) {
    return std::any_of(failures.begin(), failures.end(),
                       [&](const std::string& f) { return f.find(what) != std::string::npos; });
  };
  EXPECT_TRUE(
      mentions("all_reduce(float32, max, count 7, plain) world 3 rank 0: the tensor: "
               "element 0: expected"))
      << join(failures);
  EXPECT_FALSE(mentions("all_reduce(float32, sum"));
  EXPECT_TRUE(
      mentions("all_gather_into_tensor(bfloat16, count 7, in-place) world 3 rank 2: the "
               "output: element 0: expected"))
      << join(failures);
  EXPECT_TRUE(
      mentions("recv(int8, count 7, root 2, tag 2, posted before tag 1) world 3 rank 0: "
               "the received tensor"))
      << join(failures);
}

// Without C10D_DEBUG: two ranks that call different collectives under one sequence number (or
// one with another size) both fail, each naming its own call and the other rank's (transport.h:
// Calls), whether its send met the other's receive or its receive the other's send.
TEST(ThreadsDesyncTest, RanksThatCallDifferentCollectivesFailNamingBothCalls) {
  struct Desync {
    int count1;         // rank 1's all_reduce count; 0: rank 1 calls all_to_all
    std::string mine0;  // rank 0's call as the errors name it
    std::string mine1;
  };
  for (const Desync& d :
       {Desync{0, "all_reduce(float32, count 4096, sum) #1", "all_to_all(float32, count 4096) #1"},
        Desync{2048, "all_reduce(float32, count 4096, sum) #1",
               "all_reduce(float32, count 2048, sum) #1"}}) {
    auto world = std::make_shared<transport::InProcWorld>(2);
    std::vector<std::string> errors(2);
    std::vector<std::thread> threads;
    for (int r = 0; r < 2; ++r) {
      threads.emplace_back([&, r] {
        auto pg = backends::make_transport_process_group(
            std::make_shared<transport::InProcTransport>(world, r),
            {.backend_name = "inproc", .timeout = 20s});
        auto t = Tensor::from_vector(std::vector<float>(4096, 1.0f), DType::kFloat32);
        pg->all_reduce({t})->wait(20s);  // #0 agrees
        std::shared_ptr<Work> work;
        if (r == 0) {
          work = pg->all_reduce({t});
        } else if (d.count1 == 0) {
          // Both ranks send and receive under the op's tag, so in-process each pair of send
          // and receive meets and fails on both sides. (Not a rooted op: in-process a failure
          // reaches no other rank, and whether its entry check's messages or its data meet
          // rank 0's first is a race. desync_test covers rooted ops across processes.)
          Tensor out = Tensor::from_vector(std::vector<float>(4096, 0.0f), DType::kFloat32);
          work = pg->all_to_all(out, t);
        } else {
          work = pg->all_reduce(
              {Tensor::from_vector(std::vector<float>(d.count1, 1.0f), DType::kFloat32)});
        }
        try {
          work->wait(20s);
          errors[static_cast<std::size_t>(r)] = "succeeded";
        } catch (const InvalidArgument& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = std::string("wrong error: ") + e.what();
        }
      });
    }
    for (auto& t : threads) t.join();
    EXPECT_NE(errors[0].find("rank 0: its " + d.mine0), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("rank 1's " + d.mine1), std::string::npos) << errors[0];
    EXPECT_NE(errors[1].find("rank 1: its " + d.mine1), std::string::npos) << errors[1];
    EXPECT_NE(errors[1].find("rank 0's " + d.mine0), std::string::npos) << errors[1];
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ThreadsConformanceTest, ::testing::Range(1, 9),
                         [](const ::testing::TestParamInfo<int>& p) {
                           return "world" + std::to_string(p.param);
                         });

}  // namespace
}  // namespace c10d::inline v1::conformance
