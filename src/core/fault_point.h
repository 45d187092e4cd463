// Test-only fault injection: a named step of a set-up where a test may make this process die or
// stop, to check what a process killed at that very point leaves behind (tests/fault).
//
//   C10D_TEST_FAULT_AT=<step>        SIGKILL this process when it reaches <step>
//   C10D_TEST_FAULT_AT=<step>:stop   SIGSTOP it there (the test looks, then kills it)
//   C10D_TEST_FAULT_AT=<step>:fail   fault_point returns true: the step fails as it would for a
//                                    reason the test cannot arrange (shm:cma_probe)
//
// Steps are "<component>:<point>", e.g. "shm:after_create" (shm_setup.cc and
// fabric_setup.cc list theirs). Unset, a fault point costs one load of a cached flag.
#pragma once

#include <string_view>

namespace c10d::inline v1::core {

// True only when the step is to fail (":fail"); false otherwise, if it returns.
bool fault_point(std::string_view step);

}  // namespace c10d::inline v1::core
