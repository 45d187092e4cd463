// c10d-conformance: the conformance suite (conformance.h) as a program, one rank per process.
//
//   c10drun --nproc-per-node 4 c10d-conformance
//   C10D_BACKEND=mpi mpirun -n 4 c10d-conformance
//   c10d-conformance [--only all_reduce,broadcast] [--counts 0,1,7,1000] [--large N]
//                    [--times 1]   (rank 0 prints each case's duration)
//
// The group comes from c10d::init_process_group() and the environment (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT, C10D_BACKEND, ...). Without C10D_TIMEOUT_MS the per-op timeout is
// 60 s rather than the library's 30 minutes, so a hung op ends the run. Every rank prints its
// failures on stderr ("rank R of N: FAIL ...") and a summary on stdout, and exits 0 when all
// its checks passed, 1 otherwise, 2 on bad usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/init.h"
#include "conformance.h"

namespace {

std::vector<std::string> split(std::string_view s) {
  std::vector<std::string> out;
  while (!s.empty()) {
    const auto comma = s.find(',');
    if (comma != 0) out.emplace_back(s.substr(0, comma));
    if (comma == std::string_view::npos) break;
    s.remove_prefix(comma + 1);
  }
  return out;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "c10d-conformance: %s\nusage: c10d-conformance [--only CASE,CASE...] "
               "[--counts N,N...] [--large N] [--times 0|1]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  namespace cf = c10d::conformance;
  cf::Config config;
  bool times = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (i + 1 >= argc) return usage("every flag takes a value");
    const std::string_view value = argv[++i];
    try {
      if (arg == "--only") {
        config.only = split(value);
      } else if (arg == "--counts") {
        config.counts.clear();
        for (const auto& c : split(value)) config.counts.push_back(std::stoll(c));
      } else if (arg == "--times") {
        times = value != "0";
      } else if (arg == "--large") {
        config.large_count = std::stoll(std::string(value));
      } else {
        return usage("unknown flag");
      }
    } catch (const std::exception&) {
      return usage("a count is not a number");
    }
  }

  const char* rank_env = std::getenv("RANK");
  std::string who = std::string("rank ") + (rank_env ? rank_env : "?");
  const auto start = std::chrono::steady_clock::now();
  std::shared_ptr<c10d::ProcessGroup> pg;
  try {
    c10d::InitOptions options;
    if (std::getenv("C10D_TIMEOUT_MS") == nullptr) options.timeout = std::chrono::seconds(60);
    pg = c10d::init_process_group(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: FAIL init_process_group: %s\n", who.c_str(), e.what());
    return 1;
  }
  who = "rank " + std::to_string(pg->rank()) + " of " + std::to_string(pg->size());

  const cf::Summary summary = cf::run_conformance(*pg, config);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (const auto& f : summary.failures)
    std::fprintf(stderr, "%s: FAIL %s\n", who.c_str(), f.c_str());
  std::printf("%s (%s): %s: %d cases, %lld ops, %lld checks, %zu failures, %.1f s\n", who.c_str(),
              pg->backend_name().c_str(), summary.failures.empty() ? "passed" : "FAILED",
              summary.cases, static_cast<long long>(summary.ops),
              static_cast<long long>(summary.checks), summary.failures.size(), seconds);
  if (times && pg->rank() == 0) {
    for (const auto& t : summary.times) std::printf("  %-24s %7.3f s\n", t.name.c_str(), t.seconds);
  }
  std::fflush(stdout);
  std::fflush(stderr);
  return summary.failures.empty() ? 0 : 1;
}
