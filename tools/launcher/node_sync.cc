#include "launcher/node_sync.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>
#include <string_view>
#include <utility>

#include "c10d/errors.h"
#include "core/check.h"
#include "core/logging.h"

namespace c10d::inline v1::launcher {
namespace {

using Clock = std::chrono::steady_clock;

// How long the watch gives one connection attempt: short, so end() is not held up for long by
// a store that does not answer (node 0 not up yet, or gone).
constexpr Milliseconds kWatchConnectTimeout{2000};
// Every call of finish() and leave(), the connection included.
constexpr Milliseconds kCallTimeout{30'000};

std::string_view outcome_text(NodeOutcome outcome) {
  switch (outcome) {
    case NodeOutcome::kSucceeded:
      return "ok";
    case NodeOutcome::kFailed:
      return "failed";
    case NodeOutcome::kStopped:
      return "stopped";
  }
  return "failed";
}

NodeOutcome outcome_of(const Bytes& value) {
  const std::string_view text(reinterpret_cast<const char*>(value.data()), value.size());
  if (text == "ok") return NodeOutcome::kSucceeded;
  if (text == "stopped") return NodeOutcome::kStopped;
  return NodeOutcome::kFailed;
}

std::span<const std::uint8_t> bytes_of(std::string_view text) {
  return {reinterpret_cast<const std::uint8_t*>(text.data()), text.size()};
}

// Reads what the signalfd holds; the number of the first stop signal (not SIGCHLD), or 0.
int read_stop_signal(int signal_fd) {
  int stop = 0;
  signalfd_siginfo info{};
  while (::read(signal_fd, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int signal = static_cast<int>(info.ssi_signo);
    if (signal != SIGCHLD && stop == 0) stop = signal;
  }
  return stop;
}

}  // namespace

NodeSync::NodeSync(int node_rank, int nnodes, StoreFactory connect)
    : node_rank_(node_rank),
      nnodes_(nnodes),
      connect_(std::move(connect)),
      stop_fd_(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
  if (!stop_fd_.valid()) throw Error(fmt::format("eventfd failed: {}", std::strerror(errno)));
}

NodeSync::~NodeSync() { end(); }

std::string NodeSync::key(int attempt, const std::string& what) const {
  return fmt::format("c10drun/attempt/{}/{}", attempt, what);
}

JobHooks NodeSync::begin(int attempt) {
  end();
  std::uint64_t count = 0;  // a stop of the last attempt not read yet: not this one's
  const ssize_t ignored = ::read(stop_fd_.get(), &count, sizeof(count));
  (void)ignored;
  {
    std::lock_guard lock(mu_);
    done_ = false;
    announce_.clear();
    reason_.clear();
  }
  watcher_ = std::thread([this, attempt] { watch(attempt); });
  JobHooks hooks;
  hooks.stop_fd = stop_fd_.get();
  hooks.stop_reason = [this] {
    std::lock_guard lock(mu_);
    return reason_;
  };
  hooks.on_stop = [this](const std::string& what) {
    std::lock_guard lock(mu_);
    if (announce_.empty()) announce_ = fmt::format("node {}: {}", node_rank_, what);
    wake_.notify_all();
  };
  return hooks;
}

void NodeSync::end() {
  {
    std::lock_guard lock(mu_);
    done_ = true;
    wake_.notify_all();
  }
  if (watcher_.joinable()) watcher_.join();
}

void NodeSync::watch(int attempt) {
  const std::string stop_key = key(attempt, "stop");
  std::unique_ptr<Store> store;
  bool seen = false;
  bool announced = false;
  std::unique_lock lock(mu_);
  while (!done_) {
    const std::string announce = announced ? std::string() : announce_;
    lock.unlock();
    try {
      if (!store) store = connect_(kWatchConnectTimeout);
      if (!announce.empty()) {
        store->compare_set(stop_key, {}, bytes_of(announce));
        announced = true;
      }
      if (!seen && store->check(std::span<const std::string>(&stop_key, 1))) {
        const std::string reason = store->get_string(stop_key);
        seen = true;
        {
          std::lock_guard guard(mu_);
          reason_ = reason;
        }
        const std::uint64_t one = 1;
        const ssize_t ignored = ::write(stop_fd_.get(), &one, sizeof(one));
        (void)ignored;
      }
    } catch (const std::exception& e) {
      // Node 0's store may not be up yet, or may be gone: the ranks find out for themselves.
      C10D_LOG_INFO("c10drun: node {} cannot watch attempt {} in the store: {}", node_rank_,
                    attempt, e.what());
      store.reset();
    }
    lock.lock();
    wake_.wait_for(lock, kWatchInterval,
                   [&] { return done_ || (!announced && !announce_.empty()); });
  }
}

NodeSync::Ended NodeSync::finish(int attempt, NodeOutcome local, const std::string& failure,
                                 int signal_fd, int& stop_signal) {
  std::unique_ptr<Store> store = connect_(kCallTimeout);
  const std::string mine = key(attempt, fmt::format("node/{}", node_rank_));
  if (local != NodeOutcome::kSucceeded) {
    // Before the outcome, so that a node that reads a failure finds its reason too.
    const std::string why = fmt::format("node {}: {}", node_rank_, failure);
    store->compare_set(key(attempt, "stop"), {}, bytes_of(why));
  }
  store->set(mine, outcome_text(local));

  std::vector<std::string> keys;
  for (int node = 0; node < nnodes_; ++node)
    keys.push_back(key(attempt, fmt::format("node/{}", node)));
  const auto deadline = Clock::now() + kFinishTimeout;
  while (!store->check(keys)) {
    pollfd signals{signal_fd, POLLIN, 0};
    ::poll(&signals, 1, static_cast<int>(kWatchInterval.count()));
    if (const int signal = read_stop_signal(signal_fd); signal != 0) {
      // The others may have read this node's outcome already, or not yet: stopped for this
      // attempt and the next, every node ends either way instead of waiting for this one.
      stop_signal = signal;
      const std::string why = fmt::format("node {}: the launcher received {}", node_rank_,
                                          ::sigabbrev_np(signal) ? ::sigabbrev_np(signal) : "?");
      store->set(mine, outcome_text(NodeOutcome::kStopped));
      store->compare_set(key(attempt + 1, "stop"), {}, bytes_of(why));
      store->set(key(attempt + 1, fmt::format("node/{}", node_rank_)),
                 outcome_text(NodeOutcome::kStopped));
      store->check(std::span<const std::string>(&mine, 1));  // landed before the launcher exits
      Ended ended;
      ended.outcomes.assign(static_cast<std::size_t>(nnodes_), NodeOutcome::kFailed);
      ended.outcomes[static_cast<std::size_t>(node_rank_)] = NodeOutcome::kStopped;
      ended.reason = why;
      return ended;
    }
    if (Clock::now() >= deadline) {
      std::string missing;
      for (int node = 0; node < nnodes_; ++node) {
        const std::string& k = keys[static_cast<std::size_t>(node)];
        if (store->check(std::span<const std::string>(&k, 1))) continue;
        missing += fmt::format("{}{}", missing.empty() ? "" : ", ", node);
      }
      C10D_THROW(TimeoutError,
                 "node {}: nodes {} did not report the end of attempt {} within {} s (is their "
                 "launcher gone?)",
                 node_rank_, missing, attempt, kFinishTimeout.count() / 1000);
    }
  }
  Ended ended;
  for (const Bytes& value : store->multi_get(keys)) ended.outcomes.push_back(outcome_of(value));
  const std::string stop_key = key(attempt, "stop");
  if (store->check(std::span<const std::string>(&stop_key, 1))) {
    ended.reason = store->get_string(stop_key);
  }
  return ended;
}

void NodeSync::leave(int attempt) {
  try {
    std::unique_ptr<Store> store = connect_(kCallTimeout);
    if (node_rank_ != 0) {
      const std::string mine = key(attempt, fmt::format("left/{}", node_rank_));
      store->set(mine, std::string_view("1"));
      store->check(std::span<const std::string>(&mine, 1));  // landed before this one exits
      return;
    }
    std::vector<std::string> keys;
    for (int node = 1; node < nnodes_; ++node) {
      keys.push_back(key(attempt, fmt::format("left/{}", node)));
    }
    store->wait(keys, kLeaveTimeout);
  } catch (const std::exception& e) {
    // The job is over either way; a node that did not say goodbye has its own verdict.
    C10D_LOG_INFO("c10drun: node {} leaving after attempt {}: {}", node_rank_, attempt, e.what());
  }
}

}  // namespace c10d::inline v1::launcher
