// Logging on fmt to stderr. The level comes from C10D_LOG_LEVEL (trace, debug, info, warn,
// error, off; default warn), read once. A line carries the level, the time since start in
// seconds, the process id and the message. Thread-safe: one write(2) per line.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace c10d::inline v1::core {

enum class LogLevel { kTrace = 0, kDebug, kInfo, kWarn, kError, kOff };

LogLevel log_level();
void set_log_level(LogLevel level);               // overrides the environment (tests, tools)
LogLevel parse_log_level(std::string_view name);  // throws InvalidArgument
void log_line(LogLevel level, std::string_view message);

}  // namespace c10d::inline v1::core

#define C10D_LOG(level, ...)                                                             \
  do {                                                                                   \
    if (::c10d::core::LogLevel::level >= ::c10d::core::log_level())                      \
      ::c10d::core::log_line(::c10d::core::LogLevel::level, ::fmt::format(__VA_ARGS__)); \
  } while (0)
#define C10D_LOG_DEBUG(...) C10D_LOG(kDebug, __VA_ARGS__)
#define C10D_LOG_INFO(...) C10D_LOG(kInfo, __VA_ARGS__)
#define C10D_LOG_WARN(...) C10D_LOG(kWarn, __VA_ARGS__)
#define C10D_LOG_ERROR(...) C10D_LOG(kError, __VA_ARGS__)
