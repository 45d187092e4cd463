// TCPStore against a server whose link is cut (cuttable_proxy.h): the connection stays open and
// nothing answers, as for a rank on a host cut off from the network, where a dead server would
// have closed the connection.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "cuttable_proxy.h"
#include "store/tcp_store_server.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

class TCPStoreSilentServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ::unsetenv("C10D_STORE_TOKEN");
    store::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    server_ = std::make_unique<TCPStoreServer>(o);
    proxy_ = std::make_unique<testing::CuttableProxy>(server_->port());
    TCPStoreOptions c;
    c.host = "127.0.0.1";
    c.port = proxy_->port();
    c.timeout = 60s;
    c.use_local_socket = false;  // through the proxy, not the server's Unix socket
    store_ = std::make_unique<TCPStore>(c);
    store_->set("k", std::string("v"));
    store_->wait(keys_, 500ms);  // answered at once while the link is up
    proxy_->cut();
  }

  // How long wait(keys_, t) takes to fail on the silent server; its error in `message`.
  Clock::duration failed_wait(Milliseconds t, std::string& message) {
    const auto start = Clock::now();
    try {
      store_->wait(keys_, t);
      ADD_FAILURE() << "a wait on a silent server returned";
    } catch (const TimeoutError& e) {
      message = e.what();
    }
    return Clock::now() - start;
  }

  const std::vector<std::string> keys_{"k"};
  std::unique_ptr<TCPStoreServer> server_;
  std::unique_ptr<testing::CuttableProxy> proxy_;
  std::unique_ptr<TCPStore> store_;
};

// A failing rank probes the store with a 500 ms WAIT before it records its cause there; on a
// host cut off, that probe took the 5 s of grace a long wait gives a busy server, so every rank
// there failed 5.5 s after its op's timeout.
TEST_F(TCPStoreSilentServerTest, ShortWaitFailsInAboutTwiceItsTimeout) {
  std::string message;
  const auto took = failed_wait(500ms, message);
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 2500ms) << "the answer to a 500 ms WAIT was awaited for 5 s more";
  EXPECT_NE(message.find("no answer to WAIT for keys"), std::string::npos) << message;
}

// The grace is as long again as the wait (at least 1 s, at most 5 s).
TEST_F(TCPStoreSilentServerTest, GraceIsAsLongAgainAsTheWait) {
  std::string message;
  const auto took = failed_wait(1500ms, message);
  EXPECT_GE(took, 3000ms) << message;
  EXPECT_LT(took, 4500ms) << message;
}

}  // namespace
}  // namespace c10d::inline v1
