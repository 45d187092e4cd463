// The TCP transport's handshake frames (tcp_wire.h) as pure functions: round trips, the MAC
// bound to key, nonces and direction, lengths checked before anything is read past them, the
// verdicts and their messages naming both sides, and a seeded fuzz of mutated and random
// frames.
#include "backends/gloo_like/tcp_wire.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <string>

namespace c10d::inline v1::gloo_like {
namespace {

struct Frames {
  TransportKey key = derive_transport_key("job secret");
  Nonces nonces{new_nonce(), new_nonce()};
  Proof proof{{4, 1, "train"}, 0};
  Accept accept{{4, 0, "train"}, AcceptStatus::kAccepted};
};

TEST(TCPWireTest, GreetingsCarryMagicVersionAndNonceOnly) {
  const Nonce n = new_nonce();
  const auto hello = encode_greeting(n);
  ASSERT_EQ(hello.size(), kGreetingBytes);
  EXPECT_EQ(std::memcmp(hello.data(), "C10T", 4), 0);
  EXPECT_EQ(get_le<std::uint16_t>(hello.data() + 4), kHandshakeVersion);
  Nonce back{};
  const HandshakeDecode d = decode_greeting(hello, back);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.bytes, kGreetingBytes);
  EXPECT_EQ(back, n);
  EXPECT_NE(new_nonce(), n);

  // Every prefix is short; the notice is the preamble alone and stops at 6 bytes.
  for (std::size_t i = 0; i < hello.size(); ++i) {
    const HandshakeDecode s = decode_greeting(std::span(hello).first(i), back);
    EXPECT_EQ(s.code, HandshakeCode::kShort) << i;
    EXPECT_GT(s.bytes, i);
  }
  const auto notice = encode_version_notice();
  ASSERT_EQ(notice.size(), kPreambleBytes);
  EXPECT_TRUE(std::equal(notice.begin(), notice.end(), hello.begin()));

  auto other = hello;
  other[4] = std::byte{2};
  HandshakeDecode v = decode_greeting(std::span(other).first(kPreambleBytes), back);
  EXPECT_EQ(v.code, HandshakeCode::kBadVersion);
  EXPECT_EQ(v.value, 2u);
  EXPECT_EQ(describe(v),
            "handshake version 2, this rank speaks version " + std::to_string(kHandshakeVersion));
  other[0] = std::byte{'X'};
  v = decode_greeting(std::span(other).first(4), back);  // told at 4 bytes, without waiting
  EXPECT_EQ(v.code, HandshakeCode::kBadMagic);
  EXPECT_NE(describe(v).find("expected 0x54303143"), std::string::npos) << describe(v);
}

TEST(TCPWireTest, ProofAndAcceptRoundTripAndCheckTheirMacs) {
  Frames f;
  const auto proof = encode_proof(f.proof, f.key, f.nonces);
  ASSERT_EQ(proof.size(), kProofFixedBytes + 5 + core::kMacBytes);
  Proof p;
  HandshakeDecode d = decode_proof(proof, f.key, f.nonces, p);
  ASSERT_TRUE(d.ok()) << describe(d);
  EXPECT_EQ(d.bytes, proof.size());
  EXPECT_EQ(p.connector.world_size, 4u);
  EXPECT_EQ(p.connector.rank, 1u);
  EXPECT_EQ(p.expected_rank, 0u);
  EXPECT_EQ(p.connector.group, "train");

  const auto accept = encode_accept(f.accept, f.key, f.nonces);
  Accept a;
  d = decode_accept(accept, f.key, f.nonces, a);
  ASSERT_TRUE(d.ok()) << describe(d);
  EXPECT_EQ(a.acceptor.rank, 0u);
  EXPECT_EQ(a.acceptor.group, "train");
  EXPECT_EQ(a.status, AcceptStatus::kAccepted);

  // Another key, other nonces, swapped nonces, or the other direction's frame: a bad MAC.
  Proof unused;
  EXPECT_EQ(decode_proof(proof, derive_transport_key("guess"), f.nonces, unused).code,
            HandshakeCode::kBadMac);
  EXPECT_EQ(decode_proof(proof, f.key, {f.nonces.connector, new_nonce()}, unused).code,
            HandshakeCode::kBadMac);
  EXPECT_EQ(decode_proof(proof, f.key, {f.nonces.acceptor, f.nonces.connector}, unused).code,
            HandshakeCode::kBadMac);
  Accept accept_unused;
  const auto signed_as_accept = encode_accept(
      {{f.proof.connector.world_size, f.proof.connector.rank, "train"}, AcceptStatus::kAccepted},
      f.key, f.nonces);
  EXPECT_FALSE(decode_accept(proof, f.key, f.nonces, accept_unused).ok());
  EXPECT_FALSE(decode_proof(signed_as_accept, f.key, f.nonces, unused).ok());
  EXPECT_EQ(describe({HandshakeCode::kBadMac, 0, 0}),
            "its proof does not check out against this job's key");

  // Each field is under the MAC.
  for (std::size_t i = 0; i < proof.size(); ++i) {
    auto flipped = proof;
    flipped[i] ^= std::byte{1};
    const HandshakeDecode m = decode_proof(flipped, f.key, f.nonces, unused);
    EXPECT_FALSE(m.ok()) << "byte " << i;
  }
}

TEST(TCPWireTest, LengthsAreCheckedBeforeTheBytesTheyClaim) {
  Frames f;
  const auto proof = encode_proof(f.proof, f.key, f.nonces);
  Proof p;
  for (std::size_t i = 0; i < proof.size(); ++i) {
    const HandshakeDecode d = decode_proof(std::span(proof).first(i), f.key, f.nonces, p);
    EXPECT_EQ(d.code, HandshakeCode::kShort) << i;
    EXPECT_GT(d.bytes, i);
    EXPECT_LE(d.bytes, proof.size());
  }
  // A claimed name of 4 GiB is refused from the fixed part alone.
  std::vector<std::byte> huge(proof.begin(), proof.begin() + kProofFixedBytes);
  for (std::size_t i = 12; i < 16; ++i) huge[i] = std::byte{0xff};
  HandshakeDecode d = decode_proof(huge, f.key, f.nonces, p);
  EXPECT_EQ(d.code, HandshakeCode::kGroupTooLong);
  EXPECT_EQ(d.value, 0xffffffffu);
  EXPECT_EQ(describe(d), "group name of 4294967295 bytes exceeds the limit of 1024");
  // Bytes after a frame are left alone (the peer's next frames).
  auto longer = proof;
  longer.resize(proof.size() + 7, std::byte{9});
  d = decode_proof(longer, f.key, f.nonces, p);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.bytes, proof.size());
  // An accept with a status no version knows, signed correctly.
  Accept odd = f.accept;
  odd.status = static_cast<AcceptStatus>(9);
  Accept a;
  d = decode_accept(encode_accept(odd, f.key, f.nonces), f.key, f.nonces, a);
  EXPECT_EQ(d.code, HandshakeCode::kBadStatus);
  EXPECT_EQ(d.value, 9u);
}

TEST(TCPWireTest, VerdictsNameBothSidesValues) {
  const Identity blue{4, 0, "blue"};
  EXPECT_EQ(judge_proof(blue, {{4, 2, "blue"}, 0}), AcceptStatus::kAccepted);
  EXPECT_EQ(judge_proof(blue, {{8, 2, "blue"}, 0}), AcceptStatus::kWorldSizeMismatch);
  EXPECT_EQ(judge_proof(blue, {{4, 2, "green"}, 0}), AcceptStatus::kGroupMismatch);
  EXPECT_EQ(judge_proof(blue, {{4, 2, "blue"}, 3}), AcceptStatus::kWrongRank);
  EXPECT_EQ(judge_proof(blue, {{4, 0, "blue"}, 0}), AcceptStatus::kBadRank);
  EXPECT_EQ(judge_proof(blue, {{4, 4, "blue"}, 0}), AcceptStatus::kBadRank);

  std::string m = refusal_at_acceptor(AcceptStatus::kGroupMismatch, blue, {{4, 2, "green"}, 0});
  EXPECT_EQ(m, "group mismatch: peer is in group \"green\", this rank is in group \"blue\"");
  m = refusal_at_acceptor(AcceptStatus::kWorldSizeMismatch, blue, {{8, 2, "blue"}, 0});
  EXPECT_EQ(m, "world size mismatch: peer has world size 8, this rank has world size 4");
  m = refusal_at_acceptor(AcceptStatus::kWrongRank, blue, {{4, 2, "blue"}, 3});
  EXPECT_NE(m.find("rank 2, meant to reach rank 3, but this is rank 0"), std::string::npos) << m;
  m = refusal_at_acceptor(AcceptStatus::kDuplicate, blue, {{4, 2, "blue"}, 0});
  EXPECT_NE(m.find("duplicate peer rank 2"), std::string::npos) << m;

  // The connecting side: the acceptor's status, then its fields checked here too.
  const Identity green{4, 2, "green"};
  EXPECT_EQ(judge_accept(green, 0, {blue, AcceptStatus::kGroupMismatch}),
            AcceptStatus::kGroupMismatch);
  EXPECT_EQ(judge_accept(green, 0, {blue, AcceptStatus::kAccepted}), AcceptStatus::kGroupMismatch);
  EXPECT_EQ(judge_accept({4, 2, "blue"}, 1, {blue, AcceptStatus::kAccepted}),
            AcceptStatus::kWrongRank);
  EXPECT_EQ(judge_accept({4, 2, "blue"}, 0, {blue, AcceptStatus::kAccepted}),
            AcceptStatus::kAccepted);
  m = refusal_at_connector(AcceptStatus::kGroupMismatch, green, 0, blue);
  EXPECT_EQ(m, "group mismatch: peer is in group \"blue\", this rank is in group \"green\"");
  m = refusal_at_connector(AcceptStatus::kWrongRank, {4, 2, "blue"}, 1, blue);
  EXPECT_NE(m.find("the peer is rank 0, not rank 1"), std::string::npos) << m;
  m = refusal_at_connector(AcceptStatus::kDuplicate, {4, 2, "blue"}, 0, blue);
  EXPECT_NE(m.find("rank 0 already holds a proven connection from rank 2"), std::string::npos) << m;
}

TEST(TCPWireTest, KeysDependOnTheSecret) {
  EXPECT_EQ(derive_transport_key("a"), derive_transport_key("a"));
  EXPECT_NE(derive_transport_key("a"), derive_transport_key("b"));
  EXPECT_EQ(core::random_hex(32).size(), 64u);
}

// A rank passes on what it heard: a rank of the group that made no progress stays one, so a
// third rank does not call it gone; a lost rank outside the group, or the hearer itself, is
// garbage and blames no one.
TEST(TCPWireTest, AHeardNoticeKeepsARankThatMadeNoProgressAndDropsGarbage) {
  const AbortNotice stalled = heard_abort_notice({2, "m", true}, 1, 3);
  EXPECT_EQ(stalled.lost_rank, 2);
  EXPECT_TRUE(stalled.stalled);
  EXPECT_EQ(stalled.message, "m");
  const AbortNotice gone = heard_abort_notice({2, "m", false}, 1, 3);
  EXPECT_EQ(gone.lost_rank, 2);
  EXPECT_FALSE(gone.stalled);
  for (const AbortNotice& garbage :
       {heard_abort_notice({3, "m", true}, 1, 3), heard_abort_notice({1, "m", true}, 1, 3),
        heard_abort_notice({-1, "m", false}, 1, 3)}) {
    EXPECT_EQ(garbage.lost_rank, -1);
    EXPECT_FALSE(garbage.stalled);
  }
  // What a relaying rank sends on decodes to the same blame.
  const auto relayed = encode_abort_notice(stalled);
  const AbortNotice back = decode_abort_notice(std::span(relayed).subspan(kFrameHeaderBytes));
  EXPECT_EQ(back.lost_rank, 2);
  EXPECT_TRUE(back.stalled);
}

// The failure record in the store is read strictly: anyone who can write the store can write
// it, and "3abc" once passed as rank 3 (std::stoi) while "x" threw std::invalid_argument.
TEST(TCPWireTest, FailureRecordsRoundTripAndGarbageIsNoRecord) {
  EXPECT_EQ(encode_failure_record({{3, "rank 0: connection to peer rank 3 lost", false}, 0}),
            "3\n0\nrank 0: connection to peer rank 3 lost");
  EXPECT_EQ(encode_failure_record({{2, "why", true}, 1}), "-4\n1\nwhy");
  const auto gone = decode_failure_record("3\n0\nrank 0: connection to peer rank 3 lost");
  ASSERT_TRUE(gone);
  EXPECT_EQ(gone->notice.lost_rank, 3);
  EXPECT_FALSE(gone->notice.stalled);
  EXPECT_EQ(gone->notice.message, "rank 0: connection to peer rank 3 lost");
  EXPECT_EQ(gone->from, 0);
  const auto stalled = decode_failure_record(encode_failure_record({{2, "why", true}, 5}));
  ASSERT_TRUE(stalled);
  EXPECT_EQ(stalled->notice.lost_rank, 2);
  EXPECT_TRUE(stalled->notice.stalled);
  EXPECT_EQ(stalled->from, 5);
  const auto none = decode_failure_record("-1\n0\nrank 0 aborted");
  ASSERT_TRUE(none);
  EXPECT_EQ(none->notice.lost_rank, -1);
  EXPECT_FALSE(none->notice.stalled);
  for (const std::string_view bad :
       {"3abc\n0\nm", "x\n0\nm", " 3\n0\nm", "+3\n0\nm", "3 \n0\nm", "\n0\nm", "3", "",
        "2147483648\n0\nm", "99999999999999999999\n0\nm", "0x3\n0\nm", "3\nm", "3\n-1\nm",
        "3\n1x\nm", "3\n\nm", "3\n2147483648\nm"}) {
    EXPECT_FALSE(decode_failure_record(bad)) << "'" << bad << "'";
  }
  // The message is bounded and printable.
  const auto long_one = decode_failure_record("1\n0\n" + std::string(10000, 'x') + "\x1b[2J");
  ASSERT_TRUE(long_one);
  EXPECT_EQ(long_one->notice.message.size(), kMaxAbortMessageBytes);
  const auto escapes = decode_failure_record("1\n0\nred\x1b[31m\nline");
  ASSERT_TRUE(escapes);
  EXPECT_EQ(escapes->notice.message, "red?[31m?line");
}

// A seeded random driver over the handshake decoders: valid frames mutated (bytes flipped,
// lengths replaced by extremes, cut short, extended) and pure noise, each in a buffer of
// exactly its size (the sanitizer build catches a read past it). The decoders must never
// throw, must say how many bytes they need when short, and must never accept a frame that is
// not the one the key signed.
TEST(TCPWireFuzzTest, MutatedAndRandomFramesNeverCrashOrPassAForgedMac) {
  std::mt19937_64 rng(20260405);
  Frames f;
  const std::vector<std::byte> seeds[] = {
      encode_greeting(f.nonces.connector), encode_version_notice(),
      encode_proof(f.proof, f.key, f.nonces), encode_accept(f.accept, f.key, f.nonces),
      encode_accept({{4, 0, std::string(1024, 'g')}, AcceptStatus::kDuplicate}, f.key, f.nonces)};
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    std::vector<std::byte> frame;
    if (iter % 10 == 0) {
      frame.resize(rng() % 200);
      for (auto& b : frame) b = static_cast<std::byte>(rng());
    } else {
      frame = seeds[rng() % std::size(seeds)];
      const int mutations = 1 + static_cast<int>(rng() % 3);
      for (int m = 0; m < mutations && !frame.empty(); ++m) {
        const std::size_t at = rng() % frame.size();
        switch (rng() % 4) {
          case 0:
            frame[at] ^= static_cast<std::byte>(1 + rng() % 255);
            break;
          case 1:  // a length (or anything) replaced by an extreme
            for (std::size_t i = at; i < std::min(frame.size(), at + 4); ++i) {
              frame[i] = rng() % 2 ? std::byte{0xff} : std::byte{0};
            }
            break;
          case 2:
            frame.resize(at);
            break;
          default:
            frame.insert(frame.begin() + static_cast<std::ptrdiff_t>(at), rng() % 16,
                         std::byte{0x41});
            break;
        }
      }
    }
    // Exactly the frame's size, on the heap.
    const auto exact = std::make_unique<std::byte[]>(frame.size());
    std::copy(frame.begin(), frame.end(), exact.get());
    const std::span<const std::byte> in(exact.get(), frame.size());

    Nonce nonce{};
    Proof proof;
    Accept accept;
    const HandshakeDecode g = decode_greeting(in, nonce);
    const HandshakeDecode p = decode_proof(in, f.key, f.nonces, proof);
    const HandshakeDecode a = decode_accept(in, f.key, f.nonces, accept);
    for (const HandshakeDecode& d : {g, p, a}) {
      if (d.code == HandshakeCode::kShort) {
        EXPECT_GT(d.bytes, in.size());
      }
      if (d.ok()) {
        EXPECT_LE(d.bytes, in.size());
      }
      EXPECT_FALSE(describe(d).empty());
    }
    // A frame that passes its MAC is, byte for byte, one that was signed.
    if (p.ok()) {
      ASSERT_TRUE(std::equal(in.begin(), in.begin() + p.bytes, seeds[2].begin(), seeds[2].end()))
          << "iteration " << iter << ": a forged proof passed";
      EXPECT_EQ(proof.connector.group, "train");
    }
    if (a.ok()) {
      const auto& seed =
          std::equal(in.begin(), in.begin() + a.bytes, seeds[3].begin(), seeds[3].end()) ? seeds[3]
                                                                                         : seeds[4];
      ASSERT_TRUE(std::equal(in.begin(), in.begin() + a.bytes, seed.begin(), seed.end()))
          << "iteration " << iter << ": a forged accept passed";
    }
    (g.ok() || p.ok() || a.ok()) ? ++accepted : ++rejected;
  }
  // Both outcomes were exercised.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
