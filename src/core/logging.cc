#include "core/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>

#include "core/check.h"

namespace c10d::inline v1::core {
namespace {

const auto kStart = std::chrono::steady_clock::now();

LogLevel level_from_env() {
  const char* env = std::getenv("C10D_LOG_LEVEL");
  if (env == nullptr || *env == '\0') return LogLevel::kWarn;
  try {
    return parse_log_level(env);
  } catch (const Error& e) {
    // The logger cannot throw where it is first used (any thread, any call): say so once, as a
    // warning line of its own (log_line, which reads no level), and keep the default.
    log_line(LogLevel::kWarn,
             fmt::format("C10D_LOG_LEVEL ignored, warn used instead: {}", e.what()));
    return LogLevel::kWarn;
  }
}

std::atomic<int>& level_slot() {
  static std::atomic<int> level{static_cast<int>(level_from_env())};
  return level;
}

}  // namespace

LogLevel log_level() { return static_cast<LogLevel>(level_slot().load(std::memory_order_relaxed)); }

void set_log_level(LogLevel level) { level_slot().store(static_cast<int>(level)); }

LogLevel parse_log_level(std::string_view name) {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "trace") return LogLevel::kTrace;
  if (lower == "debug") return LogLevel::kDebug;
  if (lower == "info") return LogLevel::kInfo;
  if (lower == "warn" || lower == "warning") return LogLevel::kWarn;
  if (lower == "error") return LogLevel::kError;
  if (lower == "off" || lower == "none") return LogLevel::kOff;
  C10D_THROW(InvalidArgument, "unknown log level '{}' (trace, debug, info, warn, error, off)",
             name);
}

void log_line(LogLevel level, std::string_view message) {
  static constexpr const char* kNames[] = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "OFF"};
  const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - kStart).count();
  std::string line = fmt::format("[c10d {} {:.3f} pid {}] {}\n", kNames[static_cast<int>(level)], t,
                                 ::getpid(), message);
  // One write per line keeps lines from different threads whole.
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace c10d::inline v1::core
