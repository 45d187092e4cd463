// c10d-trace: reads the flight recorder's dumps (docs/tracing.md).
//
//   c10d-trace analyze DIR   merges the dumps of every rank in DIR (C10D_TRACE_DIR) and prints a
//                            verdict: exit 0 when every rank completed every collective of its
//                            dump, 1 when it found a problem (printed), 2 on bad usage or a file
//                            that is not a dump.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <string_view>

#include "trace/trace_analysis.h"

int main(int argc, char** argv) {
  if (argc != 3 || std::string_view(argv[1]) != "analyze") {
    std::fprintf(stderr, "usage: c10d-trace analyze DIR\n");
    return 2;
  }
  try {
    const auto verdict = c10d::tools::analyze(c10d::tools::read_dumps(argv[2]));
    for (const auto& line : verdict.lines) fmt::print("{}\n", line);
    return verdict.problem ? 1 : 0;
  } catch (const std::exception& e) {
    fmt::print(stderr, "c10d-trace: {}\n", e.what());
    return 2;
  }
}
