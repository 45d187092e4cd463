// Pins the calling thread (and the threads it starts from then on) to the first CPU it may run
// on, for a test whose rank threads must take turns on one CPU; restores its affinity when
// destroyed.
#pragma once

#include <gtest/gtest.h>
#include <sched.h>

namespace c10d::inline v1::test {

class OnOneCpu {
 public:
  OnOneCpu() {
    EXPECT_EQ(sched_getaffinity(0, sizeof before_, &before_), 0);
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &before_)) {
        CPU_SET(c, &one);
        break;
      }
    }
    EXPECT_EQ(sched_setaffinity(0, sizeof one, &one), 0);
  }
  ~OnOneCpu() { sched_setaffinity(0, sizeof before_, &before_); }
  OnOneCpu(const OnOneCpu&) = delete;
  OnOneCpu& operator=(const OnOneCpu&) = delete;

 private:
  cpu_set_t before_{};
};

}  // namespace c10d::inline v1::test
