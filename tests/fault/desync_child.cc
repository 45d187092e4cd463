// desync_child: one rank of the desync tests (desync_test.cc), started by c10drun or by the test
// itself. Joins the group with c10d::init_process_group() and runs five matching all_reduces of
// COUNT floats (each checked), then a sixth op that rank 2 gets wrong:
//
//   call COUNT   rank 2 calls broadcast (root 0) of COUNT floats while the others all_reduce
//                COUNT floats.
//   size COUNT   rank 2 all_reduces COUNT / 2 floats while the others all_reduce COUNT.
//   root COUNT   rank 2 calls broadcast of COUNT floats with itself as the root (so it only
//                sends) while the others all_reduce COUNT floats.
//   rootof COUNT every rank broadcasts COUNT floats, rank 2 from root 1, the others from root 0.
//
// A rank whose sixth op fails prints "DESYNC <ms> <message>" (ms since it was issued) and exits
// 3, as does one whose fifth op fails with the group (a rank that finished it went on to the sixth
// and aborted the group, while this rank still waited for the fifth's last bytes); one whose sixth
// op returns prints "SUCCEEDED" and exits 0 (what must never happen); anything else prints
// "UNEXPECTED ..." and exits 1. Ops time out after C10D_TIMEOUT_MS, else 60 s, so a failure found
// by a timeout shows in the ms. SIGTERM is ignored: c10drun sends it to the other ranks once one
// fails, and the test wants every rank's own outcome (the launcher's SIGKILL after its grace period
// still ends a rank that hangs).
#include <fmt/format.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "c10d/c10d.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

c10d::Tensor filled(std::int64_t count, float value) {
  return c10d::Tensor::from_vector(std::vector<float>(static_cast<std::size_t>(count), value),
                                   c10d::DType::kFloat32);
}

// Waits for `work`, issued at `issued`: true when it succeeded; else prints DESYNC.
bool waited(c10d::Work& work, Clock::time_point issued) {
  try {
    work.wait(120s);
    return true;
  } catch (const c10d::Error& e) {
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - issued).count();
    fmt::print("DESYNC {} {}\n", ms, e.what());
    std::fflush(stdout);
    return false;
  }
}

int run(const std::string& scenario, std::int64_t count) {
  std::signal(SIGTERM, SIG_IGN);
  c10d::InitOptions options;
  if (std::getenv("C10D_TIMEOUT_MS") == nullptr) options.timeout = 60s;
  auto pg = c10d::init_process_group(options);
  const int rank = pg->rank();
  for (int i = 0; i < 5; ++i) {
    auto t = filled(count, 1.0f);
    const auto issued = Clock::now();
    auto work = pg->all_reduce({t});
    if (!waited(*work, issued)) {
      if (i < 4) {  // only the last matching op may meet the sixth's failure
        fmt::print("UNEXPECTED: all_reduce #{} failed\n", i);
        return 1;
      }
      return 3;
    }
    if (t.data<float>()[count - 1] != static_cast<float>(pg->size())) {
      fmt::print("UNEXPECTED: all_reduce #{} gave {}\n", i, t.data<float>()[count - 1]);
      return 1;
    }
  }
  const auto issued = Clock::now();
  std::shared_ptr<c10d::Work> work;
  if (scenario == "rootof") {
    c10d::BroadcastOptions from;
    from.root = rank == 2 ? 1 : 0;
    work = pg->broadcast({filled(count, 1.0f)}, from);
  } else if (rank != 2) {
    work = pg->all_reduce({filled(count, 1.0f)});
  } else if (scenario == "call" || scenario == "root") {
    c10d::BroadcastOptions from;
    from.root = scenario == "root" ? 2 : 0;
    work = pg->broadcast({filled(count, 1.0f)}, from);
  } else {
    work = pg->all_reduce({filled(count / 2, 1.0f)});
  }
  if (!waited(*work, issued)) return 3;
  fmt::print("SUCCEEDED\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  if (argc != 3 ||
      (scenario != "call" && scenario != "size" && scenario != "root" && scenario != "rootof")) {
    std::fprintf(stderr, "usage: desync_child call|size|root|rootof COUNT\n");
    return 2;
  }
  try {
    return run(scenario, std::atoll(argv[2]));
  } catch (const std::exception& e) {
    fmt::print("UNEXPECTED: {}\n", e.what());
    return 1;
  }
}
