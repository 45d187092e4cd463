// What the test programs run under mpirun share: a check that prints what differed, and a main
// that turns an exception into "FAIL <what>" and exit status 1.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <string>

namespace c10d::inline v1::testing {

// Prints "FAIL <what>" unless `ok`; returns `ok`.
inline bool check(bool ok, const std::string& what) {
  if (!ok) fmt::print(stderr, "FAIL {}\n", what);
  return ok;
}

// run()'s status, or 1 after printing "FAIL <what>" when it throws.
template <typename Run>
int run_program(Run run) {
  try {
    return run();
  } catch (const std::exception& e) {
    fmt::print(stderr, "FAIL {}\n", e.what());
    return 1;
  }
}

}  // namespace c10d::inline v1::testing
