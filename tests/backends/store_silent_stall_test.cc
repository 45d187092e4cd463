// An op that times out on a rank whose store has stopped answering (a host cut off from the
// network: the store is out of reach too), or whose store goes away while the rank follows the
// other ranks' waits there (node 0's launcher ends with its own ranks). The rank cannot follow
// the waits, so its error says that, naming the last rank known to be waited on, instead of
// calling that rank the one that made no progress; and it does not wait on the store more.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backends/gloo_like/tcp_transport.h"
#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/store.h"
#include "transport/transport.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A HashStore that can go silent: a wait then takes its whole timeout and fails, and every other
// call fails at once, as a store the network no longer reaches.
class SilenceableStore : public HashStore {
 public:
  using HashStore::HashStore;
  using HashStore::set;
  using HashStore::wait;
  void silence() { silent_ = true; }

  void wait(std::span<const std::string> keys, Milliseconds timeout) override {
    if (silent_) {
      std::this_thread::sleep_for(timeout);
      throw TimeoutError("test store: no answer");
    }
    HashStore::wait(keys, timeout);
  }
  void set(std::string_view key, std::span<const std::uint8_t> value) override {
    if (silent_) throw StoreError("test store: no answer");
    HashStore::set(key, value);
  }
  Bytes get(std::string_view key) override {
    if (silent_) throw StoreError("test store: no answer");
    return HashStore::get(key);
  }
  void append(std::string_view key, std::span<const std::uint8_t> value) override {
    if (silent_) throw StoreError("test store: no answer");
    HashStore::append(key, value);
  }

 private:
  std::atomic<bool> silent_{false};
};

TEST(StoreSilentStallTest, TimedOutOpSaysTheStoreDoesNotAnswerInsteadOfBlaming) {
  auto store = std::make_shared<SilenceableStore>(20s);
  ProcessGroupTCPOptions options;
  options.group_name = "silent";
  options.timeout = 20s;
  std::atomic<int> ready{0};
  std::string message;
  Clock::duration took{};
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto pg = make_process_group_tcp(store, r, 2, options);
      pg->barrier()->wait(20s);
      if (++ready == 2) store->silence();
      while (ready < 2) std::this_thread::yield();
      if (r == 1) {  // never joins rank 0's barrier
        std::this_thread::sleep_for(2s);
        return;
      }
      std::this_thread::sleep_for(10ms);  // rank 1 has silenced the store, or rank 0 did
      BarrierOptions opts;
      opts.timeout = 300ms;
      const auto start = Clock::now();
      try {
        pg->barrier(opts)->wait(10s);
        ADD_FAILURE() << "the barrier without rank 1 returned";
      } catch (const TimeoutError& e) {
        message = e.what();
      }
      took = Clock::now() - start;
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_NE(message.find("rank 0: barrier #1 (group 0) timed out after 300 ms waiting for rank 1"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("the store does not answer either (this rank may be cut off from it, or "
                         "it is gone), so whom rank 1 waits for is unknown"),
            std::string::npos)
      << message;
  EXPECT_EQ(message.find("made no progress"), std::string::npos) << message;
  // The op's 300 ms and the store probe's 500 ms, with room for a busy machine.
  EXPECT_LT(took, 2s) << message;
}

// A store whose server goes away while a rank waits there for another rank's stall record: the
// wait ends with the server closing the connection, and every later call would try to reconnect
// until the store's timeout (here 3 s, often minutes).
class VanishingStore : public HashStore {
 public:
  using HashStore::HashStore;
  using HashStore::set;
  using HashStore::wait;
  void vanish_at_next_stall_wait() { armed_ = true; }

  void wait(std::span<const std::string> keys, Milliseconds timeout) override {
    gone_or_reconnect();
    if (armed_ && keys.size() == 1 && keys[0].find("/stall/") != std::string::npos) {
      gone_ = true;
      throw StoreError("test store: the server closed the connection during WAIT");
    }
    HashStore::wait(keys, timeout);
  }
  void set(std::string_view key, std::span<const std::uint8_t> value) override {
    gone_or_reconnect();
    HashStore::set(key, value);
  }
  Bytes get(std::string_view key) override {
    gone_or_reconnect();
    return HashStore::get(key);
  }
  void append(std::string_view key, std::span<const std::uint8_t> value) override {
    gone_or_reconnect();
    HashStore::append(key, value);
  }

 private:
  void gone_or_reconnect() {
    if (!gone_) return;
    std::this_thread::sleep_for(3s);
    throw StoreError("test store: cannot reconnect: connection refused");
  }
  std::atomic<bool> armed_{false};
  std::atomic<bool> gone_{false};
};

TEST(StoreSilentStallTest, AStoreThatGoesAwayWhileFollowingWaitsIsNotAskedAgain) {
  auto store = std::make_shared<VanishingStore>(20s);
  std::vector<std::unique_ptr<gloo_like::TCPTransport>> transports(2);
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      transports[static_cast<std::size_t>(r)] = std::make_unique<gloo_like::TCPTransport>(
          store, r, 2, "vanishing", gloo_like::TCPTransportOptions{"127.0.0.1", 20s});
    });
  }
  for (auto& t : ranks) t.join();
  ASSERT_TRUE(transports[0] && transports[1]);
  store->vanish_at_next_stall_wait();
  const auto start = Clock::now();
  const transport::StallReport report = transports[0]->find_stalled(1, "all_reduce #3", 1000ms);
  // Not the 3 s a further call (the launcher's stall record) would take to give up.
  EXPECT_LT(Clock::now() - start, 2s);
  EXPECT_TRUE(report.store_silent);
  EXPECT_EQ(report.suspect, 1);
  EXPECT_TRUE(report.chain.empty());
}

}  // namespace
}  // namespace c10d::inline v1
