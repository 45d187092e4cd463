// Hostile input against a live TCP store server: garbage, truncated frames, absurd lengths,
// the wrong magic, an old version and a wrong token. Each closes only its own connection; a
// well-behaved client of the same server keeps getting correct answers, and no claimed size is
// ever allocated.
//
// Then exhaustion: small requests that ask for huge answers, clients that never read their
// answers, floods of idle connections. The server's memory, its connections and its log stay
// bounded, and a good client is served throughout. Where memory or log lines are measured the
// server runs as `c10d-store serve` in a child process, so that they are the server's alone.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <random>
#include <thread>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "child_process.h"
#include "raw_client.h"
#include "store/tcp_store_server.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

using namespace std::chrono_literals;
using store::wire::Kind;
using store::wire::Status;
using testing::RawClient;

std::size_t resident_bytes() {
  std::ifstream statm("/proc/self/statm");
  std::size_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
}

Bytes header(std::uint32_t magic, std::uint16_t version, std::uint8_t kind, std::uint64_t body) {
  Bytes out;
  store::wire::put_u32(out, magic);
  store::wire::put_u16(out, version);
  out.push_back(kind);
  out.push_back(0);
  store::wire::put_u64(out, body);
  return out;
}

class HostileInputTest : public ::testing::Test {
 protected:
  void SetUp() override {
    store::ServerOptions o;
    o.token = "right-token";
    server_ = std::make_unique<TCPStoreServer>(o);
    TCPStoreOptions c;
    c.port = server_->port();
    c.token = "right-token";
    c.timeout = 10s;
    good_ = std::make_unique<TCPStore>(c);
    good_->set("stable", std::string_view("value"));
  }

  // The well-behaved client still gets exact answers.
  void expect_server_healthy(int round) {
    const std::string key = "round/" + std::to_string(round);
    good_->set(key, std::to_string(round));
    EXPECT_EQ(good_->get_string(key), std::to_string(round));
    EXPECT_EQ(good_->get_string("stable"), "value");
    EXPECT_EQ(good_->add("rounds", 1), round + 1);
  }

  // Sends `bytes` on a fresh connection (after HELLO and AUTH when `authenticate`), and
  // expects the server to close it, optionally after an error answer with `status`.
  void expect_rejected(const Bytes& bytes, std::optional<Status> status = std::nullopt) {
    RawClient raw(server_->port());
    raw.send(bytes);
    if (status) {
      auto a = raw.read_answer(3s);
      ASSERT_TRUE(a) << "no error answer";
      EXPECT_EQ(a->status, *status) << a->message();
    }
    EXPECT_TRUE(raw.closed_by_server(3s));
  }

  std::unique_ptr<TCPStoreServer> server_;
  std::unique_ptr<TCPStore> good_;
};

TEST_F(HostileInputTest, EveryKindOfGarbageClosesOnlyItsOwnConnection) {
  int round = 0;
  expect_server_healthy(round++);
  const std::size_t rss_before = resident_bytes();

  // Wrong magic: a browser or a port scanner.
  const std::string http = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  expect_rejected(Bytes(http.begin(), http.end()));
  expect_server_healthy(round++);

  // Random bytes, many connections, seeded.
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50; ++i) {
    Bytes noise(16 + rng() % 512);
    for (auto& b : noise) b = static_cast<std::uint8_t>(rng());
    expect_rejected(noise);
  }
  expect_server_healthy(round++);

  // A body of 2^64 - 1 bytes, and one of 4 GiB: refused with a limit error, never allocated.
  for (std::uint64_t huge : {~0ull, 4ull << 30, (64ull << 20) + (2ull << 20)}) {
    expect_rejected(header(store::wire::kMagic, store::wire::kVersion, 1, huge),
                    Status::kLimitExceeded);
  }
  expect_server_healthy(round++);

  // An old (or future) version: an error that states both versions.
  expect_rejected(RawClient::hello(0), Status::kVersionMismatch);
  expect_server_healthy(round++);

  // A wrong token.
  {
    RawClient raw(server_->port());
    raw.send(RawClient::hello());
    auto hello = raw.read_answer(3s);
    ASSERT_TRUE(hello);
    Bytes auth;
    auto start = store::wire::begin_frame(auth, static_cast<std::uint8_t>(Kind::kAuth));
    auth.resize(auth.size() + store::wire::kMacBytes, 0xab);
    store::wire::end_frame(auth, start);
    raw.send(auth);
    auto a = raw.read_answer(3s);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->status, Status::kAuthFailed);
    EXPECT_TRUE(raw.closed_by_server(3s));
  }
  expect_server_healthy(round++);

  // A truncated frame, then the client goes away.
  {
    RawClient raw(server_->port());
    Bytes hello = RawClient::hello();
    hello.pop_back();
    raw.send(hello);
  }
  expect_server_healthy(round++);

  // A command before HELLO, and a key length past the end of the frame.
  Bytes early;
  auto start = store::wire::begin_frame(early, static_cast<std::uint8_t>(Kind::kNumKeys));
  store::wire::end_frame(early, start);
  expect_rejected(early, Status::kBadRequest);
  Bytes lying = RawClient::hello();
  start = store::wire::begin_frame(lying, static_cast<std::uint8_t>(Kind::kDelete));
  store::wire::put_u32(lying, 4000);  // claims a 4000-byte key in a 4-byte body
  store::wire::end_frame(lying, start);
  {
    RawClient raw(server_->port());
    raw.send(lying);
    ASSERT_TRUE(raw.read_answer(3s));  // HELLO's answer
    auto a = raw.read_answer(3s);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->status, Status::kAuthRequired);  // token server: refused before decoding more
  }
  expect_server_healthy(round++);

  // Idle half-open connections do not disturb anyone.
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 20; ++i) {
    idle.push_back(std::make_unique<RawClient>(server_->port()));
    idle.back()->send(Bytes{0x43, 0x31});  // two bytes of a header, then silence
  }
  expect_server_healthy(round++);

  // Headers that claim large bodies within the limit and then send nothing: before the
  // handshake they are refused outright, after it the buffer grows only with real bytes.
  std::vector<std::unique_ptr<RawClient>> claimers;
  for (int i = 0; i < 40; ++i) {
    claimers.push_back(std::make_unique<RawClient>(server_->port()));
    claimers.back()->send(header(store::wire::kMagic, store::wire::kVersion, 1, 60u << 20));
  }
  expect_server_healthy(round++);
  EXPECT_LT(resident_bytes(), rss_before + (32u << 20)) << "the server allocated a claimed size";
  EXPECT_GE(server_->stats().connections_rejected, 58u);
}

TEST(HostileLimitsTest, OversizedKeysAndCountsAfterTheHandshakeAreRefused) {
  store::ServerOptions o;
  TCPStoreServer server(o);
  auto send_after_hello = [&](const std::function<void(Bytes&)>& body, Kind kind) {
    RawClient raw(server.port());
    Bytes f = RawClient::hello();
    auto start = store::wire::begin_frame(f, static_cast<std::uint8_t>(kind));
    body(f);
    store::wire::end_frame(f, start);
    raw.send(f);
    EXPECT_TRUE(raw.read_answer(3s));
    auto a = raw.read_answer(3s);
    EXPECT_TRUE(raw.closed_by_server(3s));
    return a;
  };
  auto a = send_after_hello(
      [](Bytes& f) {
        store::wire::put_string(f, std::string(9000, 'k'));
        store::wire::put_string(f, "v");
      },
      Kind::kSet);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, Status::kLimitExceeded);
  EXPECT_NE(a->message().find("key of 9000 bytes exceeds the limit of 8192"), std::string::npos);

  a = send_after_hello(
      [](Bytes& f) {
        store::wire::put_u64(f, 10);
        store::wire::put_u32(f, 200000);  // 200k keys > 128Ki
      },
      Kind::kMultiGet);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, Status::kLimitExceeded);
  EXPECT_NE(a->message().find("200000 keys"), std::string::npos) << a->message();

  // A key length that runs past the end of its frame, after a completed handshake.
  a = send_after_hello(
      [](Bytes& f) {
        store::wire::put_u32(f, 4000);  // claims a 4000-byte key in a 4-byte body
      },
      Kind::kDelete);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->status, Status::kBadRequest);
  EXPECT_NE(a->message().find("past the end"), std::string::npos) << a->message();

  // After the handshake, a claimed 60 MiB body with nothing behind it costs a few KiB.
  const std::size_t rss_before = resident_bytes();
  std::vector<std::unique_ptr<RawClient>> claimers;
  for (int i = 0; i < 40; ++i) {
    claimers.push_back(std::make_unique<RawClient>(server.port()));
    Bytes f = RawClient::hello();
    const Bytes h = header(store::wire::kMagic, store::wire::kVersion,
                           static_cast<std::uint8_t>(Kind::kSet), 60u << 20);
    f.insert(f.end(), h.begin(), h.end());
    claimers.back()->send(f);
    EXPECT_TRUE(claimers.back()->read_answer(3s));
  }
  TCPStoreOptions c;
  c.port = server.port();
  c.timeout = 5s;
  TCPStore good(c);
  good.set("after", std::string_view("fine"));
  EXPECT_EQ(good.get_string("after"), "fine");
  EXPECT_LT(resident_bytes(), rss_before + (32u << 20)) << "the server allocated a claimed size";
}

TEST(HostileLimitsTest, SilentConnectionsAreClosedAfterTheHandshakeTimeout) {
  store::ServerOptions o;
  o.handshake_timeout = 200ms;
  TCPStoreServer server(o);
  RawClient silent(server.port());
  RawClient half(server.port());
  half.send(Bytes{0x43, 0x31, 0x30});  // three bytes of a header, then nothing
  EXPECT_TRUE(silent.closed_by_server(3s));
  EXPECT_TRUE(half.closed_by_server(3s));
  EXPECT_EQ(server.stats().connections_rejected, 2u);
  // A client that completes its handshake is not affected, however long it then idles.
  TCPStoreOptions c;
  c.port = server.port();
  c.timeout = 5s;
  TCPStore good(c);
  std::this_thread::sleep_for(400ms);
  EXPECT_EQ(good.add("n", 1), 1);
}

// ---- exhaustion ----

Bytes request(Kind kind, const std::function<void(Bytes&)>& body) {
  Bytes out;
  const std::size_t start = store::wire::begin_frame(out, static_cast<std::uint8_t>(kind));
  body(out);
  store::wire::end_frame(out, start);
  return out;
}

Bytes get_request(const std::string& key) {
  return request(Kind::kGet, [&](Bytes& f) {
    store::wire::put_u64(f, 5000);
    store::wire::put_string(f, key);
  });
}

// One key named `times` times: 1.8 KB that asks for `times` copies of its value.
Bytes multi_get_request(const std::string& key, int times) {
  return request(Kind::kMultiGet, [&](Bytes& f) {
    store::wire::put_u64(f, 5000);
    store::wire::put_u32(f, static_cast<std::uint32_t>(times));
    for (int i = 0; i < times; ++i) store::wire::put_string(f, key);
  });
}

Bytes concat(Bytes a, const Bytes& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Polls `pred` every 10 ms until it holds or `timeout` passes.
bool eventually(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 5s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(10ms);
  }
  return true;
}

TCPStoreOptions client_of(std::uint16_t port, Milliseconds timeout = 10s) {
  TCPStoreOptions c;
  c.port = port;
  c.timeout = timeout;
  return c;
}

// `c10d-store serve` in a child process, optionally under a lower open-file limit (soft and
// hard, so the server cannot raise it), with its memory and its log lines measurable.
class ServerProcess {
 public:
  ::testing::AssertionResult start(int open_files = 0) {
    const std::string tool = (test::build_dir() / "tools" / "c10d-store").string();
    if (!std::filesystem::exists(tool)) return ::testing::AssertionFailure() << tool << " missing";
    const auto port_file = dir_.path() / "port";
    std::vector<std::string> argv;
    if (open_files > 0) {
      argv = {"/bin/sh", "-c", "ulimit -n " + std::to_string(open_files) + R"( && exec "$0" "$@")"};
    }
    for (std::string arg : {tool, std::string("serve"), std::string("--port"), std::string("0"),
                            std::string("--port-file"), port_file.string()}) {
      argv.push_back(std::move(arg));
    }
    child_ = std::make_unique<test::ChildProcess>(
        argv, test::EnvChanges{{"C10D_STORE_TOKEN", std::nullopt}, {"C10D_LOG_LEVEL", "warn"}},
        dir_.path(), "serve");
    const auto deadline = test::Clock::now() + 10s;
    while (!std::filesystem::exists(port_file)) {
      if (!child_->running() || test::Clock::now() > deadline) {
        return ::testing::AssertionFailure() << "no port file; " << child_->describe();
      }
      std::this_thread::sleep_for(10ms);
    }
    port_ = static_cast<std::uint16_t>(std::stoi(test::read_file(port_file)));
    return ::testing::AssertionSuccess();
  }

  std::uint16_t port() const { return port_; }

  // VmRSS of the server process.
  std::size_t resident_bytes() const {
    std::ifstream status("/proc/" + std::to_string(child_->pid()) + "/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    }
    return 0;
  }

  // Stops it as an operator would (SIGTERM) and waits for it to exit.
  bool stop() {
    child_->send_signal(SIGTERM);
    const auto exit = child_->wait(test::Clock::now() + 10s);
    return exit.exited && exit.code == 0;
  }

  std::size_t log_lines() const { return test::occurrences(child_->err(), "\n"); }
  std::string log() const { return child_->err(); }

 private:
  test::TempDir dir_;
  std::unique_ptr<test::ChildProcess> child_;
  std::uint16_t port_ = 0;
};

// A 1.8 KB MULTI_GET naming one 1 MiB key 256 times would be a 256 MiB answer: it is refused,
// naming the limit, before anything is built, and the connection serves on. Four connections
// that send such requests and never read cost the server next to nothing.
TEST(ExhaustionTest, MultiGetOfOneLargeKeyManyTimesIsRefusedAndCostsNoMemory) {
  ServerProcess server;
  ASSERT_TRUE(server.start());
  TCPStore good(client_of(server.port()));
  good.set("big", Bytes(1u << 20, 7));
  ASSERT_EQ(good.get("big").size(), 1u << 20);
  const std::size_t rss_before = server.resident_bytes();

  {
    RawClient raw(server.port());
    raw.send(concat(RawClient::hello(), multi_get_request("big", 256)));
    ASSERT_TRUE(raw.read_answer(5s));
    auto a = raw.read_answer(5s);
    ASSERT_TRUE(a) << "no answer to the MULTI_GET";
    EXPECT_EQ(a->status, Status::kResponseTooLarge) << a->message();
    EXPECT_NE(a->message().find("over the limit of 68157440 bytes"), std::string::npos)
        << a->message();
    EXPECT_NE(a->message().find(std::to_string(5 + 256 * (4 + (1u << 20)))), std::string::npos)
        << a->message();
    raw.send(get_request("big"));  // the connection serves on
    a = raw.read_answer(5s);
    ASSERT_TRUE(a);
    EXPECT_EQ(a->status, Status::kOk);
    EXPECT_EQ(a->body.size(), 4u + (1u << 20));
  }

  // The client raises StoreError naming the limit, and its connection serves on.
  std::vector<std::string> keys(256, "big");
  try {
    good.multi_get(keys);
    ADD_FAILURE() << "a 256 MiB multi_get was served";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("limit of 68157440 bytes per answer"), std::string::npos)
        << e.what();
  }
  EXPECT_EQ(good.multi_get(std::vector<std::string>(3, "big")).size(), 3u);

  std::vector<std::unique_ptr<RawClient>> attackers;
  Bytes attack = RawClient::hello();
  for (int i = 0; i < 8; ++i) attack = concat(std::move(attack), multi_get_request("big", 256));
  for (int i = 0; i < 4; ++i) {
    attackers.push_back(std::make_unique<RawClient>(server.port(), 4096));
    attackers.back()->send(attack);  // and never read
  }
  std::size_t peak = 0;
  const auto until = std::chrono::steady_clock::now() + 2s;
  while (std::chrono::steady_clock::now() < until) {
    peak = std::max(peak, server.resident_bytes());
    std::this_thread::sleep_for(20ms);
  }
  EXPECT_LT(peak, rss_before + (32u << 20))
      << "the server's RSS grew from " << rss_before << " to " << peak;
  good.set("after", std::string_view("fine"));
  EXPECT_EQ(good.get_string("after"), "fine");
}

// 300 idle connections against a server that may open 256 files: it closes the oldest of
// those still in their handshake to make room, so a good client connecting afterwards shakes
// hands at once; and it logs a handful of lines, not one per connection or per failed accept.
TEST(ExhaustionTest, GoodClientIsServedUnderThreeHundredIdleConnections) {
  ServerProcess server;
  ASSERT_TRUE(server.start(/*open_files=*/256));
  std::vector<std::unique_ptr<RawClient>> idle;
  for (int i = 0; i < 300; ++i) idle.push_back(std::make_unique<RawClient>(server.port()));
  std::this_thread::sleep_for(300ms);  // the server accepts them all

  const auto start = std::chrono::steady_clock::now();
  {
    TCPStore good(client_of(server.port(), 4s));
    good.set("k", std::string_view("v"));
    EXPECT_EQ(good.get_string("k"), "v");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s);

  std::this_thread::sleep_for(2s);  // the attack goes on
  EXPECT_LE(server.log_lines(), 12u) << server.log();
  // It keeps at most its derived cap, 256 less an eighth (32), so the rest were closed.
  std::size_t closed = 0;
  for (auto& c : idle) closed += c->closed_now() ? 1 : 0;
  EXPECT_GE(closed, 300u - 224u);
  // What was not logged one by one is summed up: here when the server stops, else every 10 s.
  ASSERT_TRUE(server.stop()) << server.log();
  EXPECT_NE(server.log().find("more connections closed in their handshake to make room"),
            std::string::npos)
      << server.log();
}

// Buffers grown for a large frame are given back once it is done: the input buffer after a
// 8 MiB SET, the output buffer after a 8 MiB GET's answer is written.
TEST(ExhaustionTest, ConnectionBuffersAreGivenBackAfterLargeFrames) {
  TCPStoreServer server(store::ServerOptions{});
  TCPStore store(client_of(server.port()));
  store.set("big", Bytes(8u << 20, 3));
  EXPECT_EQ(store.check(std::vector<std::string>{"big"}), true);
  EXPECT_TRUE(eventually([&] { return server.stats().buffer_bytes < (256u << 10); }))
      << server.stats().buffer_bytes << " bytes still buffered after a large SET";
  EXPECT_EQ(store.get("big").size(), 8u << 20);
  EXPECT_TRUE(eventually([&] { return server.stats().buffer_bytes < (256u << 10); }))
      << server.stats().buffer_bytes << " bytes still buffered after a large GET";
  EXPECT_EQ(server.stats().pending_output_bytes, 0u);
}

// The client gives its own buffers back too: a 48 MiB set and get leave the client's process
// no larger than before (the server is in a child process, so the RSS is the client's).
TEST(ExhaustionTest, ClientBuffersAreGivenBackAfterLargeFrames) {
  ServerProcess server;
  ASSERT_TRUE(server.start());
  TCPStore store(client_of(server.port()));
  store.set("warm", std::string_view("up"));
  EXPECT_EQ(store.get_string("warm"), "up");
  const std::size_t before = resident_bytes();
  store.set("big", Bytes(48u << 20, 1));
  EXPECT_LT(resident_bytes(), before + (16u << 20)) << "the set's buffer was kept";
  EXPECT_EQ(store.get("big").size(), 48u << 20);
  EXPECT_LT(resident_bytes(), before + (16u << 20)) << "the get's buffer was kept";
}

// Answers that clients do not read: at most max_pending_output_bytes of them are held in all
// (here one 16 MiB answer); a further large answer waits for room, then is refused with
// kBusy naming the limit; a connection whose answer stays unread past write_timeout is closed;
// and once they are gone a good client is served.
TEST(ExhaustionTest, UnreadAnswersAreBoundedInTotalAndTheirConnectionsClosed) {
  // The kernel must not take a whole 16 MiB answer into a send buffer (4 MiB at most by
  // default), or no answer stays unread in the server.
  std::ifstream wmem("/proc/sys/net/ipv4/tcp_wmem");
  std::size_t wmem_min = 0, wmem_default = 0, wmem_max = 0;
  wmem >> wmem_min >> wmem_default >> wmem_max;
  if (wmem_max > (8u << 20)) GTEST_SKIP() << "tcp_wmem allows send buffers of " << wmem_max;
  store::ServerOptions o;
  o.limits.max_value_bytes = 16u << 20;
  o.limits.max_frame_bytes = 17u << 20;
  o.limits.max_response_bytes = 17u << 20;
  o.max_pending_output_bytes = 17u << 20;
  o.write_timeout = 1000ms;
  TCPStoreServer server(o);
  TCPStore good(client_of(server.port()));
  good.set("big", Bytes(16u << 20, 5));
  ASSERT_TRUE(good.check(std::vector<std::string>{"big"}));
  const std::size_t rss_before = resident_bytes();

  // Small receive buffers: the answers stay in the server, not in the kernel.
  const Bytes attack = concat(RawClient::hello(), get_request("big"));
  auto first = std::make_unique<RawClient>(server.port(), 4096);
  first->send(attack);
  ASSERT_TRUE(eventually([&] { return server.stats().pending_output_bytes >= (16u << 20); }));
  auto second = std::make_unique<RawClient>(server.port(), 4096);
  second->send(attack);  // waits for room; gets it when `first` is closed, at 1 s
  std::this_thread::sleep_for(200ms);
  std::vector<std::unique_ptr<RawClient>> more;
  for (int i = 0; i < 6; ++i) {
    more.push_back(std::make_unique<RawClient>(server.port(), 4096));
    more.back()->send(attack);
  }

  // A good client asking while `second` holds the room: refused after 1 s of waiting.
  TCPStore late(client_of(server.port()));
  std::size_t peak_pending = 0, peak_rss = 0;
  std::thread watch([&] {
    const auto until = std::chrono::steady_clock::now() + 2500ms;
    while (std::chrono::steady_clock::now() < until) {
      peak_pending = std::max<std::size_t>(peak_pending, server.stats().pending_output_bytes);
      peak_rss = std::max(peak_rss, resident_bytes());
      std::this_thread::sleep_for(10ms);
    }
  });
  try {
    late.get("big");
    ADD_FAILURE() << "the answer was built beyond the limit on unread answers";
  } catch (const StoreError& e) {
    EXPECT_NE(std::string(e.what()).find("max_pending_output_bytes"), std::string::npos)
        << e.what();
  }
  watch.join();
  EXPECT_LE(peak_pending, 17u << 20);
  EXPECT_LT(peak_rss, rss_before + (40u << 20))
      << "RSS grew from " << rss_before << " to " << peak_rss;

  EXPECT_TRUE(eventually([&] { return server.stats().connections_stalled >= 2; }))
      << server.stats().connections_stalled;
  EXPECT_TRUE(first->closed_by_server(3s));
  EXPECT_TRUE(eventually([&] { return server.stats().pending_output_bytes == 0; }));
  EXPECT_EQ(late.get("big").size(), 16u << 20);  // the same connection serves on
}

// At its cap, a server whose connections have all shaken hands closes a new one at once; one
// still in its handshake is closed to make room for a newcomer instead.
TEST(ExhaustionTest, ConnectionsOverTheCapAreClosed) {
  store::ServerOptions o;
  o.max_connections = 8;
  TCPStoreServer server(o);
  std::vector<std::unique_ptr<RawClient>> ready;
  for (int i = 0; i < 8; ++i) {
    ready.push_back(std::make_unique<RawClient>(server.port()));
    ready.back()->send(RawClient::hello());
    ASSERT_TRUE(ready.back()->read_answer(3s));
  }
  RawClient late(server.port());
  EXPECT_TRUE(late.closed_by_server(2s));
  EXPECT_EQ(server.stats().connections_refused, 1u);
  {
    TCPStoreOptions c = client_of(server.port(), 3s);
    c.use_local_socket = false;
    EXPECT_THROW(TCPStore refused(c), StoreError);  // told at once, not left to time out
  }

  ready.pop_back();
  ASSERT_TRUE(eventually([&] { return server.stats().connections_open == 7; }));
  RawClient idle(server.port());  // takes the last place, and never shakes hands
  ASSERT_TRUE(eventually([&] { return server.stats().connections_open == 8; }));
  TCPStoreOptions c = client_of(server.port());
  c.use_local_socket = false;
  TCPStore good(c);
  EXPECT_EQ(good.add("n", 1), 1);
  EXPECT_TRUE(idle.closed_by_server(2s));
  EXPECT_EQ(server.stats().connections_evicted, 1u);
  for (auto& r : ready) {
    r->send(request(Kind::kNumKeys, [](Bytes&) {}));
    auto a = r->read_answer(3s);
    ASSERT_TRUE(a) << "a connection that had shaken hands was closed";
    EXPECT_EQ(a->status, Status::kOk);
  }
}

// Near the cap (3/4 of it), a connection still in its handshake after busy_handshake_timeout
// is closed when the next one arrives, long before handshake_timeout.
TEST(ExhaustionTest, NearTheCapSlowHandshakesAreClosedEarly) {
  store::ServerOptions o;
  o.max_connections = 8;
  o.busy_handshake_timeout = 200ms;
  TCPStoreServer server(o);
  std::vector<std::unique_ptr<RawClient>> slow;
  for (int i = 0; i < 6; ++i) slow.push_back(std::make_unique<RawClient>(server.port()));
  ASSERT_TRUE(eventually([&] { return server.stats().connections_open == 6; }));
  std::this_thread::sleep_for(300ms);
  TCPStore good(client_of(server.port()));
  EXPECT_EQ(good.add("n", 1), 1);
  for (auto& s : slow) EXPECT_TRUE(s->closed_by_server(2s));
  EXPECT_EQ(server.stats().connections_evicted, 6u);
}

// A SET of `value_bytes` on key `key`, without its last byte: the server has a nearly complete
// frame to hold and waits for the rest.
Bytes set_without_last_byte(const std::string& key, std::size_t value_bytes) {
  Bytes frame = request(Kind::kSet, [&](Bytes& f) {
    store::wire::put_string(f, key);
    store::wire::put_bytes(f, Bytes(value_bytes, 9));
  });
  frame.pop_back();
  return frame;
}

// Twelve connections each send all but the last byte of an 8 MiB SET. Without a bound the
// server would hold all twelve frames (96 MiB; 900 connections of 65 MiB frames by default).
// It holds room for two (max_pending_input_bytes); the others are not read and, after
// read_timeout, closed; those that got room and then stalled are closed read_timeout after
// their last byte. Small requests of a good client are served throughout, and once the attack
// is gone a large one is too.
TEST(ExhaustionTest, PartialLargeRequestsAreBoundedInTotalAndClosed) {
  store::ServerOptions o;
  o.limits.max_value_bytes = 8u << 20;
  o.limits.max_frame_bytes = 9u << 20;
  o.limits.max_response_bytes = 9u << 20;
  o.max_pending_input_bytes = 18u << 20;  // two frames
  o.read_timeout = 1500ms;
  TCPStoreServer server(o);
  TCPStore good(client_of(server.port()));
  good.set("warm", std::string_view("up"));
  ASSERT_EQ(good.get_string("warm"), "up");
  const Bytes attack = concat(RawClient::hello(), set_without_last_byte("big", 8u << 20));
  const std::size_t rss_before = resident_bytes();

  constexpr int kAttackers = 12;
  std::vector<std::unique_ptr<RawClient>> attackers;
  for (int i = 0; i < kAttackers; ++i) {
    attackers.push_back(std::make_unique<RawClient>(server.port()));
  }
  // Each on its own thread: a connection the server does not read blocks its sender until the
  // kernel's buffers take the rest or the server closes it.
  std::vector<std::thread> senders;
  for (auto& a : attackers) senders.emplace_back([&a, &attack] { a->send(attack); });

  std::atomic<bool> watching{true};
  std::size_t peak_input = 0, peak_buffers = 0, peak_rss = 0;
  std::thread watch([&] {
    while (watching) {
      const auto st = server.stats();
      peak_input = std::max<std::size_t>(peak_input, st.pending_input_bytes);
      peak_buffers = std::max<std::size_t>(peak_buffers, st.buffer_bytes);
      peak_rss = std::max(peak_rss, resident_bytes());
      std::this_thread::sleep_for(5ms);
    }
  });
  // The attack in place: as much as it may hold is held.
  EXPECT_TRUE(eventually([&] { return server.stats().pending_input_bytes >= (16u << 20); }, 3s))
      << server.stats().pending_input_bytes;
  std::this_thread::sleep_for(300ms);
  {
    const auto start = std::chrono::steady_clock::now();
    good.set("small", std::string_view("served"));
    EXPECT_EQ(good.get_string("small"), "served");
    EXPECT_EQ(good.add("n", 1), 1);
    EXPECT_LT(std::chrono::steady_clock::now() - start, 500ms)
        << "small requests waited behind the large ones";
  }
  watching = false;
  watch.join();
  EXPECT_LE(peak_input, 18u << 20);
  EXPECT_LT(peak_buffers, (18u << 20) + (1u << 20))
      << "the server buffered " << peak_buffers << " bytes of partial requests";
  // The two frames, and what the allocator keeps of the buffers they grew through.
  EXPECT_LT(peak_rss, rss_before + (48u << 20))
      << "RSS grew from " << rss_before << " to " << peak_rss;

  for (auto& a : attackers) EXPECT_TRUE(a->closed_by_server(6s));
  for (auto& t : senders) t.join();
  const auto st = server.stats();
  EXPECT_GE(st.connections_read_stalled, 2u);
  EXPECT_GE(st.connections_starved, 1u);
  EXPECT_EQ(st.connections_read_stalled + st.connections_starved, std::uint64_t{kAttackers});
  EXPECT_TRUE(eventually([&] { return server.stats().pending_input_bytes == 0; }));
  EXPECT_FALSE(good.check(std::vector<std::string>{"big"}));  // no partial SET was applied
  good.set("big", Bytes(8u << 20, 4));
  EXPECT_EQ(good.get("big").size(), 8u << 20);
}

// A large request that finds no room waits, unread, and is served as soon as room frees: here
// when the connection holding it stalls and is closed.
TEST(ExhaustionTest, LargeRequestWaitsForRoomAndIsServedWhenItFrees) {
  store::ServerOptions o;
  o.limits.max_value_bytes = 4u << 20;
  o.limits.max_frame_bytes = 5u << 20;
  o.limits.max_response_bytes = 5u << 20;
  o.max_pending_input_bytes = 5u << 20;  // one frame
  o.read_timeout = 800ms;
  TCPStoreServer server(o);
  RawClient holder(server.port());
  holder.send(concat(RawClient::hello(), set_without_last_byte("held", 4u << 20)));
  ASSERT_TRUE(eventually([&] { return server.stats().pending_input_bytes > 0; }));
  std::this_thread::sleep_for(100ms);

  TCPStore good(client_of(server.port()));
  const auto start = std::chrono::steady_clock::now();
  good.set("big", Bytes(4u << 20, 6));
  EXPECT_TRUE(good.check(std::vector<std::string>{"big"}));  // answered once the SET is served
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_GE(waited, 400ms) << "the SET did not wait for room";
  EXPECT_LT(waited, 3s);
  EXPECT_TRUE(holder.closed_by_server(1s));
  EXPECT_EQ(server.stats().connections_read_stalled, 1u);
  EXPECT_EQ(server.stats().connections_starved, 0u);
  EXPECT_EQ(good.get("big").size(), 4u << 20);
  EXPECT_FALSE(good.check(std::vector<std::string>{"held"}));
}

// A connection whose begun frame stops arriving is closed read_timeout after its last byte,
// whether it stopped in the header or in the body; one that keeps sending, however slowly, or
// that idles between frames, is served.
TEST(ExhaustionTest, RequestStalledMidFrameIsClosed) {
  store::ServerOptions o;
  o.read_timeout = 700ms;
  TCPStoreServer server(o);
  const Bytes get = get_request("k");
  std::vector<std::unique_ptr<RawClient>> stalled;
  for (std::size_t cut : {std::size_t{5}, get.size() - 1}) {  // in the header; in the body
    stalled.push_back(std::make_unique<RawClient>(server.port()));
    stalled.back()->send(concat(RawClient::hello(), Bytes(get.begin(), get.begin() + cut)));
    ASSERT_TRUE(stalled.back()->read_answer(3s));
  }
  RawClient idle(server.port());
  idle.send(RawClient::hello());
  ASSERT_TRUE(idle.read_answer(3s));
  RawClient slow(server.port());
  slow.send(RawClient::hello());
  ASSERT_TRUE(slow.read_answer(3s));
  const Bytes num_keys = request(Kind::kNumKeys, [](Bytes&) {});

  // `slow` sends one byte every 100 ms: 16 bytes over 1.6 s, far past the timeout in all.
  for (std::uint8_t b : num_keys) {
    slow.send(Bytes{b});
    std::this_thread::sleep_for(100ms);
  }
  auto a = slow.read_answer(3s);
  ASSERT_TRUE(a) << "a slow but steady request was not served";
  EXPECT_EQ(a->status, Status::kOk);
  for (auto& s : stalled) EXPECT_TRUE(s->closed_now());
  idle.send(num_keys);
  a = idle.read_answer(3s);
  ASSERT_TRUE(a) << "a connection idle between frames was closed";
  EXPECT_EQ(a->status, Status::kOk);
  EXPECT_EQ(server.stats().connections_read_stalled, 2u);
}

}  // namespace
}  // namespace c10d::inline v1
