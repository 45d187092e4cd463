// c10d-icisim --validate: the closed forms of docs/ici.md against the timing-only simulator, as the
// markdown table of docs/ici.md (tests/ici/validation_test.cc asserts the same cases within 3%).
#pragma once

namespace c10d::inline v1::tpu_ici {

// Prints the table on stdout; returns 0 when every case is within 3%, else 1.
int print_validation_table();

}  // namespace c10d::inline v1::tpu_ici
