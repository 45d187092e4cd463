#include "core/fault_point.h"

#include <signal.h>

#include <cstdlib>
#include <string>

namespace c10d::inline v1::core {

bool fault_point(std::string_view step) {
  static const std::string wanted = [] {
    const char* v = std::getenv("C10D_TEST_FAULT_AT");
    return v == nullptr ? std::string() : std::string(v);
  }();
  if (wanted.empty() || !std::string_view(wanted).starts_with(step)) return false;
  const std::string_view rest = std::string_view(wanted).substr(step.size());
  if (rest.empty()) {
    ::raise(SIGKILL);
  } else if (rest == ":stop") {
    ::raise(SIGSTOP);
  }
  return rest == ":fail";
}

}  // namespace c10d::inline v1::core
