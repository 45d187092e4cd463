// verdict_child SCENARIO VICTIM: a rank of a job under c10drun --trace-dir that goes wrong at
// collective #3 of the world group, for c10drun_verdict_test. Every rank runs all_reduce #0..#2
// of 1024 float32; then rank VICTIM, where the others call all_reduce #3:
//   skip   skips it and goes on with other work (sleeps 30 s, then exits 0)
//   other  calls broadcast (root 0) instead
//   size   calls it with 512 elements
//   sleep  sleeps 30 s before calling it (past the others' timeout)
//   kill   kills itself with SIGKILL
// and every rank that gets through #3 calls all_reduce #4 and checks its sum. A rank whose op
// fails prints "FAILED <error>" and exits 3; a wrong sum prints "WRONG <value>" and exits 4; a
// rank that gets through prints "DONE" and exits 0. Every wait is bounded (the group's timeout,
// C10D_TIMEOUT_MS, else 30 s).
#include <fmt/format.h>
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "c10d/c10d.h"

namespace {

using namespace std::chrono_literals;

c10d::Tensor ones(std::int64_t n) {
  return c10d::Tensor::from_vector(std::vector<float>(static_cast<std::size_t>(n), 1.0f),
                                   c10d::DType::kFloat32);
}

int run(const std::string& scenario, int victim) {
  c10d::InitOptions options;
  if (std::getenv("C10D_TIMEOUT_MS") == nullptr) options.timeout = 30s;
  auto pg = c10d::init_process_group(options);
  const bool me = pg->rank() == victim;
  try {
    for (int i = 0; i < 3; ++i) pg->all_reduce({ones(1024)})->wait(60s);
    if (me && (scenario == "skip" || scenario == "sleep")) std::this_thread::sleep_for(30s);
    if (me && scenario == "skip") return 0;
    if (me && scenario == "kill") ::raise(SIGKILL);
    if (me && scenario == "other") {
      pg->broadcast({ones(1024)})->wait(60s);  // root 0
    } else {
      pg->all_reduce({ones(me && scenario == "size" ? 512 : 1024)})->wait(60s);
    }
    auto t = ones(1024);
    pg->all_reduce({t})->wait(60s);
    if (t.data<float>()[0] != static_cast<float>(pg->size())) {
      fmt::print("WRONG {}\n", t.data<float>()[0]);
      return 4;
    }
  } catch (const c10d::Error& e) {
    fmt::print("FAILED {}\n", e.what());
    std::fflush(stdout);
    return 3;
  }
  fmt::print("DONE\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: verdict_child skip|other|size|sleep|kill VICTIM\n");
    return 2;
  }
  try {
    return run(argv[1], std::atoi(argv[2]));
  } catch (const std::exception& e) {
    fmt::print("UNEXPECTED {}\n", e.what());
    return 1;
  }
}
