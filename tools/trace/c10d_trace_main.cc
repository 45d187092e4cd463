// c10d-trace: reads the flight recorder's dumps (docs/tracing.md).
//
//   c10d-trace analyze DIR   merges the dumps of every rank in DIR (C10D_TRACE_DIR) and prints a
//                            verdict: exit 0 when every rank completed every collective of its
//                            dump, 1 when it found a problem (printed), 2 on bad usage or a file
//                            that is not a dump.
//   c10d-trace timeline DIR -o FILE
//                            writes the dumps as a Chrome/Perfetto trace (trace_timeline.h): a
//                            track per rank, a span per op; FILE "-" is stdout. Exit 0, or 2 on
//                            bad usage, a file that is not a dump, or FILE not written.
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <fstream>
#include <string>
#include <string_view>

#include "trace/trace_analysis.h"
#include "trace/trace_timeline.h"

namespace {

constexpr std::string_view kUsage =
    "usage: c10d-trace analyze DIR\n"
    "       c10d-trace timeline DIR -o FILE\n";

int analyze(const std::string& dir) {
  const auto verdict = c10d::tools::analyze(c10d::tools::read_dumps(dir));
  for (const auto& line : verdict.lines) fmt::print("{}\n", line);
  return verdict.problem ? 1 : 0;
}

int timeline(const std::string& dir, const std::string& out) {
  const std::string text = c10d::tools::timeline_json(c10d::tools::read_dumps(dir));
  if (out == "-") {
    fmt::print("{}", text);
    return 0;
  }
  std::ofstream file(out, std::ios::binary | std::ios::trunc);
  file << text;
  file.close();
  if (!file.good()) {
    fmt::print(stderr, "c10d-trace: cannot write {}\n", out);
    return 2;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string_view command = argc > 1 ? argv[1] : "";
  const bool is_analyze = command == "analyze" && argc == 3;
  const bool is_timeline = command == "timeline" && argc == 5 && std::string_view(argv[3]) == "-o";
  if (!is_analyze && !is_timeline) {
    fmt::print(stderr, "{}", kUsage);
    return 2;
  }
  try {
    return is_analyze ? analyze(argv[2]) : timeline(argv[2], argv[4]);
  } catch (const std::exception& e) {
    fmt::print(stderr, "c10d-trace: {}\n", e.what());
    return 2;
  }
}
