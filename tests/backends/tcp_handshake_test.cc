// The TCP transport's handshake against strangers (stranger.h: a client or listener of this
// test that knows the group name, world size and ranks but not the job's secret) and against
// mismatched ranks, with ranks as threads over a HashStore. A stranger never takes a rank's
// place and learns nothing of the job; a rank that meets one at a published address fails
// naming the rank and the address; refused connections are logged by address, rate-limited.
#include "backends/gloo_like/tcp_handshake.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <stdlib.h>

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

// Two ranks of `group` that meet after strangers have tried rank 0: rank 0 starts at once and
// waits for rank 1; meet() starts rank 1, which sends rank 0 a 100-byte message, then both
// all_reduce 1000 floats, and checks both arrived exact.
class TwoRanks {
 public:
  TwoRanks(std::shared_ptr<HashStore> store, std::string group, Milliseconds setup)
      : store_(std::move(store)), group_(std::move(group)), setup_(setup) {
    rank0_ = std::thread([this] { run(0); });
  }
  ~TwoRanks() {
    if (rank0_.joinable()) rank0_.join();
  }

  // Where rank 0 listens, once it has published it.
  std::uint16_t rank0_port() const { return port_of(store_->get_string(group_ + "/addr/0")); }

  void meet() {
    std::thread rank1([this] { run(1); });
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
      TCPTransport t(store_, rank, 2, group_, {"127.0.0.1", setup_});
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
  std::vector<std::byte> got_ = std::vector<std::byte>(100);
  std::vector<float> sums_[2];
  std::exception_ptr errors_[2];
  std::thread rank0_;
};

// What `fn` throws as E (failing the test when it throws nothing).
template <typename E, typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "nothing thrown";
  return {};
}

TEST_F(HandshakeTest, AStrangerThatKnowsAllButTheSecretNeverTakesARanksPlace) {
  TwoRanks ranks(std::make_shared<HashStore>(20s), "claim", 20s);
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

  std::vector<std::byte> v4 = encode_greeting(new_nonce());
  v4[4] = std::byte{4};
  EXPECT_EQ(answer_to(v4), encode_version_notice());
  ranks.meet();
}

// A rank of another group that finds this rank's address connects, and each side refuses the
// other with the two group names (both groups share the store, and so its job secret); the
// accepting rank goes on to meet its real peer.
TEST_F(HandshakeTest, ARankOfAnotherGroupIsRefusedOnBothSidesNamingBothGroups) {
  auto store = std::make_shared<HashStore>(20s);
  TwoRanks ranks(store, "blue", 20s);
  store->set("green/addr/0", store->get_string("blue/addr/0"));
  const std::string what = message_of<NetworkError>([&] {
    TCPTransport stray(store, 1, 2, "green", {"127.0.0.1", 5s});
  });
  EXPECT_NE(what.find("peer is in group \"blue\""), std::string::npos) << what;
  EXPECT_NE(what.find("this rank is in group \"green\""), std::string::npos) << what;
  ranks.meet();
}

// Connections that send nothing, half a hello, or a hello and then nothing, and stay open must
// not hold up the real peer that connects after them: its handshake is read as it arrives.
TEST_F(HandshakeTest, SilentStrangersDoNotHoldUpARealPeer) {
  TwoRanks ranks(std::make_shared<HashStore>(20s), "silent", 10s);
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

// A listener planted at a rank's address in an open store (no token), playing rank 0 in
// different ways; rank 1 connects to it first and must fail naming itself and the address.
enum class Planted { kOwnKey, kCloseAfterProof, kGarbage, kNewerVersion };

std::string planted_error(Planted how) {
  auto store = std::make_shared<HashStore>(20s);
  StrangerListener listener;
  const std::string group = "planted" + std::to_string(static_cast<int>(how));
  store->set(group + "/addr/0", listener.address());
  std::thread stranger([&] {
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
      notice[4] = std::byte{4};
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
  std::string what = message_of<NetworkError>([&] {
    TCPTransport t(store, 1, 2, group, {"127.0.0.1", 10s});
  });
  EXPECT_LT(Clock::now() - start, 5s) << "rank 1 waited for its setup deadline";
  stranger.join();
  const std::string prefix = "rank 1: ";
  EXPECT_EQ(what.rfind(prefix, 0), 0u) << what;
  EXPECT_NE(what.find(listener.address()), std::string::npos) << what;
  return what;
}

TEST_F(HandshakeTest, AStrangerAtAPublishedAddressIsNotJoinedAndIsNamed) {
  std::string what = planted_error(Planted::kOwnKey);
  EXPECT_NE(what.find("published as rank 0's address, did not prove it belongs to this job"),
            std::string::npos)
      << what;
  what = planted_error(Planted::kCloseAfterProof);
  EXPECT_NE(what.find("published as rank 0's address, closed the connection instead of "
                      "accepting this rank's proof"),
            std::string::npos)
      << what;
  what = planted_error(Planted::kGarbage);
  EXPECT_NE(what.find("published as rank 0's address, is not a c10d rank: bad magic"),
            std::string::npos)
      << what;
  what = planted_error(Planted::kNewerVersion);
  EXPECT_NE(what.find("speaks transport handshake version 4, this rank speaks version 3"),
            std::string::npos)
      << what;
}

// The listener closes when setup ends: nothing can connect to a running transport to inject
// frames; the ranks' own connections carry on.
TEST_F(HandshakeTest, NothingListensOnASetUpPortAfterSetup) {
  auto store = std::make_shared<HashStore>(20s);
  std::unique_ptr<TCPTransport> t[2];
  std::latch made(2), checked(1);
  std::vector<std::byte> got(64);
  std::thread threads[2];
  for (int r = 0; r < 2; ++r) {
    threads[r] = std::thread([&, r] {
      t[r] = std::make_unique<TCPTransport>(store, r, 2, "closed",
                                            TCPTransportOptions{"127.0.0.1", 20s});
      made.count_down();
      checked.wait();
      if (r == 0) {
        t[r]->irecv(1, 5, got)->wait(soon());
      } else {
        t[r]->isend(0, 5, pattern(64, 9))->wait(soon());
      }
    });
  }
  made.wait();
  for (int r = 0; r < 2; ++r) {
    const std::uint16_t port = port_of(store->get_string("closed/addr/" + std::to_string(r)));
    StrangerSocket s = StrangerSocket::connect_to(port);
    const int err = errno;
    EXPECT_FALSE(s.connected()) << "rank " << r << " still listens on " << port;
    EXPECT_EQ(err, ECONNREFUSED) << std::strerror(err);
  }
  checked.count_down();
  for (auto& th : threads) th.join();
  EXPECT_EQ(got, pattern(64, 9));
}

// A port that nothing listens on (bound, read, released).
std::uint16_t closed_port() {
  StrangerListener l;
  return l.port();
}

TEST_F(HandshakeTest, ConnectFailuresNameTheRankAndTheAddress) {
  auto store = std::make_shared<HashStore>(20s);
  const std::string addr = "127.0.0.1:" + std::to_string(closed_port());
  store->set("refused/addr/0", addr);
  const auto start = Clock::now();
  std::string what = message_of<NetworkError>([&] {
    TCPTransport t(store, 1, 2, "refused", {"127.0.0.1", 20s});
  });
  EXPECT_EQ(what.rfind("rank 1: cannot connect to rank 0 at " + addr + ": Connection refused", 0),
            0u)
      << what;
  EXPECT_LT(Clock::now() - start, 10s)
      << "a refused connect is retried briefly, not until the deadline";

  store->set("garbled/addr/0", "not an address");
  what = message_of<NetworkError>([&] {
    TCPTransport t(store, 1, 2, "garbled", {"127.0.0.1", 5s});
  });
  EXPECT_NE(what.find("rank 1: rank 0's address in the store ('garbled/addr/0') is \"not an "
                      "address\", not host:port"),
            std::string::npos)
      << what;
}

// A refused connect is tried again, with the address read again: a rank whose key still held a
// stale address from an earlier run joins once its peer publishes the new one.
TEST_F(HandshakeTest, ARefusedConnectIsRetriedWithTheAddressReadAgain) {
  auto store = std::make_shared<HashStore>(20s);
  store->set("stale/addr/0", "127.0.0.1:" + std::to_string(closed_port()));
  std::exception_ptr error;
  std::vector<std::byte> got(10);
  std::thread rank1([&] {
    try {
      TCPTransport t(store, 1, 2, "stale", {"127.0.0.1", 20s});
      t.isend(0, 1, pattern(10, 2))->wait(soon());
    } catch (...) {
      error = std::current_exception();
    }
  });
  std::this_thread::sleep_for(300ms);  // rank 1 meets the stale address first
  TCPTransport rank0(store, 0, 2, "stale", {"127.0.0.1", 20s});
  rank0.irecv(1, 1, got)->wait(soon());
  rank1.join();
  if (error) std::rethrow_exception(error);
  EXPECT_EQ(got, pattern(10, 2));
}

// Ranks that were given different secrets cannot join: the connecting one is told its proof was
// not accepted, the accepting one refuses it; the connecting one records its failure in the
// store, so the accepting one stops waiting at once, naming it, instead of at its timeout.
TEST_F(HandshakeTest, RanksWithDifferentTokensRefuseEachOther) {
  auto store = std::make_shared<HashStore>(20s);
  std::string rank0_error;
  const auto start = Clock::now();
  std::thread rank0([&] {
    rank0_error = message_of<NetworkError>([&] {
      TCPTransportOptions o{"127.0.0.1", 20s};
      o.token = "first secret";
      TCPTransport t(store, 0, 2, "tokens", o);
    });
  });
  TCPTransportOptions o{"127.0.0.1", 20s};
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
  EXPECT_NE(log.find(fmt::format("rank 0: refused {} connections during setup, {} of them not "
                                 "logged",
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
