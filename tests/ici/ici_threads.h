// Test fixture verbs for the ICI backend: run one body per rank, each on its own thread, over a
// fabric of chips that meet through one HashStore.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <latch>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "c10d/init.h"
#include "c10d/store.h"

namespace c10d::inline v1::tpu_ici::testing {

// Runs body(rank, group) on `world` threads, each with its own ICI group of `options`; every
// group stays alive until every body returned. Answers the error messages of bodies that threw.
inline std::vector<std::string> run_ranks(int world, const ProcessGroupICIOptions& options,
                                          const std::function<void(int, ProcessGroup&)>& body) {
  auto store = std::make_shared<HashStore>(std::chrono::seconds(30));
  std::vector<std::string> errors;
  std::mutex mu;
  std::latch done(world);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      std::shared_ptr<ProcessGroup> pg;
      try {
        pg = make_process_group_ici(store, r, world, options);
        body(r, *pg);
      } catch (const std::exception& e) {
        std::lock_guard lock(mu);
        errors.push_back("rank " + std::to_string(r) + ": " + e.what());
      }
      done.arrive_and_wait();
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

inline std::string joined(const std::vector<std::string>& lines) {
  std::string s;
  for (const auto& l : lines) s += "\n  " + l;
  return s;
}

}  // namespace c10d::inline v1::tpu_ici::testing
