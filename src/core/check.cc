#include "core/check.h"

#include <cstring>

namespace c10d::inline v1::core {

std::string with_location(const char* file, int line, const std::string& message) {
  // Keep the path from "src/" on, so messages do not carry the build machine's layout.
  const char* shown = std::strstr(file, "src/");
  return fmt::format("{} [{}:{}]", message, shown ? shown : file, line);
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

}  // namespace c10d::inline v1::core
