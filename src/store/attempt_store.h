// The store generation of a job that c10drun restarts (--max-restarts): the launcher's store
// outlives each attempt, so attempt k > 0 reads and writes its keys under "c10d/attempt/<k>/"
// and never sees what an earlier attempt left behind (a rank's address, a barrier's count, a
// failure record). Attempt 0 uses the keys as they are, so a job that is never restarted
// looks the same in the store as one started without restarts.
//
// The attempt comes from C10D_RESTART_COUNT, which c10drun sets for its processes (0 on the
// first run). rendezvous() wraps every store it opens this way; the launcher, which reads the
// ranks' keys from outside (their stall records), names them with attempt_key().
//
// Errors: InvalidArgument for a C10D_RESTART_COUNT that is not a whole number in
// [0, kMaxAttempt]. Plain functions; thread-safe as far as the environment is not changed.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "c10d/store.h"

namespace c10d::inline v1::store {

inline constexpr int kMaxAttempt = 1'000'000;

// C10D_RESTART_COUNT, or 0 when it is unset or empty.
int restart_count_from_env();

// "c10d/attempt/<k>": the PrefixStore prefix of attempt k (> 0).
std::string attempt_prefix(int attempt);

// The name in the shared store of `key` as attempt `attempt` writes it.
std::string attempt_key(int attempt, std::string_view key);

// `base` itself for attempt 0, else a PrefixStore of attempt_prefix(attempt) over it.
std::shared_ptr<Store> store_for_attempt(std::shared_ptr<Store> base, int attempt);

}  // namespace c10d::inline v1::store
