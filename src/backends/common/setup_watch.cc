#include "backends/common/setup_watch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <limits>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1::backends {
namespace {

// How long the store gets to answer a probe before a failing rank stops asking it (the store's
// own calls retry a server that is gone for the store's whole timeout).
constexpr std::chrono::milliseconds kProbeTimeout{500};
// The most of another rank's recorded reason that goes into this rank's error.
constexpr std::size_t kMaxReasonBytes = 4096;

using core::what_of;

bool may_be_echo(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const NetworkError&) {
    return true;
  } catch (const TimeoutError&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

SetupWatch::SetupWatch(std::shared_ptr<Store> store, std::string group, int rank)
    : store_(std::move(store)), group_(std::move(group)), rank_(rank) {
  C10D_CHECK(store_ != nullptr, "rank {}: the set-up of group '{}' needs a store", rank_, group_);
  attempt_key_ = fmt::format("{}/setup/attempt/{}", group_, rank_);
  attempt_ = store_->add(attempt_key_, 1);
  failure_key_ = fmt::format("{}/setup/failure/{}", group_, attempt_);
}

std::exception_ptr SetupWatch::recorded() {
  const std::string key = failure_key_;
  if (!store_->check(std::span<const std::string>(&key, 1))) return nullptr;
  const Bytes v = store_->get(failure_key_);
  const std::string_view text(reinterpret_cast<const char*>(v.data()), v.size());
  // "<rank>\n<reason>" (fail()); anyone who can write the store can write it, and it ends up
  // in every rank's error: the rank parsed strictly, the reason bounded and printable.
  const auto nl = text.find('\n');
  const auto who = core::parse_int(text.substr(0, nl), 0, std::numeric_limits<int>::max());
  const std::string why = nl == std::string_view::npos
                              ? std::string("(no reason)")
                              : core::printable(text.substr(nl + 1), kMaxReasonBytes);
  if (nl == std::string_view::npos || !who.value) {
    return C10D_ERROR(NetworkError,
                      "rank {}: the set-up of group '{}' failed: the store's record of it ('{}') "
                      "names no rank: {}",
                      rank_, group_, failure_key_, why);
  }
  return C10D_ERROR(NetworkError, "rank {}: the set-up of group '{}' failed on rank {}: {}", rank_,
                    group_, *who.value, why);
}

void SetupWatch::check() {
  std::lock_guard lock(mu_);
  if (thrown_) std::rethrow_exception(thrown_);
  const auto now = Clock::now();
  if (now < next_check_) return;
  next_check_ = now + kPollInterval;
  if (auto e = recorded()) {
    thrown_ = e;
    std::rethrow_exception(e);
  }
}

void SetupWatch::wait(std::span<const std::string> keys, Clock::time_point deadline) {
  const auto start = Clock::now();
  for (;;) {
    check();
    const auto now = Clock::now();
    if (now >= deadline) {
      C10D_THROW(TimeoutError,
                 "rank {}: the set-up of group '{}' timed out after {} ms waiting for the keys "
                 "[{}] (a rank that never came, or that failed without a word)",
                 rank_, group_,
                 std::chrono::duration_cast<std::chrono::milliseconds>(now - start).count(),
                 fmt::join(keys, ", "));
    }
    const auto slice = std::clamp(std::chrono::ceil<std::chrono::milliseconds>(deadline - now),
                                  std::chrono::milliseconds(1), kPollInterval);
    try {
      store_->wait(keys, slice);
      return;
    } catch (const TimeoutError&) {
      std::lock_guard lock(mu_);
      next_check_ = {};  // a slice went by: look at once
    }
  }
}

Bytes SetupWatch::get(const std::string& key, Clock::time_point deadline) {
  wait(std::span<const std::string>(&key, 1), deadline);
  return store_->get(key);
}

bool SetupWatch::store_answers() {
  if (store_gone_) return false;
  try {
    store_->wait(std::span<const std::string>(&attempt_key_, 1), kProbeTimeout);
    return true;
  } catch (const std::exception& e) {
    C10D_LOG_DEBUG("rank {}: the store does not answer: {}", rank_, e.what());
    store_gone_ = true;
    return false;
  }
}

void SetupWatch::fail(std::exception_ptr error) {
  std::lock_guard lock(mu_);
  if (thrown_) std::rethrow_exception(thrown_);  // another rank's failure, or reported already
  thrown_ = error;
  if (store_answers()) {
    try {
      // Only an error that may be another rank's echo gives way to that rank's record; this
      // rank's own (a bad setting, say) is what it reports, whoever recorded first.
      const bool echo = may_be_echo(error);
      std::exception_ptr theirs = echo ? recorded() : nullptr;
      // A peer that failed first closes its connections before it records why.
      const auto until = Clock::now() + kEchoWait;
      while (!theirs && echo && Clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
        theirs = recorded();
      }
      if (theirs) {
        thrown_ = theirs;
      } else {
        const std::string value = fmt::format("{}\n{}", rank_, what_of(error));
        store_->compare_set(failure_key_, {},
                            std::span<const std::uint8_t>(
                                reinterpret_cast<const std::uint8_t*>(value.data()), value.size()));
      }
    } catch (const std::exception& e) {
      C10D_LOG_WARN("rank {}: could not record its set-up failure in the store: {}", rank_,
                    e.what());
    }
  }
  std::rethrow_exception(thrown_);
}

}  // namespace c10d::inline v1::backends
