// Test-only fault injection: a named step of a set-up where a test may make this process die or
// stop, to check what a process killed at that very point leaves behind (tests/fault).
//
//   C10D_TEST_FAULT_AT=<step>        SIGKILL this process when it reaches <step>
//   C10D_TEST_FAULT_AT=<step>:stop   SIGSTOP it there (the test looks, then kills it)
//
// Steps are "<component>:<point>", e.g. "shm:after_create" (shm_setup.cc and
// fabric_setup.cc list theirs). Unset, a fault point costs one load of a cached flag.
#pragma once

#include <string_view>

namespace c10d::inline v1::core {

void fault_point(std::string_view step);

}  // namespace c10d::inline v1::core
