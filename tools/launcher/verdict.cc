#include "launcher/verdict.h"

#include <fmt/format.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "c10d/errors.h"
#include "trace/trace_analysis.h"

namespace c10d::inline v1::launcher {
namespace {

// A file's modification time is stamped from the kernel's coarse clock (ticks of 1-4 ms): a dump
// written just after the request may look this much older.
constexpr auto kClockSlack = std::chrono::milliseconds(20);

}  // namespace

std::string dump_path(const std::string& dir, int rank) {
  return (std::filesystem::path(dir) / fmt::format("c10d_trace_rank_{}.json", rank)).string();
}

bool catches_signal(pid_t pid, int signal) {
  std::ifstream status(fmt::format("/proc/{}/status", pid));
  for (std::string line; std::getline(status, line);) {
    constexpr std::string_view kCaught = "SigCgt:";
    if (line.rfind(kCaught, 0) != 0) continue;
    try {
      const unsigned long long mask = std::stoull(line.substr(kCaught.size()), nullptr, 16);
      return ((mask >> (signal - 1)) & 1) != 0;
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

TraceVerdict::TraceVerdict(std::string dir, const std::vector<int>& ranks) : dir_(std::move(dir)) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
  if (ec) throw Error(fmt::format("cannot make the trace directory {}: {}", dir_, ec.message()));
  for (int rank : ranks) std::filesystem::remove(dump_path(dir_, rank), ec);
}

void TraceVerdict::request(const std::vector<ProcessView>& processes) {
  requested_ = std::chrono::system_clock::now();
  deadline_ = Clock::now() + kDumpWait;
  for (const ProcessView& p : processes) {
    if (!p.running) continue;
    if (p.state == 'T' || p.state == 't') {
      not_asked_[p.rank] = "it was stopped (state T), so it could not dump";
    } else if (!catches_signal(p.pid, SIGUSR1)) {
      // Its recorder is off (C10D_TRACE_BUFFER=0), it made no group yet, or it handles SIGUSR1
      // itself: the signal would kill it or mean something else.
      not_asked_[p.rank] = "it does not dump on request (no flight recorder SIGUSR1 handler)";
    } else if (::kill(p.pid, SIGUSR1) == 0) {
      asked_.push_back(p.rank);
    }
  }
}

bool TraceVerdict::dumped_since_request(int rank) const {
  struct stat st {};
  if (::stat(dump_path(dir_, rank).c_str(), &st) != 0) return false;
  const auto written = std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
  return written + kClockSlack >= requested_;
}

bool TraceVerdict::ready(const std::vector<ProcessView>& processes) const {
  for (const ProcessView& p : processes) {
    const bool asked = std::find(asked_.begin(), asked_.end(), p.rank) != asked_.end();
    if (asked && p.running && !dumped_since_request(p.rank)) return false;
  }
  return true;
}

std::vector<std::string> TraceVerdict::lines(const std::map<int, std::string>& ended) const {
  std::map<int, std::string> why = not_asked_;
  for (int rank : asked_) {
    why[rank] = fmt::format("it did not dump within {} s of being asked", kDumpWait.count());
  }
  for (const auto& [rank, how] : ended) why[rank] = how;  // how it ended says more
  try {
    return tools::analyze(tools::read_dumps(dir_), why).lines;
  } catch (const std::exception& e) {
    return {fmt::format("cannot analyze the dumps in {}: {}", dir_, e.what())};
  }
}

}  // namespace c10d::inline v1::launcher
