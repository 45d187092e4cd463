// The ICI backend with one chip per process: a chip killed with SIGKILL in the middle of an
// all_reduce is noticed by its neighbours (its pid is gone while its segment still says
// running), and the abort floods the torus, so every other rank fails within 5 s with an error
// naming it. A healthy run of the same program passes.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <memory>
#include <vector>

#include "../store/child_process.h"
#include "store/tcp_store_server.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::EnvChanges;
using test::TempDir;

std::string child_path() { return (test::build_dir() / "tests" / "pg_fault_child").string(); }

struct Chips {
  TempDir dir;
  std::unique_ptr<TCPStoreServer> server;
  std::vector<std::unique_ptr<ChildProcess>> children;

  Chips(int n, const std::string& topology, const std::vector<std::string>& args) {
    server = std::make_unique<TCPStoreServer>(store::ServerOptions{});
    for (int r = 0; r < n; ++r) {
      EnvChanges env;
      env["RANK"] = std::to_string(r);
      env["WORLD_SIZE"] = std::to_string(n);
      env["MASTER_ADDR"] = "127.0.0.1";
      env["MASTER_PORT"] = std::to_string(server->port());
      env["C10D_STORE_EXTERNAL"] = "1";
      env["C10D_BACKEND"] = "ici";
      env["C10D_ICI_TOPOLOGY"] = topology;
      std::vector<std::string> argv{child_path()};
      argv.insert(argv.end(), args.begin(), args.end());
      children.push_back(
          std::make_unique<ChildProcess>(argv, env, dir.path(), "rank" + std::to_string(r)));
    }
  }
};

TEST(IciProcessFaultTest, AKilledChipFailsEveryOtherChipQuicklyNamingIt) {
  constexpr int kVictim = 2;
  Chips chips(4, "2x2", {"kill", std::to_string(kVictim)});
  const auto victim = chips.children[kVictim]->wait(std::chrono::steady_clock::now() + 60s);
  ASSERT_FALSE(victim.exited) << chips.children[kVictim]->describe();
  EXPECT_EQ(victim.signal, SIGKILL);
  const auto died = std::chrono::steady_clock::now();
  for (int r = 0; r < 4; ++r) {
    if (r == kVictim) continue;
    auto& child = *chips.children[static_cast<std::size_t>(r)];
    const auto exit = child.wait(died + 5s);
    EXPECT_FALSE(exit.timed_out) << "rank " << r << " still running 5 s after rank 2 died";
    EXPECT_EQ(exit.code, 3) << child.describe();
    const std::string out = child.out();
    EXPECT_NE(out.find("FAILED"), std::string::npos) << out;
    EXPECT_NE(out.find("rank 2"), std::string::npos) << "rank " << r << ": " << out;
  }
}

TEST(IciProcessFaultTest, AHealthyRunPasses) {
  Chips chips(4, "4", {"ok"});
  for (auto& child : chips.children) {
    const auto exit = child->wait(std::chrono::steady_clock::now() + 60s);
    EXPECT_EQ(exit.code, 0) << child->describe();
    EXPECT_NE(child->out().find("OK"), std::string::npos) << child->out();
  }
}

}  // namespace
}  // namespace c10d::inline v1
