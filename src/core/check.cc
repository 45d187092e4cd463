#include "core/check.h"

#include <cstring>

namespace c10d::inline v1::core {

std::string with_location(const char* file, int line, const std::string& message) {
  // Keep the path from "src/" on, so messages do not carry the build machine's layout.
  const char* shown = std::strstr(file, "src/");
  return fmt::format("{} [{}:{}]", message, shown ? shown : file, line);
}

}  // namespace c10d::inline v1::core
