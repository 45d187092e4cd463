// The TCP transport's authentication with real processes: ranks are pg_fault_child processes
// (init_process_group from the environment, TCP alone), the store is hosted by the test, and a
// stranger (tests/backends/stranger.h) that knows the group name, world size and rank numbers
// but not the job's secret gets to a rank first.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "../backends/stranger.h"
#include "../store/child_process.h"
#include "c10d/store.h"
#include "store/tcp_store_server.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using gloo_like::testing::StrangerListener;
using gloo_like::testing::StrangerSocket;
using test::ChildProcess;
using test::EnvChanges;
using test::TempDir;

std::string child_path() { return (test::build_dir() / "tests" / "pg_fault_child").string(); }

class TransportAuthTest : public ::testing::Test {
 protected:
  // A store for a job of two ranks; `token` empty: an open store.
  void serve(const std::string& token) {
    store::ServerOptions options;
    options.token = token;
    server_ = std::make_unique<TCPStoreServer>(options);
    token_ = token;
    TCPStoreOptions client;
    client.port = server_->port();
    client.token = token;
    client.timeout = 20s;
    store_ = std::make_unique<TCPStore>(client);
  }

  // Rank `rank` of 2 running pg_fault_child's "ok": 20 all_reduces of 4 MiB over TCP alone,
  // each checked; "OK" and exit 0 when all were exact.
  std::unique_ptr<ChildProcess> start_rank(int rank) {
    EnvChanges env{{"RANK", std::to_string(rank)},
                   {"WORLD_SIZE", "2"},
                   {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(server_->port())},
                   {"C10D_STORE_EXTERNAL", "1"},
                   {"C10D_SHM", "0"},
                   {"C10D_TIMEOUT_MS", "20000"},
                   {"C10D_LOG_LEVEL", "warn"},
                   {"C10D_STORE_TOKEN", token_.empty() ? std::nullopt : std::optional(token_)}};
    return std::make_unique<ChildProcess>(std::vector<std::string>{child_path(), "ok"}, env,
                                          dir_.path(), "rank" + std::to_string(rank));
  }

  TempDir dir_;
  std::unique_ptr<TCPStoreServer> server_;
  std::unique_ptr<TCPStore> store_;
  std::string token_;
};

TEST_F(TransportAuthTest, AStrangerClaimingRankOneFirstIsRefusedAndTheJobRunsExact) {
  serve("job secret");
  auto rank0 = start_rank(0);
  const std::string addr = store_->get_string("default/addr/0");
  StrangerSocket s = StrangerSocket::connect_to(gloo_like::testing::port_of(addr));
  ASSERT_TRUE(s.connected());
  const auto claim = gloo_like::testing::claim_rank(s, {2, 1, "default"}, 0);
  EXPECT_EQ(claim.challenge.size(), gloo_like::kGreetingBytes);
  EXPECT_TRUE(claim.after_proof.empty()) << "the stranger got an answer to its proof";
  EXPECT_TRUE(claim.closed);
  s.close();

  auto rank1 = start_rank(1);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (auto* child : {rank0.get(), rank1.get()}) {
    const auto exit = child->wait(deadline);
    EXPECT_TRUE(exit.exited && exit.code == 0) << child->describe();
    EXPECT_NE(child->out().find("OK"), std::string::npos) << child->describe();
  }
  EXPECT_NE(rank0->err().find("rank 0: refused connection from 127.0.0.1:"), std::string::npos)
      << rank0->err();
}

// An open store (no token): whoever reaches it can write a rank's address (and its host key, which
// set-up reads beside the addresses: host_map.h). The rank that connects there (at its first
// all_reduce, connecting on first use) fails naming itself and the address instead of joining
// the stranger.
TEST_F(TransportAuthTest, AnAddressOverwrittenInAnOpenStoreFailsTheConnectingRankNamingIt) {
  serve("");
  StrangerListener listener;
  store_->set("default/hosts/1/host/0", std::string_view("the stranger's host"));
  store_->set("default/addr/0", listener.address());
  std::jthread stranger([&] {
    StrangerSocket s = listener.accept(20s);
    gloo_like::Nonces nonces;
    gloo_like::decode_greeting(s.read_n(gloo_like::kGreetingBytes), nonces.connector);
    nonces.acceptor = gloo_like::new_nonce();
    s.send(gloo_like::encode_greeting(nonces.acceptor));
    s.read_n(gloo_like::kProofFixedBytes + 7 + core::kMacBytes);  // group "default"
    s.send(gloo_like::encode_accept({{2, 0, "default"}, gloo_like::AcceptStatus::kAccepted},
                                    gloo_like::testing::stranger_key(), nonces));
    s.read_to_end(20s);
  });
  auto rank1 = start_rank(1);
  const auto exit = rank1->wait(std::chrono::steady_clock::now() + 30s);
  stranger.join();
  EXPECT_TRUE(exit.exited && exit.code == 3) << rank1->describe();  // its op failed
  const std::string out = rank1->out();
  EXPECT_NE(out.find("rank 1: the process at " + listener.address() +
                     ", published as rank 0's address, did not prove it belongs to this job"),
            std::string::npos)
      << rank1->describe() << out;
}

}  // namespace
}  // namespace c10d::inline v1
