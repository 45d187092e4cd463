// Threads as ranks, for the tests that run every rank of a group in one process.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <thread>
#include <vector>

namespace c10d::inline v1::test {

// Runs fn(rank) for every rank of `n`, each on its own thread, and once all have ended rethrows
// the error of the lowest rank that failed (an assertion on the test's thread then sees it).
inline void run_rank_threads(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r);
      } catch (...) {
        errors[static_cast<std::size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

}  // namespace c10d::inline v1::test
