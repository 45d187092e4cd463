// The TCP transport's handshake against strangers (stranger.h: a client or listener of this
// test that knows the group name, world size and ranks but not the job's secret) and against
// mismatched ranks, with ranks as threads over a HashStore. A stranger never takes a rank's
// place and learns nothing of the job, whether it comes during set-up or later, while a rank
// that connects on first use still listens; a rank that meets one at a published address fails
// naming the rank and the address (during set-up when it connects eagerly, at the request that
// first needs the peer when lazily); refused connections are logged by address, rate-limited.
#include "backends/gloo_like/tcp_handshake.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <latch>
#include <string>
#include <thread>

#include "../algorithms/ranks.h"
#include "algorithms/ring_all_reduce.h"
#include "backends/gloo_like/tcp_transport.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "core/logging.h"
#include "stranger.h"
#include "transport_test_util.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;
using c10d::testing::pattern;
using c10d::testing::soon;
using testing::claim_rank;
using testing::port_of;
using testing::StrangerListener;
using testing::StrangerSocket;
using transport::Clock;

class HandshakeTest : public ::testing::Test {
 protected:
  // The job's secret comes from the store here, never from the test's environment.
  void SetUp() override { ::unsetenv("C10D_STORE_TOKEN"); }
};

// Two ranks of `group` that meet after strangers have tried rank 0 (during its set-up: an eager
// rank 0 waits to accept rank 1, a lazy one for rank 1's address): rank 0 starts at once and
// waits for rank 1; meet() starts rank 1, which sends rank 0 a 100-byte message, then both
// all_reduce 1000 floats, and checks both arrived exact.
class TwoRanks {
 public:
  TwoRanks(std::shared_ptr<HashStore> store, std::string group, Milliseconds setup,
           TCPConnect mode = TCPConnect::kLazy)
      : store_(std::move(store)), group_(std::move(group)), setup_(setup), mode_(mode) {
    rank0_ = std::jthread([this] { run(0); });
  }

  // Where rank 0 listens, once it has published it.
  std::uint16_t rank0_port() const { return port_of(store_->get_string(group_ + "/addr/0")); }

  void meet() {
    std::jthread rank1([this] { run(1); });
    rank0_.join();
    rank1.join();
    for (auto& e : errors_) {
      if (e) std::rethrow_exception(e);
    }
    EXPECT_EQ(got_, pattern(100, 4));
    for (int r = 0; r < 2; ++r) {
      for (std::int64_t i = 0; i < kCount; ++i) {
        ASSERT_EQ(sums_[r][i],
                  static_cast<float>(algorithms::testing::expected(ReduceOp::kSum, 2, i)))
            << "rank " << r << " element " << i;
      }
    }
  }

 private:
  static constexpr std::int64_t kCount = 1000;

  void run(int rank) {
    try {
      TCPTransportOptions options{"127.0.0.1", setup_};
      options.connect = mode_;
      TCPTransport t(store_, rank, 2, group_, options);
      if (rank == 0) {
        t.irecv(1, 3, got_)->wait(soon());
      } else {
        t.isend(0, 3, pattern(100, 4))->wait(soon());
      }
      std::vector<float>& data = sums_[rank];
      data.resize(kCount);
      for (std::int64_t i = 0; i < kCount; ++i) {
        data[i] = static_cast<float>(algorithms::testing::value(rank, i));
      }
      algorithms::ring_all_reduce(algorithms::testing::context(t), DType::kFloat32,
                                  {ReduceOp::kSum, 1.0}, data.data(), kCount, {});
    } catch (...) {
      errors_[rank] = std::current_exception();
    }
  }

  std::shared_ptr<HashStore> store_;
  std::string group_;
  Milliseconds setup_;
  TCPConnect mode_;
  std::vector<std::byte> got_ = std::vector<std::byte>(100);
  std::vector<float> sums_[2];
  std::exception_ptr errors_[2];
  std::jthread rank0_;
};

TCPTransportOptions options_of(TCPConnect mode, Milliseconds timeout) {
  TCPTransportOptions o{"127.0.0.1", timeout};
  o.connect = mode;
  return o;
}

// Sets up rank `rank` of 2 in `group` with `mode`, and, connecting lazily, sends rank 0 a byte
// (rank 1) or waits for one from rank 1 (rank 0): where an eager rank's set-up meets a fault,
// a lazy rank's first request does.
void set_up_and_use(std::shared_ptr<Store> store, int rank, const std::string& group,
                    TCPTransportOptions options) {
  const bool lazy = options.connect == TCPConnect::kLazy;
  TCPTransport t(std::move(store), rank, 2, group, std::move(options));
  if (!lazy) return;
  std::vector<std::byte> byte(1);
  if (rank == 1) {
    t.isend(0, 1, byte)->wait(soon());
  } else {
    t.irecv(1, 1, byte)->wait(soon());
  }
}

// What `fn` throws as E (failing the test when it throws nothing, or something else). Nothing
// escapes: a test's threads are still joinable while it runs.
template <typename E, typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not the error expected: " << e.what();
    return e.what();
  } catch (...) {
    ADD_FAILURE() << "an exception of unknown type";
    return {};
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

TEST_F(HandshakeTest, AStrangerThatKnowsAllButTheSecretNeverTakesARanksPlace) {
  for (const TCPConnect mode : {TCPConnect::kEager, TCPConnect::kLazy}) {
    TwoRanks ranks(std::make_shared<HashStore>(20s), "claim", 20s, mode);
    StrangerSocket s = StrangerSocket::connect_to(ranks.rank0_port());
    ASSERT_TRUE(s.connected());
    const testing::ClaimResult claim = claim_rank(s, {2, 1, "claim"}, 0);
    // The challenge is a nonce and nothing of the job; after the proof, not a byte.
    ASSERT_EQ(claim.challenge.size(), kGreetingBytes);
    Nonce nonce;
    EXPECT_TRUE(decode_greeting(claim.challenge, nonce).ok());
    EXPECT_TRUE(claim.after_proof.empty()) << claim.after_proof.size() << " bytes came back";
    EXPECT_TRUE(claim.closed) << "the rank kept the stranger's connection";
    ranks.meet();  // the real rank 1 still joins, and its bytes and sums arrive exact
  }
}

TEST_F(HandshakeTest, RandomBytesAWrongMagicOrAnotherVersionGetNoJobInformation) {
  TwoRanks ranks(std::make_shared<HashStore>(20s), "nosy", 20s);
  const std::uint16_t port = ranks.rank0_port();
  const auto answer_to = [&](std::span<const std::byte> sent) {
    StrangerSocket s = StrangerSocket::connect_to(port);
    EXPECT_TRUE(s.connected());
    s.send(sent);
    std::vector<std::byte> got = s.read_to_end();
    EXPECT_TRUE(s.closed());
    return got;
  };
  std::vector<std::byte> noise(200);
  for (std::size_t i = 0; i < noise.size(); ++i) noise[i] = std::byte((i * 97 + 13) & 0xff);
  EXPECT_TRUE(answer_to(noise).empty());

  std::vector<std::byte> wrong_magic = encode_greeting(new_nonce());
  wrong_magic[0] = std::byte{'X'};
  EXPECT_TRUE(answer_to(wrong_magic).empty());

  // The version 2 handshake: magic, version, world size, rank, group name in the clear. The
  // answer is the version notice alone: no world size, rank or group name.
  std::vector<std::byte> v2;
  put_le(v2, kHandshakeMagic);
  put_le(v2, std::uint16_t{2});
  put_le(v2, std::uint32_t{2});
  put_le(v2, std::uint32_t{1});
  put_le(v2, std::uint32_t{4});
  for (char c : std::string("nosy")) v2.push_back(static_cast<std::byte>(c));
  EXPECT_EQ(answer_to(v2), encode_version_notice());

  std::vector<std::byte> next = encode_greeting(new_nonce());
  next[4] = std::byte{kHandshakeVersion + 1};
  EXPECT_EQ(answer_to(next), encode_version_notice());
  ranks.meet();
}

// A rank of another group that finds this rank's address connects, and each side refuses the
// other with the two group names (both groups share the store, and so its job secret); the
// accepting rank goes on to meet its real peer.
TEST_F(HandshakeTest, ARankOfAnotherGroupIsRefusedOnBothSidesNamingBothGroups) {
  auto store = std::make_shared<HashStore>(20s);
  TwoRanks ranks(store, "blue", 20s);
  store->set("green/addr/0", store->get_string("blue/addr/0"));
  for (const TCPConnect mode : {TCPConnect::kEager, TCPConnect::kLazy}) {
    const std::string what =
        message_of<NetworkError>([&] { set_up_and_use(store, 1, "green", options_of(mode, 5s)); });
    EXPECT_NE(what.find("peer is in group \"blue\""), std::string::npos) << what;
    EXPECT_NE(what.find("this rank is in group \"green\""), std::string::npos) << what;
  }
  ranks.meet();
}

// Connections that send nothing, half a hello, or a hello and then nothing, and stay open must
// not hold up the real peer that connects after them: its handshake is read as it arrives.
TEST_F(HandshakeTest, SilentStrangersDoNotHoldUpARealPeer) {
  for (const TCPConnect mode : {TCPConnect::kEager, TCPConnect::kLazy}) {
    TwoRanks ranks(std::make_shared<HashStore>(20s), "silent", 10s, mode);
    const std::uint16_t port = ranks.rank0_port();
    StrangerSocket silent = StrangerSocket::connect_to(port);
    StrangerSocket half_said = StrangerSocket::connect_to(port);
    StrangerSocket no_proof = StrangerSocket::connect_to(port);
    ASSERT_TRUE(silent.connected() && half_said.connected() && no_proof.connected());
    const auto hello = encode_greeting(new_nonce());
    ASSERT_TRUE(half_said.send(std::span(hello).first(hello.size() / 2)));
    ASSERT_TRUE(no_proof.send(hello));
    EXPECT_EQ(no_proof.read_n(kGreetingBytes).size(), kGreetingBytes);
    const auto start = Clock::now();
    ranks.meet();
    EXPECT_LT(Clock::now() - start, 5s) << "the real peer waited behind the strangers";
  }
}

// A listener planted at a rank's address in an open store (no token), playing rank 0 in
// different ways; rank 1 connects to it first and must fail naming itself and the address.
enum class Planted { kOwnKey, kCloseAfterProof, kGarbage, kNewerVersion };

std::string planted_error(Planted how, TCPConnect mode) {
  auto store = std::make_shared<HashStore>(20s);
  StrangerListener listener;
  const std::string group =
      fmt::format("planted{}{}", static_cast<int>(how), mode == TCPConnect::kLazy ? "lazy" : "");
  store->set(group + "/addr/0", listener.address());
  std::jthread stranger([&] {
    StrangerSocket s = listener.accept();
    Nonces nonces;
    if (decode_greeting(s.read_n(kGreetingBytes), nonces.connector).code != HandshakeCode::kOk) {
      return;
    }
    if (how == Planted::kGarbage) {
      s.send(pattern(64, 1));
      s.read_to_end(5s);
      return;
    }
    if (how == Planted::kNewerVersion) {
      auto notice = encode_version_notice();
      notice[4] = std::byte{kHandshakeVersion + 1};
      s.send(notice);
      return;
    }
    nonces.acceptor = new_nonce();
    s.send(encode_greeting(nonces.acceptor));
    // The proof: fixed part, the group name, the MAC.
    s.read_n(kProofFixedBytes + group.size() + core::kMacBytes);
    if (how == Planted::kOwnKey) {
      s.send(
          encode_accept({{2, 0, group}, AcceptStatus::kAccepted}, testing::stranger_key(), nonces));
      s.read_to_end(5s);
    }
  });
  const auto start = Clock::now();
  std::string what =
      message_of<NetworkError>([&] { set_up_and_use(store, 1, group, options_of(mode, 10s)); });
  EXPECT_LT(Clock::now() - start, 5s) << "rank 1 waited for its deadline";
  stranger.join();
  const std::string prefix = "rank 1: ";
  EXPECT_EQ(what.rfind(prefix, 0), 0u) << what;
  EXPECT_NE(what.find(listener.address()), std::string::npos) << what;
  return what;
}

TEST_F(HandshakeTest, AStrangerAtAPublishedAddressIsNotJoinedAndIsNamed) {
  for (const TCPConnect mode : {TCPConnect::kEager, TCPConnect::kLazy}) {
    std::string what = planted_error(Planted::kOwnKey, mode);
    EXPECT_NE(what.find("published as rank 0's address, did not prove it belongs to this job"),
              std::string::npos)
        << what;
    what = planted_error(Planted::kCloseAfterProof, mode);
    EXPECT_NE(what.find("published as rank 0's address, closed the connection instead of "
                        "accepting this rank's proof"),
              std::string::npos)
        << what;
    what = planted_error(Planted::kGarbage, mode);
    EXPECT_NE(what.find("published as rank 0's address, is not a c10d rank: bad magic"),
              std::string::npos)
        << what;
    what = planted_error(Planted::kNewerVersion, mode);
    EXPECT_NE(what.find(fmt::format("speaks transport handshake version {}, this rank speaks "
                                    "version {}",
                                    kHandshakeVersion + 1, kHandshakeVersion)),
              std::string::npos)
        << what;
  }
}

// Each rank's published port in `group`: nothing listens there.
void probe_closed_ports(Store& store, const std::string& group) {
  for (int r = 0; r < 2; ++r) {
    const std::uint16_t port = port_of(store.get_string(group + "/addr/" + std::to_string(r)));
    StrangerSocket s = StrangerSocket::connect_to(port);
    const int err = errno;
    EXPECT_FALSE(s.connected()) << "rank " << r << " still listens on " << port;
    EXPECT_EQ(err, ECONNREFUSED) << std::strerror(err);
  }
}

// The listener closes once every peer has connected (an eager transport: when setup ends):
// nothing can connect to a running transport to inject frames; the ranks' own connections
// carry on. A lazy pair has connected once each rank has sent to the other.
void expect_nothing_listens_once_connected(TCPConnect mode) {
  auto store = std::make_shared<HashStore>(20s);
  const std::string group = mode == TCPConnect::kLazy ? "closed_lazy" : "closed";
  std::unique_ptr<TCPTransport> t[2];
  std::exception_ptr errors[2];
  std::latch made(2), checked(1);
  std::vector<std::byte> got(64);
  {
    // Joined before the latches and buffers they use go, whatever the test body does.
    std::jthread threads[2];
    for (int r = 0; r < 2; ++r) {
      threads[r] = std::jthread([&, r] {
        try {
          t[r] = std::make_unique<TCPTransport>(store, r, 2, group, options_of(mode, 20s));
          if (mode == TCPConnect::kLazy) {
            std::vector<std::byte> hello(1);
            auto in = t[r]->irecv(1 - r, 4, hello);
            t[r]->isend(1 - r, 4, hello)->wait(soon());
            in->wait(soon());
            // The peer's connection is here; its listener closes as it attaches the last one.
            const auto until = Clock::now() + 5s;
            while (t[r]->connections().made.size() + t[r]->connections().accepted.size() < 2 &&
                   Clock::now() < until) {
              std::this_thread::sleep_for(1ms);
            }
          }
        } catch (...) {
          errors[r] = std::current_exception();
        }
        made.count_down();
        if (!t[r]) return;
        checked.wait();
        try {
          if (r == 0) {
            t[r]->irecv(1, 5, got)->wait(soon());
          } else {
            t[r]->isend(0, 5, pattern(64, 9))->wait(soon());
          }
        } catch (...) {
          errors[r] = std::current_exception();
        }
        t[r].reset();
      });
    }
    made.wait();
    try {
      if (t[0] && t[1]) probe_closed_ports(*store, group);
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();  // and the ranks go on: they wait for `checked`
    }
    checked.count_down();
  }
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  EXPECT_EQ(got, pattern(64, 9));
}

TEST_F(HandshakeTest, NothingListensOnceEveryPeerHasConnected) {
  expect_nothing_listens_once_connected(TCPConnect::kEager);
  expect_nothing_listens_once_connected(TCPConnect::kLazy);
}

// A port that nothing listens on (bound, read, released).
std::uint16_t closed_port() {
  StrangerListener l;
  return l.port();
}

// Eagerly in set-up, lazily in the request that first needs the peer: either fails within a
// few seconds, naming this rank, the peer and its address.
TEST_F(HandshakeTest, ConnectFailuresNameTheRankAndTheAddress) {
  for (const TCPConnect mode : {TCPConnect::kEager, TCPConnect::kLazy}) {
    const std::string g = mode == TCPConnect::kLazy ? "lazy" : "eager";
    auto store = std::make_shared<HashStore>(20s);
    const std::string addr = "127.0.0.1:" + std::to_string(closed_port());
    store->set(g + "refused/addr/0", addr);
    const auto start = Clock::now();
    std::string what = message_of<NetworkError>(
        [&] { set_up_and_use(store, 1, g + "refused", options_of(mode, 20s)); });
    EXPECT_EQ(what.rfind("rank 1: cannot connect to rank 0 at " + addr + ": Connection refused", 0),
              0u)
        << what;
    EXPECT_LT(Clock::now() - start, 10s)
        << "a refused connect is retried briefly, not until the deadline";

    store->set(g + "garbled/addr/0", "not an address");
    what = message_of<NetworkError>(
        [&] { set_up_and_use(store, 1, g + "garbled", options_of(mode, 5s)); });
    EXPECT_NE(what.find(fmt::format("rank 1: rank 0's address in the store ('{}garbled/addr/0') "
                                    "is \"not an address\", not host:port",
                                    g)),
              std::string::npos)
        << what;
  }
}

// Rank 1's reads of rank 0's address key, in order: the first gets what the key held (a stale
// address from an earlier run) and tells the test, which starts rank 0 only then; the second
// waits until rank 0 has published its address. So rank 1 meets the stale address first
// however loaded the machine, and its retry window does not race rank 0's start.
class StaleAddressStore : public HashStore {
 public:
  StaleAddressStore(std::string key, std::string stale)
      : HashStore(20s), key_(std::move(key)), stale_(std::move(stale)) {
    HashStore::set(key_, std::string_view(stale_));
  }
  Bytes get(std::string_view key) override {
    if (key != key_) return HashStore::get(key);
    const int read = ++reads_;
    Bytes value = HashStore::get(key);
    if (read == 1) {
      first_read_.count_down();
      return value;
    }
    const auto until = Clock::now() + 20s;
    while (std::string(value.begin(), value.end()) == stale_ && Clock::now() < until) {
      std::this_thread::sleep_for(5ms);
      value = HashStore::get(key);
    }
    return value;
  }
  // Whether rank 1 has read the stale address within `within`.
  bool read_once(std::chrono::milliseconds within) {
    const auto until = Clock::now() + within;
    while (!first_read_.try_wait()) {
      if (Clock::now() >= until) return false;
      std::this_thread::sleep_for(1ms);
    }
    return true;
  }
  int reads() const { return reads_.load(); }

 private:
  const std::string key_;
  const std::string stale_;
  std::atomic<int> reads_{0};
  std::latch first_read_{1};
};

// A refused connect is tried again, with the address read again: a rank whose key still held a
// stale address from an earlier run joins once its peer publishes the new one.
TEST_F(HandshakeTest, ARefusedConnectIsRetriedWithTheAddressReadAgain) {
  const std::string stale = "127.0.0.1:" + std::to_string(closed_port());
  auto store = std::make_shared<StaleAddressStore>("stale/addr/0", stale);
  std::exception_ptr error;
  std::vector<std::byte> got(10);
  std::jthread rank1([&] {
    try {
      TCPTransport t(store, 1, 2, "stale", {"127.0.0.1", 20s});
      t.isend(0, 1, pattern(10, 2))->wait(soon());
    } catch (...) {
      error = std::current_exception();
    }
  });
  ASSERT_TRUE(store->read_once(20s)) << "rank 1 never read rank 0's address";
  {
    TCPTransport rank0(store, 0, 2, "stale", {"127.0.0.1", 20s});
    rank0.irecv(1, 1, got)->wait(soon());
  }
  rank1.join();
  if (error) std::rethrow_exception(error);
  EXPECT_EQ(got, pattern(10, 2));
  EXPECT_GE(store->reads(), 2) << "the address was not read again";
}

// Ranks that were given different secrets cannot join: the connecting one is told its proof was
// not accepted, the accepting one refuses it; the connecting one records its failure in the
// store, so the accepting one stops waiting at once, naming it, instead of at its timeout (an
// eager set-up; lazily the first request fails alike, as the planted listener's tests show).
TEST_F(HandshakeTest, RanksWithDifferentTokensRefuseEachOther) {
  auto store = std::make_shared<HashStore>(20s);
  std::string rank0_error;
  const auto start = Clock::now();
  std::jthread rank0([&] {
    rank0_error = message_of<NetworkError>([&] {
      TCPTransportOptions o = options_of(TCPConnect::kEager, 20s);
      o.token = "first secret";
      TCPTransport t(store, 0, 2, "tokens", o);
    });
  });
  TCPTransportOptions o = options_of(TCPConnect::kEager, 20s);
  o.token = "second secret";
  const std::string what =
      message_of<NetworkError>([&] { TCPTransport t(store, 1, 2, "tokens", o); });
  rank0.join();
  EXPECT_LT(Clock::now() - start, 10s);
  EXPECT_NE(what.find("closed the connection instead of accepting this rank's proof"),
            std::string::npos)
      << what;
  EXPECT_NE(rank0_error.find("rank 0: the set-up of group 'tokens' failed on rank 1: "),
            std::string::npos)
      << rank0_error;
  EXPECT_NE(rank0_error.find("closed the connection instead of accepting this rank's proof"),
            std::string::npos)
      << rank0_error;
}

// Collects what this process writes to stderr (where the log goes) while it lives.
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    saved_ = ::dup(STDERR_FILENO);
    char name[] = "/tmp/c10d_stderr_XXXXXX";
    file_ = ::mkstemp(name);
    ::unlink(name);
    ::dup2(file_, STDERR_FILENO);
  }
  ~StderrCapture() { restore(); }
  std::string text() {
    restore();
    std::string out;
    char buf[4096];
    for (ssize_t n, at = 0; (n = ::pread(file_, buf, sizeof buf, at)) > 0; at += n) {
      out.append(buf, static_cast<std::size_t>(n));
    }
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, STDERR_FILENO);
    ::close(saved_);
    saved_ = -1;
  }
  int saved_ = -1;
  int file_ = -1;
};

TEST_F(HandshakeTest, RefusedConnectionsAreLoggedByAddressAndRateLimited) {
  core::set_log_level(core::LogLevel::kWarn);
  constexpr int kStrangers = 30;
  std::string log;
  {
    StderrCapture capture;
    TwoRanks ranks(std::make_shared<HashStore>(20s), "flood", 20s);
    const std::uint16_t port = ranks.rank0_port();
    for (int i = 0; i < kStrangers; ++i) {
      StrangerSocket s = StrangerSocket::connect_to(port);
      ASSERT_TRUE(s.connected());
      s.send(pattern(16, i));
      s.read_to_end();
    }
    ranks.meet();
    log = capture.text();
  }
  std::size_t logged = 0;
  const std::string line = "rank 0: refused connection from 127.0.0.1:";
  for (auto at = log.find(line); at != std::string::npos; at = log.find(line, at + 1)) ++logged;
  EXPECT_EQ(logged, 8u) << log;
  EXPECT_NE(log.find("bad magic"), std::string::npos) << log;
  // A rank that connects on first use accepts for as long as peers may come.
  EXPECT_NE(log.find(fmt::format("rank 0: refused {} connections while accepting peers, {} of "
                                 "them not logged",
                                 kStrangers, kStrangers - 8)),
            std::string::npos)
      << log;
}

TEST_F(HandshakeTest, TheKeyComesFromTheTokenElseFromASecretSharedThroughTheStore) {
  HashStore store(5s), other(5s);
  EXPECT_EQ(transport_key(store, "tok", 0), derive_transport_key("tok"));
  EXPECT_FALSE(store.check(std::vector<std::string>{std::string(kTransportSecretKey)}))
      << "a token keeps the secret out of the store";
  ::setenv("C10D_STORE_TOKEN", "from env", 1);
  EXPECT_EQ(transport_key(store, "", 0), derive_transport_key("from env"));
  ::setenv("C10D_STORE_TOKEN", "", 1);
  const std::string empty = message_of<InvalidArgument>([&] { transport_key(store, "", 0); });
  EXPECT_NE(empty.find("C10D_STORE_TOKEN is empty"), std::string::npos) << empty;
  ::unsetenv("C10D_STORE_TOKEN");

  const TransportKey first = transport_key(store, "", 0);
  EXPECT_EQ(transport_key(store, "", 1), first) << "every rank of the store reads one secret";
  EXPECT_EQ(store.get_string(kTransportSecretKey).size(), 64u);
  EXPECT_NE(transport_key(other, "", 0), first) << "another store, another job";
  EXPECT_NE(first, derive_transport_key("tok"));
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
