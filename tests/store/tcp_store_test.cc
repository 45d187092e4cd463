// TCPStore and its server: concurrency, deadlines, authentication, versions, shutdown.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <thread>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "raw_client.h"
#include "store/tcp_store_server.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using testing::RawClient;

class TCPStoreTest : public ::testing::Test {
 protected:
  void SetUp() override { ::unsetenv("C10D_STORE_TOKEN"); }

  static std::unique_ptr<TCPStoreServer> serve(std::string token = {}, StoreLimits limits = {}) {
    store::ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.token = std::move(token);
    o.limits = limits;
    return std::make_unique<TCPStoreServer>(o);
  }

  // A port no server listens on, just now: a server on port 0 learns one and stops.
  static std::uint16_t unused_port() { return serve()->port(); }

  static TCPStoreOptions client_options(std::uint16_t port, Milliseconds timeout = 10s) {
    TCPStoreOptions o;
    o.host = "127.0.0.1";
    o.port = port;
    o.timeout = timeout;
    return o;
  }

  template <typename E>
  static std::string message_of(const std::function<void()>& fn) {
    try {
      fn();
    } catch (const E& e) {
      return e.what();
    }
    ADD_FAILURE() << "expected exception not thrown";
    return {};
  }
};

TEST_F(TCPStoreTest, SixtyFourClientThreadsShareOneServer) {
  auto server = serve();
  constexpr int kThreads = 64, kAdds = 50;
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        TCPStore store(client_options(server->port()));
        store.set("value/" + std::to_string(t), std::to_string(t * 7));
        for (int i = 0; i < kAdds; ++i) store.add("counter", 1);
        // Every thread reads a neighbour's value, waiting for it if need be.
        const int peer = (t + 1) % kThreads;
        if (store.get_string("value/" + std::to_string(peer)) != std::to_string(peer * 7)) {
          ++failures;
        }
        store.add("done", 1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures, 0);
  TCPStore check(client_options(server->port()));
  EXPECT_EQ(check.add("counter", 0), kThreads * kAdds);
  EXPECT_EQ(check.add("done", 0), kThreads);
  EXPECT_EQ(check.num_keys(), kThreads + 2);
  EXPECT_EQ(server->stats().connections_rejected, 0u);
}

TEST_F(TCPStoreTest, OneClientSharedByThreadsSerializesCalls) {
  TCPStore store({.host = "127.0.0.1", .port = 0, .is_server = true, .timeout = 10s});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) store.add("n", 2);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store.add("n", 0), 8 * 200 * 2);
  EXPECT_EQ(store.get_string("n"), "3200");
}

TEST_F(TCPStoreTest, WaitTimeoutNamesAddressKeysAndDuration) {
  auto server = serve();
  TCPStore store(client_options(server->port()));
  store.set("present", std::string_view("1"));
  const auto start = std::chrono::steady_clock::now();
  std::string msg = message_of<TimeoutError>([&] {
    std::vector<std::string> keys = {"present", "missing/a", "missing/b"};
    store.wait(keys, 150ms);
  });
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 140ms);
  EXPECT_LT(waited, 3s);
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(server->port())), std::string::npos) << msg;
  // The server's part names only the keys still missing.
  EXPECT_NE(msg.find("keys [missing/a, missing/b] were not set"), std::string::npos) << msg;
  EXPECT_NE(msg.find("150 ms"), std::string::npos) << msg;
  // The connection is still good after a server-side timeout.
  EXPECT_EQ(store.get_string("present"), "1");
  // A long list is named by its first few keys: the answer stays small however many are missing.
  std::vector<std::string> many;
  for (int i = 0; i < 2000; ++i)
    many.push_back("missing/" + std::string(100, 'k') + std::to_string(i));
  msg = message_of<TimeoutError>([&] { store.wait(many, 50ms); });
  EXPECT_NE(msg.find(", ... 2000 keys missing in all] were not set within 50 ms"),
            std::string::npos)
      << msg;
  EXPECT_LT(msg.size(), 4096u);
}

TEST_F(TCPStoreTest, WaitIsReleasedBySetFromAnotherClient) {
  auto server = serve();
  TCPStore waiter(client_options(server->port()));
  TCPStore setter(client_options(server->port()));
  auto done = std::async(std::launch::async, [&] {
    std::vector<std::string> keys = {"a", "b"};
    waiter.wait(keys, 10s);
    return waiter.get_string("b");
  });
  std::this_thread::sleep_for(50ms);
  setter.set("a", std::string_view("x"));
  EXPECT_EQ(done.wait_for(100ms), std::future_status::timeout);  // still needs b
  EXPECT_EQ(server->stats().waits_held, 1u);
  setter.set("b", std::string_view("y"));
  ASSERT_EQ(done.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(done.get(), "y");
}

TEST_F(TCPStoreTest, ClientRetriesUntilTheServerStarts) {
  // Start the client first, on a port no server listens on yet.
  const std::uint16_t port = unused_port();
  auto client = std::async(std::launch::async, [&] {
    TCPStore store(client_options(port, 10s));
    return store.get_string("hello");
  });
  std::this_thread::sleep_for(300ms);
  store::ServerOptions o;
  o.port = port;
  TCPStoreServer server(o);
  TCPStore setter(client_options(port));
  setter.set("hello", std::string_view("world"));
  ASSERT_EQ(client.wait_for(10s), std::future_status::ready);
  EXPECT_EQ(client.get(), "world");
}

TEST_F(TCPStoreTest, ConnectTimeoutNamesTheAddress) {
  const std::uint16_t port = unused_port();
  std::string msg = message_of<TimeoutError>([&] { TCPStore store(client_options(port, 300ms)); });
  EXPECT_NE(msg.find("127.0.0.1:" + std::to_string(port)), std::string::npos) << msg;
  EXPECT_NE(msg.find("could not connect"), std::string::npos) << msg;
}

TEST_F(TCPStoreTest, ServerShutdownFailsAWaitingClientWithStoreError) {
  auto server = serve();
  TCPStore store(client_options(server->port(), 60s));
  auto waiting = std::async(std::launch::async, [&]() -> std::string {
    try {
      store.get("never-set");
    } catch (const StoreError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("wrong exception type: ") + e.what();
    }
    return "no exception";
  });
  std::this_thread::sleep_for(100ms);
  const auto start = std::chrono::steady_clock::now();
  server->stop();
  ASSERT_EQ(waiting.wait_for(5s), std::future_status::ready);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);
  std::string msg = waiting.get();
  EXPECT_NE(msg.find("closed the connection"), std::string::npos) << msg;
  EXPECT_NE(msg.find("never-set"), std::string::npos) << msg;
}

// A WAIT with a short timeout against a server that is gone gives up within about that
// timeout: reconnecting does not take the extra grace the server gets to answer a WAIT (a
// failing transport probes a store that died with its rank this way, and must not hang).
TEST_F(TCPStoreTest, ShortWaitOnAServerThatIsGoneFailsWithinItsTimeout) {
  auto server = serve();
  TCPStore store(client_options(server->port(), 60s));
  store.set("k", std::string("v"));
  server->stop();
  server.reset();
  const std::vector<std::string> keys{"k"};
  // The first call may meet the dead connection; every later one has to connect again.
  for (int i = 0; i < 2; ++i) {
    const auto start = std::chrono::steady_clock::now();
    EXPECT_THROW(store.wait(keys, 300ms), Error);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "call " << i;
  }
}

TEST_F(TCPStoreTest, TokenIsRequiredWhenTheServerHasOne) {
  auto server = serve("s3cret");
  std::string msg = message_of<StoreError>([&] { TCPStore store(client_options(server->port())); });
  EXPECT_NE(msg.find("requires authentication"), std::string::npos) << msg;
  EXPECT_NE(msg.find("C10D_STORE_TOKEN"), std::string::npos) << msg;

  auto wrong = client_options(server->port());
  wrong.token = "guess";
  msg = message_of<StoreError>([&] { TCPStore store(wrong); });
  EXPECT_EQ(msg.rfind(fmt::format("store 127.0.0.1:{}: authentication failed: this client's "
                                  "token does not match the store's",
                                  server->port()),
                      0),
            0u)
      << msg;
  // Said once, not once per layer.
  EXPECT_EQ(msg.find("authentication", msg.find("authentication") + 1), std::string::npos) << msg;

  // A raw client that skips AUTH is refused before any command is served.
  RawClient raw(server->port());
  raw.send(RawClient::hello());
  auto hello = raw.read_answer(2s);
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->body.at(0), 1);  // auth required
  Bytes get;
  auto start =
      store::wire::begin_frame(get, static_cast<std::uint8_t>(store::wire::Kind::kNumKeys));
  store::wire::end_frame(get, start);
  raw.send(get);
  auto refused = raw.read_answer(2s);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, store::wire::Status::kAuthRequired);
  EXPECT_TRUE(raw.closed_by_server(2s));

  auto right = client_options(server->port());
  right.token = "s3cret";
  TCPStore store(right);
  store.set("k", std::string_view("v"));
  EXPECT_EQ(store.get_string("k"), "v");

  ::setenv("C10D_STORE_TOKEN", "s3cret", 1);  // the environment supplies the token too
  TCPStore from_env(client_options(server->port()));
  EXPECT_EQ(from_env.get_string("k"), "v");
  // An empty one would turn authentication off without a word: refused.
  ::setenv("C10D_STORE_TOKEN", "", 1);
  msg =
      message_of<InvalidArgument>([&] { TCPStore without_token(client_options(server->port())); });
  EXPECT_EQ(msg.rfind("C10D_STORE_TOKEN is empty", 0), 0u) << msg;
  ::unsetenv("C10D_STORE_TOKEN");
}

// Authentication proves the client to the server; a client that has a token must not take a
// server that asks for none for its own (a process on a stale port, another job's open store):
// what such a server hands out, a transport secret or peers' addresses, would be believed.
TEST_F(TCPStoreTest, AClientWithATokenRefusesAServerThatAsksForNone) {
  auto server = serve();
  TCPStore open(client_options(server->port()));  // a client without a token uses it
  open.set("c10d/transport_secret", std::string_view("not the job's"));
  auto with_token = client_options(server->port());
  with_token.token = "s3cret";
  const std::string expected = fmt::format(
      "server at 127.0.0.1:{} asks for no token but this client has one", server->port());
  std::string msg = message_of<StoreError>([&] { TCPStore store(with_token); });
  EXPECT_EQ(msg.rfind(expected, 0), 0u) << msg;
  ::setenv("C10D_STORE_TOKEN", "s3cret", 1);  // from the environment alike
  msg = message_of<StoreError>([&] { TCPStore store(client_options(server->port())); });
  EXPECT_EQ(msg.rfind(expected, 0), 0u) << msg;
  ::unsetenv("C10D_STORE_TOKEN");
  EXPECT_EQ(open.get_string("c10d/transport_secret"), "not the job's");
}

TEST_F(TCPStoreTest, OtherProtocolVersionGetsAnErrorStatingBothVersions) {
  auto server = serve();
  RawClient raw(server->port());
  raw.send(RawClient::hello(7));
  auto answer = raw.read_answer(2s);
  ASSERT_TRUE(answer);
  EXPECT_EQ(answer->status, store::wire::Status::kVersionMismatch);
  EXPECT_NE(answer->message().find("client speaks version 7"), std::string::npos)
      << answer->message();
  EXPECT_NE(answer->message().find("server speaks version 1"), std::string::npos)
      << answer->message();
  EXPECT_TRUE(raw.closed_by_server(2s));
}

TEST_F(TCPStoreTest, ClientLearnsTheServersLimitsAndRefusesBeforeSending) {
  StoreLimits small;
  small.max_key_bytes = 64;
  small.max_value_bytes = 1024;
  small.max_frame_bytes = 4096;
  auto server = serve({}, small);
  TCPStore store(client_options(server->port()));
  const auto requests = server->stats().requests;
  std::string msg = message_of<InvalidArgument>([&] { store.set("big", std::string(2000, 'x')); });
  EXPECT_NE(msg.find("value of 2000 bytes exceeds the limit of 1024"), std::string::npos) << msg;
  std::vector<std::string> keys = {"a", "b", "c", "d", "e"};
  std::vector<Bytes> values(5, Bytes(1000, 1));
  msg = message_of<InvalidArgument>([&] { store.multi_set(keys, values); });
  EXPECT_NE(msg.find("exceeds the server's limit of 4096"), std::string::npos) << msg;
  EXPECT_EQ(server->stats().requests, requests);  // nothing was sent
  store.set("small", std::string_view("ok"));
  EXPECT_EQ(store.get_string("small"), "ok");
  EXPECT_EQ(server->stats().connections_rejected, 0u);
}

TEST_F(TCPStoreTest, ClientRefusesAMultiGetWhoseAnswerCannotFitItsLimit) {
  auto server = serve();
  TCPStoreOptions c = client_options(server->port());
  c.limits.max_response_bytes = 1024;
  TCPStore store(c);
  const auto requests = server->stats().requests;
  // 300 values take at least 1205 bytes, however short.
  std::vector<std::string> keys(300, "k");
  std::string msg = message_of<StoreError>([&] { store.multi_get(keys); });
  EXPECT_NE(msg.find("at least 1205 bytes, over the limit of 1024 bytes per answer "
                     "(max_response_bytes)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(server->stats().requests, requests);  // nothing was sent
  // An answer over the client's own limit is refused as it arrives, naming the limit.
  store.set("v", std::string(2000, 'x'));
  msg = message_of<StoreError>([&] { store.get("v"); });
  EXPECT_NE(msg.find("answer body of 2005 bytes exceeds the limit of 1024 (max_response_bytes)"),
            std::string::npos)
      << msg;
  EXPECT_EQ(store.add("n", 1), 1);  // it reconnects and serves on
}

TEST_F(TCPStoreTest, AnswerOverTheServersLimitIsAStoreErrorAndTheConnectionServesOn) {
  StoreLimits small;
  small.max_key_bytes = 64;
  small.max_value_bytes = 1000;
  small.max_frame_bytes = 4096;
  small.max_response_bytes = 4096;
  auto server = serve({}, small);
  TCPStore store(client_options(server->port()));
  store.set("v", std::string(1000, 'x'));
  const auto accepted = server->stats().connections_accepted;
  std::vector<std::string> keys(5, "v");
  std::string msg = message_of<StoreError>([&] { store.multi_get(keys); });
  EXPECT_NE(msg.find("MULTI_GET of 5 keys would answer 5025 bytes, over the limit of 4096 bytes "
                     "per answer (max_response_bytes)"),
            std::string::npos)
      << msg;
  keys.resize(3);
  EXPECT_EQ(store.multi_get(keys).size(), 3u);
  EXPECT_EQ(server->stats().connections_accepted, accepted);  // the same connection
  EXPECT_EQ(server->stats().connections_rejected, 0u);
}

TEST_F(TCPStoreTest, InconsistentServerLimitsAreRefused) {
  StoreLimits bad;
  bad.max_frame_bytes = 1024;  // cannot carry an 8 KiB key
  std::string msg = message_of<InvalidArgument>([&] { serve({}, bad); });
  EXPECT_NE(msg.find("cannot carry"), std::string::npos) << msg;
  bad = StoreLimits{};
  bad.max_response_bytes = bad.max_value_bytes;  // no room for the value's framing
  msg = message_of<InvalidArgument>([&] { serve({}, bad); });
  EXPECT_NE(msg.find("max_response_bytes"), std::string::npos) << msg;
  store::ServerOptions o;
  o.max_pending_output_bytes = 1u << 20;  // less than one answer
  msg = message_of<InvalidArgument>([&] { TCPStoreServer server(o); });
  EXPECT_NE(msg.find("max_pending_output_bytes"), std::string::npos) << msg;
  o = store::ServerOptions{};
  o.max_pending_input_bytes = 1u << 20;  // less than one request
  msg = message_of<InvalidArgument>([&] { TCPStoreServer server(o); });
  EXPECT_NE(msg.find("max_pending_input_bytes"), std::string::npos) << msg;
  bad = StoreLimits{};
  bad.max_value_bytes = 1ull << 33;  // does not fit the wire's u32 lengths
  bad.max_frame_bytes = 1ull << 34;
  EXPECT_THROW(serve({}, bad), InvalidArgument);
}

TEST_F(TCPStoreTest, RefusedSetIsAnsweredAndItsConnectionClosed) {
  StoreLimits small;
  small.max_value_bytes = 16;
  auto server = serve({}, small);
  RawClient raw(server->port());
  Bytes frames = RawClient::hello();
  auto start = store::wire::begin_frame(frames, static_cast<std::uint8_t>(store::wire::Kind::kSet));
  store::wire::put_string(frames, "k");
  store::wire::put_string(frames, std::string(17, 'v'));
  store::wire::end_frame(frames, start);
  start = store::wire::begin_frame(frames, static_cast<std::uint8_t>(store::wire::Kind::kAdd));
  store::wire::put_string(frames, "never");
  store::wire::put_u64(frames, 1);
  store::wire::end_frame(frames, start);
  raw.send(frames);
  ASSERT_TRUE(raw.read_answer(2s));  // HELLO
  auto refused = raw.read_answer(2s);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, store::wire::Status::kLimitExceeded);
  EXPECT_TRUE(raw.closed_by_server(2s));
  TCPStore store(client_options(server->port()));
  EXPECT_FALSE(store.check(std::vector<std::string>{"never"}));  // the ADD after it never ran
}

TEST_F(TCPStoreTest, SetIsVisibleToOtherClientsOnceAnyLaterCallReturns) {
  auto server = serve();
  TCPStore writer(client_options(server->port()));
  TCPStore reader(client_options(server->port()));
  for (int i = 0; i < 200; ++i) {
    writer.set("k", std::to_string(i));
    writer.num_keys();  // any call collects the set's acknowledgement
    ASSERT_EQ(reader.get_string("k"), std::to_string(i));
  }
}

TEST_F(TCPStoreTest, SetsSentJustBeforeTheClientGoesAwayStillLand) {
  auto server = serve();
  {
    TCPStore writer(client_options(server->port()));
    for (int i = 0; i < 100; ++i) writer.set("w" + std::to_string(i), std::string_view("v"));
  }  // closed with every set unanswered: the server still applies them, in order
  TCPStore reader(client_options(server->port()));
  EXPECT_EQ(reader.get_string("w99"), "v");  // waits for the last one
  EXPECT_EQ(reader.num_keys(), 100);
}

TEST_F(TCPStoreTest, ClientChecksLimitsBeforeSending) {
  auto server = serve();
  TCPStore store(client_options(server->port()));
  const auto requests = server->stats().requests;
  std::string msg = message_of<InvalidArgument>(
      [&] { store.set(std::string(9000, 'k'), std::string_view("v")); });
  EXPECT_NE(msg.find("key of 9000 bytes exceeds the limit of 8192"), std::string::npos) << msg;
  EXPECT_EQ(server->stats().requests, requests);  // nothing was sent
}

TEST_F(TCPStoreTest, LargeValuesAndMultiOpsRoundTrip) {
  auto server = serve();
  TCPStore store(client_options(server->port()));
  Bytes big(16u << 20);
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = static_cast<std::uint8_t>(i * 131);
  store.set("big", big);
  EXPECT_EQ(store.get("big"), big);
  std::vector<std::string> keys;
  std::vector<Bytes> values;
  for (int i = 0; i < 1000; ++i) {
    keys.push_back("k" + std::to_string(i));
    values.push_back(Bytes(static_cast<std::size_t>(i % 17), static_cast<std::uint8_t>(i)));
  }
  store.multi_set(keys, values);
  EXPECT_EQ(store.multi_get(keys), values);
}

TEST_F(TCPStoreTest, PipelinedRequestsAreAnsweredInOrder) {
  auto server = serve();
  RawClient raw(server->port());
  Bytes batch = RawClient::hello();
  for (int i = 1; i <= 3; ++i) {
    auto start =
        store::wire::begin_frame(batch, static_cast<std::uint8_t>(store::wire::Kind::kAdd));
    store::wire::put_string(batch, "n");
    store::wire::put_u64(batch, static_cast<std::uint64_t>(i));
    store::wire::end_frame(batch, start);
  }
  raw.send(batch);
  ASSERT_TRUE(raw.read_answer(2s));
  for (std::int64_t expected : {1, 3, 6}) {
    auto a = raw.read_answer(2s);
    ASSERT_TRUE(a);
    ASSERT_EQ(a->status, store::wire::Status::kOk);
    EXPECT_EQ(static_cast<std::int64_t>(store::wire::get_u64(a->body.data())), expected);
  }
}

TEST_F(TCPStoreTest, SameHostClientsSwitchToTheLocalSocketUnlessTurnedOff) {
  auto server = serve("tok");
  auto local = client_options(server->port());
  local.token = "tok";
  TCPStore fast(local);
  EXPECT_EQ(server->stats().local_connections_accepted, 1u);
  auto tcp_only = local;
  tcp_only.use_local_socket = false;
  TCPStore plain(tcp_only);
  EXPECT_EQ(server->stats().local_connections_accepted, 1u);
  // Both reach the same data, and the local connection was authenticated too.
  fast.set("k", std::string_view("v"));
  EXPECT_EQ(plain.get_string("k"), "v");
  EXPECT_EQ(fast.add("n", 2) + plain.add("n", 3), 7);
  EXPECT_EQ(server->stats().connections_rejected, 0u);
}

TEST_F(TCPStoreTest, HostedServerOnIPv6LoopbackWhenAvailable) {
  std::unique_ptr<TCPStore> store;
  try {
    store = std::make_unique<TCPStore>(
        TCPStoreOptions{.host = "::1", .port = 0, .is_server = true, .timeout = 5s});
  } catch (const NetworkError& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  EXPECT_EQ(store->address(), "[::1]:" + std::to_string(store->port()));
  store->set("six", std::string_view("yes"));
  EXPECT_EQ(store->get_string("six"), "yes");
}

}  // namespace
}  // namespace c10d::inline v1
