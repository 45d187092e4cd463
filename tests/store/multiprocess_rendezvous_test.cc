// Four real processes find each other through c10d::rendezvous, once per init method.
//
// The test hosts the store (a TCPStoreServer on 127.0.0.1, port 0, or a file path), starts
// examples/rendezvous_demo once per rank with the environment or URL for that init method, and
// checks that every rank exited 0 and printed exactly the line that lists all four ranks by the
// host and the pid the test itself started them with.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "child_process.h"
#include "store/tcp_store_server.h"

namespace c10d::inline v1 {
namespace {

using test::ChildExit;
using test::ChildProcess;
using test::EnvChanges;

constexpr int kWorldSize = 4;
constexpr auto kWorldDeadline = std::chrono::seconds(25);

// What a rank is started with: extra arguments for the demo and environment changes.
struct RankLaunch {
  std::vector<std::string> args;
  EnvChanges env;
};

class MultiprocessRendezvousTest : public ::testing::Test {
 protected:
  // A store server that outlives every rank, as a launcher's or `c10d-store serve` would.
  std::uint16_t start_server() {
    store::ServerOptions options;
    options.host = "127.0.0.1";
    options.port = 0;
    server_ = std::make_unique<TCPStoreServer>(options);
    return server_->port();
  }

  // Starts kWorldSize demo processes, waits for all of them, and checks what they printed.
  void run_world_and_expect_everyone_found(const std::function<RankLaunch(int)>& launch_of) {
    const std::string demo = (test::build_dir() / "examples" / "rendezvous_demo").string();
    ASSERT_TRUE(std::filesystem::exists(demo)) << demo << " is not built";
    std::vector<std::unique_ptr<ChildProcess>> ranks;
    for (int rank = 0; rank < kWorldSize; ++rank) {
      RankLaunch launch = launch_of(rank);
      // Nothing from the test's own environment may steer the ranks.
      EnvChanges env = {{"RANK", std::nullopt},
                        {"WORLD_SIZE", std::nullopt},
                        {"MASTER_ADDR", std::nullopt},
                        {"MASTER_PORT", std::nullopt},
                        {"OMPI_COMM_WORLD_RANK", std::nullopt},
                        {"OMPI_COMM_WORLD_SIZE", std::nullopt},
                        {"C10D_STORE_EXTERNAL", std::nullopt},
                        {"C10D_STORE_TOKEN", std::nullopt},
                        {"C10D_DEMO_TIMEOUT_MS", "10000"}};
      for (auto& [key, value] : launch.env) env[key] = value;
      std::vector<std::string> argv = {demo};
      argv.insert(argv.end(), launch.args.begin(), launch.args.end());
      ranks.push_back(
          std::make_unique<ChildProcess>(argv, env, dir_.path(), "rank" + std::to_string(rank)));
    }

    const auto deadline = test::Clock::now() + kWorldDeadline;
    for (auto& child : ranks) {
      const ChildExit exit = child->wait(deadline);
      EXPECT_TRUE(exit.exited && exit.code == 0) << child->describe();
    }

    std::string expected_peers;
    for (int rank = 0; rank < kWorldSize; ++rank) {
      expected_peers += " " + std::to_string(rank) + "=" + hostname() + ":" +
                        std::to_string(ranks[static_cast<std::size_t>(rank)]->pid());
    }
    for (int rank = 0; rank < kWorldSize; ++rank) {
      const ChildProcess& child = *ranks[static_cast<std::size_t>(rank)];
      const std::string found = "rank " + std::to_string(rank) + " of " +
                                std::to_string(kWorldSize) + " found:" + expected_peers + "\n";
      EXPECT_NE(child.out().find(found), std::string::npos)
          << "expected: " << found << child.describe();
      EXPECT_NE(child.out().find("rank " + std::to_string(rank) + " passed the barrier"),
                std::string::npos)
          << child.describe();
    }
  }

  static std::string hostname() {
    char name[HOST_NAME_MAX + 1] = {};
    ::gethostname(name, sizeof(name) - 1);
    return name;
  }

  test::TempDir dir_;
  std::unique_ptr<TCPStoreServer> server_;
};

TEST_F(MultiprocessRendezvousTest, EnvInitMethodFindsAllRanks) {
  const std::string port = std::to_string(start_server());
  run_world_and_expect_everyone_found([&](int rank) {
    return RankLaunch{{"env://"},
                      {{"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", port},
                       {"RANK", std::to_string(rank)},
                       {"WORLD_SIZE", std::to_string(kWorldSize)},
                       {"C10D_STORE_EXTERNAL", "1"}}};
  });
}

TEST_F(MultiprocessRendezvousTest, EnvInitMethodTakesRanksFromMpirunVariables) {
  const std::string port = std::to_string(start_server());
  run_world_and_expect_everyone_found([&](int rank) {
    return RankLaunch{{"env://"},
                      {{"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", port},
                       {"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
                       {"OMPI_COMM_WORLD_SIZE", std::to_string(kWorldSize)},
                       {"C10D_STORE_EXTERNAL", "1"}}};
  });
}

TEST_F(MultiprocessRendezvousTest, TcpInitMethodFindsAllRanks) {
  const std::string port = std::to_string(start_server());
  run_world_and_expect_everyone_found([&](int rank) {
    return RankLaunch{{"tcp://127.0.0.1:" + port + "?rank=" + std::to_string(rank) +
                       "&world_size=" + std::to_string(kWorldSize) + "&external=1"},
                      {}};
  });
}

TEST_F(MultiprocessRendezvousTest, FileInitMethodFindsAllRanks) {
  const std::string path = (dir_.path() / "store").string();
  run_world_and_expect_everyone_found([&](int rank) {
    return RankLaunch{{"file://" + path + "?rank=" + std::to_string(rank) +
                       "&world_size=" + std::to_string(kWorldSize)},
                      {}};
  });
}

}  // namespace
}  // namespace c10d::inline v1
