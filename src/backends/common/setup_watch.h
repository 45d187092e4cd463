// SetupWatch: how the ranks of a group being set up learn that one of them failed, instead of
// each waiting out its set-up timeout (30 minutes by default) for a store key or a connection
// that the failed rank will never provide, and then blaming the missing key.
//
// A rank that fails its set-up records why in the store (fail()); every wait of the set-up (for
// keys through wait()/get(), and the transports' socket waits through check()) looks at that
// record at least every kPollInterval and throws a NetworkError naming the failed rank and its
// reason. Keys, under "<group>/setup/":
//   attempt/<rank>   how many set-ups of a group of this name the rank has begun on this store
//                    (store.add, the first thing a set-up does): the ranks of one set-up share
//                    the number N
//   failure/<N>      "<rank>\n<reason>": the first rank of set-up N to fail (compare_set: the
//                    first writer wins)
// Nothing is cleared: set-up N+1 reads failure/<N+1>, so a failure left by an earlier group of
// the same name never fails a new one, and a fast failure is never erased by a slow rank 0.
// The numbers agree as long as every rank began every earlier set-up of that name on that store
// (a fresh store per job, as c10drun and env:// with rank 0 hosting give, always does); a rank
// that skipped one puts its numbers apart, and the ranks then see each other's failures only as
// timeouts, as before.
//
// A NetworkError or TimeoutError met during set-up may be the echo of another rank's failure
// (its connections closed as it failed): fail() then waits up to kEchoWait for that rank's
// record and reports it, rather than blaming the connection.
//
// Writes are best effort and bounded: a store that does not answer a short probe is not asked.
// Thread-safe: a set-up uses it from one thread, and a transport that connects on first use
// keeps looking at it from its connector threads (tcp_connect.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <span>
#include <string>

#include "c10d/store.h"

namespace c10d::inline v1::backends {

class SetupWatch {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::milliseconds kPollInterval{200};
  static constexpr std::chrono::milliseconds kEchoWait{1000};

  // Begins this rank's set-up of `group`: takes its attempt number from the store.
  SetupWatch(std::shared_ptr<Store> store, std::string group, int rank);

  // Throws NetworkError naming the rank that failed this set-up and why, once one has recorded a
  // failure. Asks the store at most once per kPollInterval; cheap to call in a loop.
  void check();
  // store.wait(keys) up to `deadline`, in slices of kPollInterval with check() between; the
  // store's TimeoutError at the deadline.
  void wait(std::span<const std::string> keys, Clock::time_point deadline);
  // wait() for `key`, then its value.
  Bytes get(const std::string& key, Clock::time_point deadline);

  // This rank's set-up failed with `error`: records it for the other ranks (unless it is another
  // rank's failure that check() reported) and throws, either `error` or, when it was the echo of
  // another rank's failure, that failure. Later calls rethrow what the first one threw.
  [[noreturn]] void fail(std::exception_ptr error);

  const std::string& group() const { return group_; }
  int rank() const { return rank_; }
  std::int64_t attempt() const { return attempt_; }

 private:
  // The failure another rank recorded for this set-up, as the error to throw; null when none.
  std::exception_ptr recorded();
  bool store_answers();

  std::shared_ptr<Store> store_;
  std::string group_;
  int rank_;
  std::string attempt_key_;
  std::int64_t attempt_ = 0;
  std::string failure_key_;
  std::mutex mu_;  // guards the three below; held across the store's calls, which it serializes
  Clock::time_point next_check_{};
  std::exception_ptr thrown_;  // what fail() threw, or what check() found
  bool store_gone_ = false;
};

}  // namespace c10d::inline v1::backends
