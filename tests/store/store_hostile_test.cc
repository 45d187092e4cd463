// Hostile input against a live TCP store server: garbage, truncated frames, absurd lengths,
// the wrong magic, an old version and a wrong token. Each closes only its own connection; a
// well-behaved client of the same server keeps getting correct answers, and no claimed size is
// ever allocated.
#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <random>
#include <thread>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "raw_client.h"
#include "store/tcp_store_server.h"
#include "store/wire.h"

namespace c10d {
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

}  // namespace
}  // namespace c10d
