// collectives_demo: what a process group does, on N processes started by c10drun.
//
//   build/tools/c10drun --nproc-per-node 4 build/examples/collectives_demo
//
// Each rank joins the group with init_process_group() (everything from the launcher's
// environment), then runs a few collectives and checks every answer against its closed form:
// all_reduce (sum and average), broadcast from the last rank, all_gather of the ranks, a
// subgroup of the even ranks, and 50 all_reduces of 1 MiB to show a bandwidth. Rank 0 prints
// what it saw; any wrong value exits 1 with a message naming it. It takes no flags (exit 2
// naming the one given).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "c10d/c10d.h"

namespace {

using namespace std::chrono_literals;

constexpr const char* kUsage =
    "usage: c10drun --nproc-per-node N collectives_demo\n"
    "  takes no flags or arguments: rank, world size, rendezvous and backend come from the\n"
    "  environment the launcher sets (C10D_BACKEND picks the backend, tcp by default)\n";

void expect(bool ok, const std::string& what) {
  if (!ok) throw c10d::Error("wrong answer: " + what);
}

int run() {
  auto pg = c10d::init_process_group({.timeout = 60s});
  const int rank = pg->rank();
  const int n = pg->size();

  auto x = c10d::Tensor::from_vector(std::vector<float>(4, static_cast<float>(rank + 1)),
                                     c10d::DType::kFloat32);
  pg->all_reduce({x})->wait(60s);
  const float sum = static_cast<float>(n * (n + 1) / 2);
  expect(x.data<float>()[3] == sum,
         fmt::format("all_reduce sum {} != {}", x.data<float>()[3], sum));

  auto avg = c10d::Tensor::from_vector(std::vector<float>(4, static_cast<float>(rank)),
                                       c10d::DType::kFloat32);
  pg->all_reduce({avg}, {.reduce = {c10d::ReduceOp::kAvg}})->wait(60s);
  expect(avg.data<float>()[0] == static_cast<float>(n - 1) / 2, "all_reduce avg");

  auto b = c10d::Tensor::from_vector(std::vector<std::int64_t>{rank * 100}, c10d::DType::kInt64);
  pg->broadcast({b}, {.root = n - 1})->wait(60s);
  expect(b.data<std::int64_t>()[0] == (n - 1) * 100, "broadcast");

  auto mine = c10d::Tensor::from_vector(std::vector<std::int32_t>{rank}, c10d::DType::kInt32);
  auto all = c10d::Tensor::empty({n}, c10d::DType::kInt32);
  pg->all_gather_into_tensor(all, mine)->wait(60s);
  std::vector<int> ranks(all.data<std::int32_t>(), all.data<std::int32_t>() + n);
  for (int r = 0; r < n; ++r) expect(ranks[r] == r, "all_gather");

  std::vector<int> evens;
  for (int r = 0; r < n; r += 2) evens.push_back(r);
  auto even_group = pg->new_group(evens);
  if (even_group) {
    auto e = c10d::Tensor::from_vector(std::vector<float>{1.0f}, c10d::DType::kFloat32);
    even_group->all_reduce({e})->wait(60s);
    expect(e.data<float>()[0] == static_cast<float>(evens.size()), "subgroup all_reduce");
  }

  auto big = c10d::Tensor::empty({1 << 18}, c10d::DType::kFloat32);  // 1 MiB
  pg->barrier()->wait(60s);
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<c10d::Work> last;
  for (int i = 0; i < 50; ++i) last = pg->all_reduce({big});
  last->wait(60s);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double busbw = 50.0 * big.nbytes() / s / 1e9 * 2.0 * (n - 1) / n;

  if (rank == 0) {
    fmt::print("collectives_demo: {} ranks over {}\n", n, pg->backend_name());
    fmt::print("  all_reduce sum of rank+1: {}   average of rank: {}\n", x.data<float>()[0],
               avg.data<float>()[0]);
    fmt::print("  broadcast from rank {}: {}   all_gather of ranks: {}\n", n - 1,
               b.data<std::int64_t>()[0], ranks);
    fmt::print("  subgroup of even ranks {}: all_reduce of ones = {}\n", evens, evens.size());
    fmt::print("  50 x all_reduce of 1 MiB: {:.1f} ms, bus bandwidth {:.2f} GB/s\n", s * 1e3,
               busbw);
    std::fflush(stdout);
  }
  pg->barrier()->wait(60s);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // Everything comes from the launcher's environment; a flag here is a mistake to say out loud
  // (a user who types --backend mpi must not get a TCP run that looks like what they asked for).
  if (argc > 1) {
    const std::string arg = argv[1];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      return 0;
    }
    std::fprintf(stderr, "collectives_demo: unknown %s '%s' (it takes none)\n%s",
                 arg.rfind('-', 0) == 0 ? "flag" : "argument", arg.c_str(), kUsage);
    return 2;
  }
  try {
    return run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "collectives_demo: %s\n", e.what());
    return 1;
  }
}
