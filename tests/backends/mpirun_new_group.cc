// mpirun_new_group BACKEND: under `mpirun -np N` (N >= 3), new_group meets among its members
// only. The last rank is not a member of the subgroup of the others: its new_group must return
// (null) at once, while the members have not even called theirs yet (they wait 1.5 s first), and
// it calls nothing else; the members then make their subgroup and all_reduce over it. BACKEND is
// "mpi" (MPI_COMM_WORLD; MPI_Comm_create_group, collective over the members alone) or "tcp"
// (env://, rank 0 hosting the store). Prints "OK rank R" and exits 0, or prints what differed and
// exits 1.
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <exception>
#include <string>
#include <thread>
#include <vector>

#include "c10d/c10d.h"
#include "mpirun_program.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using c10d::testing::check;

int run(const std::string& backend) {
  c10d::InitOptions options;
  options.backend = backend;
  options.init_method = "env://";
  options.timeout = 60s;
  auto pg = c10d::init_process_group(options);
  const int rank = pg->rank();
  const int n = pg->size();
  bool ok = check(n >= 3, fmt::format("a world of {} ranks; run it on 3 or more", n));
  std::vector<int> members;
  for (int r = 0; r + 1 < n; ++r) members.push_back(r);
  if (rank == n - 1) {
    const auto start = Clock::now();
    auto sub = pg->new_group(members);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
    ok &= check(sub == nullptr, "the non-member got a subgroup");
    ok &= check(ms < 500, fmt::format("the non-member's new_group took {} ms: it waited for the "
                                      "members",
                                      ms));
  } else {
    std::this_thread::sleep_for(1500ms);
    auto sub = pg->new_group(members);
    ok &= check(sub != nullptr && sub->rank() == rank && sub->size() == n - 1,
                "a member's subgroup is not the members'");
    if (sub) {
      auto t = c10d::Tensor::from_vector(std::vector<float>{1.0f + rank}, c10d::DType::kFloat32);
      sub->all_reduce({t})->wait(60s);
      const float want = static_cast<float>((n - 1) * n / 2);
      ok &=
          check(t.data<float>()[0] == want,
                fmt::format("the subgroup's all_reduce gave {}, not {}", t.data<float>()[0], want));
    }
  }
  if (ok) fmt::print("OK rank {}\n", rank);
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: mpirun_new_group mpi|tcp\n");
    return 2;
  }
  return c10d::testing::run_program([&] { return run(argv[1]); });
}
