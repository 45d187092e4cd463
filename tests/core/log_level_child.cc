// Reads the log level as every c10d process does, once, at its first log line, then logs one
// warning and one info line; exits 0 when the level it went on with is warn. Run by
// tests/core/logging_test.cc with C10D_LOG_LEVEL set.
#include "core/logging.h"

int main() {
  C10D_LOG_WARN("a warning");
  C10D_LOG_INFO("an info line");
  return c10d::core::log_level() == c10d::core::LogLevel::kWarn ? 0 : 1;
}
