// The store's wire format, pinned byte for byte, and its decoders driven with hostile input.
#include "store/wire.h"

#include <gtest/gtest.h>

#include <limits>
#include <random>

namespace c10d::inline v1::store::wire {
namespace {

Bytes frame(Kind kind, const std::function<void(Bytes&)>& body) {
  Bytes out;
  std::size_t start = begin_frame(out, static_cast<std::uint8_t>(kind));
  body(out);
  end_frame(out, start);
  return out;
}

std::span<const std::uint8_t> body_of(const Bytes& f) {
  return std::span<const std::uint8_t>(f).subspan(kHeaderBytes);
}

TEST(WireTest, SetFrameIsLittleEndianByteForByte) {
  Bytes f = frame(Kind::kSet, [](Bytes& out) {
    put_string(out, "k");
    put_string(out, "vv");
  });
  const Bytes expected = {
      0x43, 0x31, 0x30, 0x44,                  // magic "C10D"
      0x01, 0x00,                              // version 1
      0x03,                                    // kind SET
      0x00,                                    // flags
      0x0b, 0,    0,    0,    0,   0,   0, 0,  // body length 11
      0x01, 0,    0,    0,    'k',             // key
      0x02, 0,    0,    0,    'v', 'v',        // value
  };
  EXPECT_EQ(f, expected);
}

TEST(WireTest, IntegersAreLittleEndianWhateverTheHost) {
  Bytes out;
  put_u32(out, 0x01020304);
  put_u64(out, 0x0102030405060708ull);
  EXPECT_EQ(out, (Bytes{4, 3, 2, 1, 8, 7, 6, 5, 4, 3, 2, 1}));
  EXPECT_EQ(get_u32(out.data()), 0x01020304u);
  EXPECT_EQ(get_u64(out.data() + 4), 0x0102030405060708ull);
}

TEST(WireTest, HeaderRejectsBadMagicVersionKindAndSize) {
  StoreLimits limits;
  Header h;
  Bytes f = frame(Kind::kNumKeys, [](Bytes&) {});
  EXPECT_TRUE(decode_header(f, false, limits, h).ok());
  EXPECT_EQ(decode_header(std::span(f).first(15), false, limits, h).code, DecodeCode::kShort);

  Bytes bad = f;
  bad[0] = 'G';  // "GET / HTTP..." from a browser or a scanner
  EXPECT_EQ(decode_header(bad, false, limits, h).code, DecodeCode::kBadMagic);

  bad = f;
  bad[4] = 9;
  auto s = decode_header(bad, false, limits, h);
  EXPECT_EQ(s.code, DecodeCode::kBadVersion);
  EXPECT_EQ(s.value, 9u);
  EXPECT_NE(describe(s, limits).find("9"), std::string::npos);

  bad = f;
  bad[6] = 0x7f;
  EXPECT_EQ(decode_header(bad, false, limits, h).code, DecodeCode::kBadKind);
  bad[6] = static_cast<std::uint8_t>(Kind::kGet) | kResponseBit;  // a response sent as request
  EXPECT_EQ(decode_header(bad, false, limits, h).code, DecodeCode::kBadKind);

  bad = f;
  for (int i = 8; i < 16; ++i) bad[i] = 0xff;  // a body of 2^64 - 1 bytes
  s = decode_header(bad, false, limits, h);
  EXPECT_EQ(s.code, DecodeCode::kFrameTooLarge);
  EXPECT_EQ(s.value, std::numeric_limits<std::uint64_t>::max());
}

TEST(WireTest, RequestsRoundTrip) {
  StoreLimits limits;
  Request req;
  Bytes f = frame(Kind::kMultiSet, [](Bytes& out) {
    put_u32(out, 2);
    put_string(out, "a");
    put_string(out, std::string("x\0y", 3));
    put_string(out, "b");
    put_string(out, "");
  });
  ASSERT_TRUE(decode_request(Kind::kMultiSet, body_of(f), limits, req).ok());
  ASSERT_EQ(req.keys.size(), 2u);
  EXPECT_EQ(req.keys[1], "b");
  EXPECT_EQ(req.values[0].size(), 3u);
  EXPECT_EQ(req.values[1].size(), 0u);

  f = frame(Kind::kWait, [](Bytes& out) {
    put_u64(out, 1234);
    put_u32(out, 1);
    put_string(out, "ready");
  });
  ASSERT_TRUE(decode_request(Kind::kWait, body_of(f), limits, req).ok());
  EXPECT_EQ(req.timeout_ms, 1234u);
  EXPECT_EQ(req.keys.at(0), "ready");

  f = frame(Kind::kAdd, [](Bytes& out) {
    put_string(out, "n");
    put_u64(out, static_cast<std::uint64_t>(-5));
  });
  ASSERT_TRUE(decode_request(Kind::kAdd, body_of(f), limits, req).ok());
  EXPECT_EQ(req.delta, -5);
}

TEST(WireTest, LimitsAreCheckedBeforeAnythingIsAllocated) {
  StoreLimits limits;
  limits.max_key_bytes = 16;
  limits.max_value_bytes = 32;
  limits.max_keys_per_op = 4;
  Request req;

  Bytes f = frame(Kind::kSet, [](Bytes& out) {
    put_string(out, std::string(17, 'k'));
    put_string(out, "v");
  });
  auto s = decode_request(Kind::kSet, body_of(f), limits, req);
  EXPECT_EQ(s.code, DecodeCode::kKeyTooLarge);
  EXPECT_EQ(describe(s, limits), "key of 17 bytes exceeds the limit of 16");

  f = frame(Kind::kSet, [](Bytes& out) {
    put_string(out, "k");
    put_u32(out, 0xffffffffu);  // claims 4 GiB, carries nothing
  });
  EXPECT_EQ(decode_request(Kind::kSet, body_of(f), limits, req).code, DecodeCode::kValueTooLarge);

  f = frame(Kind::kCheck, [](Bytes& out) { put_u32(out, 5); });
  EXPECT_EQ(decode_request(Kind::kCheck, body_of(f), limits, req).code, DecodeCode::kTooManyKeys);

  // A count within the limit that the body cannot hold is refused before reserving for it.
  f = frame(Kind::kCheck, [](Bytes& out) { put_u32(out, 3); });
  EXPECT_EQ(decode_request(Kind::kCheck, body_of(f), limits, req).code, DecodeCode::kTruncated);

  f = frame(Kind::kGet, [](Bytes& out) {
    put_u64(out, 10);
    put_u32(out, 8);  // key length 8, only 2 bytes follow
    out.push_back('a');
    out.push_back('b');
  });
  EXPECT_EQ(decode_request(Kind::kGet, body_of(f), limits, req).code, DecodeCode::kTruncated);

  f = frame(Kind::kDelete, [](Bytes& out) {
    put_string(out, "k");
    out.push_back(0);
  });
  auto t = decode_request(Kind::kDelete, body_of(f), limits, req);
  EXPECT_EQ(t.code, DecodeCode::kTrailingBytes);
  EXPECT_EQ(t.value, 1u);
}

TEST(WireTest, ErrorFrameCarriesStatusMessageAndVersion) {
  Bytes out;
  encode_error(out, Kind::kHello, Status::kVersionMismatch, "speaks 2", 2);
  StoreLimits limits;
  Header h;
  ASSERT_TRUE(decode_header(out, true, limits, h).ok());
  EXPECT_EQ(h.version, 2);
  EXPECT_EQ(h.kind, static_cast<std::uint8_t>(Kind::kHello) | kResponseBit);
  EXPECT_EQ(out[kHeaderBytes], static_cast<std::uint8_t>(Status::kVersionMismatch));
  EXPECT_EQ(std::string(out.end() - 8, out.end()), "speaks 2");
}

TEST(WireTest, AnswersAreBoundedByMaxResponseBytes) {
  StoreLimits limits;
  limits.max_response_bytes = 100;
  Header h;
  Bytes answer = frame(static_cast<Kind>(static_cast<std::uint8_t>(Kind::kGet) | kResponseBit),
                       [](Bytes& out) {
                         out.push_back(static_cast<std::uint8_t>(Status::kOk));
                         put_string(out, std::string(95, 'v'));  // body: 1 + 4 + 95 = 100
                       });
  EXPECT_TRUE(decode_header(answer, true, limits, h).ok());
  EXPECT_EQ(h.body_bytes, value_answer_bytes(95));
  limits.max_response_bytes = 99;
  auto s = decode_header(answer, true, limits, h);
  EXPECT_EQ(s.code, DecodeCode::kAnswerTooLarge);
  EXPECT_EQ(describe(s, limits),
            "answer body of 100 bytes exceeds the limit of 99 (max_response_bytes)");
  // The request limit does not apply to answers, nor the answer limit to requests.
  limits.max_frame_bytes = 10;
  limits.max_response_bytes = 100;
  EXPECT_TRUE(decode_header(answer, true, limits, h).ok());

  // multi_get_answer_bytes is the body the server builds: status, count, each length and value.
  Bytes multi;
  put_u32(multi, 3);
  for (std::size_t n : {0u, 7u, 20u}) put_string(multi, std::string(n, 'x'));
  EXPECT_EQ(multi_get_answer_bytes(3, 27), 1 + multi.size());
}

TEST(WireTest, NewStatusesHaveNames) {
  EXPECT_EQ(status_name(Status::kResponseTooLarge), "answer too large");
  EXPECT_EQ(status_name(Status::kBusy), "server busy");
  Bytes out;
  encode_error(out, Kind::kMultiGet, Status::kResponseTooLarge, "over the limit");
  StoreLimits limits;
  Header h;
  ASSERT_TRUE(decode_header(out, true, limits, h).ok());
  EXPECT_EQ(out[kHeaderBytes], static_cast<std::uint8_t>(Status::kResponseTooLarge));
}

TEST(WireTest, AuthMacDependsOnTokenAndNonce) {
  Nonce a = random_nonce(), b = random_nonce();
  EXPECT_NE(a, b);
  EXPECT_TRUE(mac_equal(auth_mac("secret", a), auth_mac("secret", a)));
  EXPECT_FALSE(mac_equal(auth_mac("secret", a), auth_mac("secret", b)));
  EXPECT_FALSE(mac_equal(auth_mac("secret", a), auth_mac("Secret", a)));
  const auto mac = auth_mac("secret", a);
  EXPECT_FALSE(mac_equal(mac, std::span(mac).first(31)));
}

// A seeded random driver: valid frames of every kind, mutated (bytes flipped, lengths replaced
// by extremes, cut short, extended) and pure noise. The decoders must never throw, read out of
// bounds (the sanitizer build checks that) or accept a view that leaves the body.
TEST(WireFuzzTest, MutatedAndRandomFramesNeverCrashOrEscapeTheBody) {
  std::mt19937_64 rng(20261123);
  StoreLimits limits;
  limits.max_key_bytes = 64;
  limits.max_value_bytes = 256;
  limits.max_keys_per_op = 16;
  limits.max_frame_bytes = 4096;
  auto rand_string = [&](std::size_t max) {
    std::string s(rng() % (max + 1), '\0');
    for (char& c : s) c = static_cast<char>(rng());
    return s;
  };
  std::vector<Bytes> seeds;
  for (std::uint8_t k = 1; k <= kMaxKind; ++k) {
    seeds.push_back(frame(static_cast<Kind>(k), [&](Bytes& out) {
      const auto kind = static_cast<Kind>(k);
      if (kind == Kind::kGet || kind == Kind::kWait || kind == Kind::kMultiGet) put_u64(out, 5);
      if (kind == Kind::kHello) put_u16(out, kVersion);
      if (kind == Kind::kAuth) out.resize(out.size() + kMacBytes, 7);
      if (kind == Kind::kCheck || kind == Kind::kWait || kind == Kind::kMultiGet ||
          kind == Kind::kMultiSet) {
        put_u32(out, 3);
        for (int i = 0; i < 3; ++i) {
          put_string(out, rand_string(8));
          if (kind == Kind::kMultiSet) put_string(out, rand_string(20));
        }
      } else if (kind != Kind::kHello && kind != Kind::kAuth && kind != Kind::kNumKeys) {
        put_string(out, rand_string(8));
        if (kind == Kind::kAdd) put_u64(out, rng());
        if (kind == Kind::kSet || kind == Kind::kAppend || kind == Kind::kCompareSet) {
          put_string(out, rand_string(30));
        }
        if (kind == Kind::kCompareSet) put_string(out, rand_string(30));
      }
    }));
  }
  int accepted = 0, rejected = 0;
  Request req;
  for (int iter = 0; iter < 200000; ++iter) {
    Bytes f;
    if (iter % 10 == 0) {
      f.resize(rng() % 200);
      for (auto& b : f) b = static_cast<std::uint8_t>(rng());
    } else {
      f = seeds[rng() % seeds.size()];
      const int mutations = 1 + static_cast<int>(rng() % 4);
      for (int m = 0; m < mutations && !f.empty(); ++m) {
        const std::size_t at = rng() % f.size();
        switch (rng() % 5) {
          case 0:
            f[at] = static_cast<std::uint8_t>(rng());
            break;
          case 1:
            for (std::size_t i = at; i < std::min(f.size(), at + 4); ++i) f[i] = 0xff;
            break;
          case 2:
            f.resize(at);
            break;
          case 3:
            f.insert(f.begin() + static_cast<std::ptrdiff_t>(at), rng() % 16, 0x41);
            break;
          default:
            if (at >= kHeaderBytes) end_frame(f, 0);  // keep the length honest, body mutated
            break;
        }
      }
    }
    Header h;
    auto hs = decode_header(f, false, limits, h);
    if (!hs.ok()) {
      ++rejected;
      continue;
    }
    if (f.size() - kHeaderBytes < h.body_bytes) {
      ++rejected;  // the server would wait for more bytes
      continue;
    }
    std::span<const std::uint8_t> body(f.data() + kHeaderBytes, h.body_bytes);
    auto ds = decode_request(static_cast<Kind>(h.kind), body, limits, req);
    if (!ds.ok()) {
      ++rejected;
      EXPECT_FALSE(describe(ds, limits).empty());
      continue;
    }
    ++accepted;
    const auto* lo = body.data();
    const auto* hi = body.data() + body.size();
    for (auto k : req.keys) {
      ASSERT_LE(k.size(), limits.max_key_bytes);
      ASSERT_TRUE(k.empty() || (reinterpret_cast<const std::uint8_t*>(k.data()) >= lo &&
                                reinterpret_cast<const std::uint8_t*>(k.data()) + k.size() <= hi));
    }
    for (auto v : req.values) {
      ASSERT_LE(v.size(), limits.max_value_bytes);
      ASSERT_TRUE(v.empty() || (v.data() >= lo && v.data() + v.size() <= hi));
    }
  }
  // Both paths were exercised.
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 10000);
}

// The client's side, seeded the same way: answers of every shape (values, value lists,
// integers, error frames of every status, the new ones included), mutated and as noise. An
// answer accepted by decode_header never exceeds max_response_bytes, and reading its body as
// the client does (a list of values, or a status and message) never leaves it.
TEST(WireFuzzTest, MutatedAnswersStayWithinTheAnswerLimit) {
  std::mt19937_64 rng(20261124);
  StoreLimits limits;
  limits.max_value_bytes = 256;
  limits.max_keys_per_op = 16;
  limits.max_response_bytes = 1024;
  auto answer = [](Kind kind, const std::function<void(Bytes&)>& body) {
    return frame(static_cast<Kind>(static_cast<std::uint8_t>(kind) | kResponseBit), body);
  };
  std::vector<Bytes> seeds;
  seeds.push_back(answer(Kind::kGet, [](Bytes& out) {
    out.push_back(0);
    put_string(out, std::string(100, 'v'));
  }));
  seeds.push_back(answer(Kind::kMultiGet, [](Bytes& out) {
    out.push_back(0);
    put_u32(out, 4);
    for (int i = 0; i < 4; ++i) put_string(out, std::string(50 * i, 'w'));
  }));
  seeds.push_back(answer(Kind::kNumKeys, [](Bytes& out) {
    out.push_back(0);
    put_u64(out, 42);
  }));
  for (std::uint8_t st = 1; st <= static_cast<std::uint8_t>(Status::kBusy); ++st) {
    Bytes e;
    encode_error(e, Kind::kMultiGet, static_cast<Status>(st), "what went wrong");
    seeds.push_back(e);
  }
  int accepted = 0, rejected = 0;
  for (int iter = 0; iter < 100000; ++iter) {
    Bytes f = seeds[rng() % seeds.size()];
    if (iter % 10 == 0) {
      f.resize(rng() % 64);
      for (auto& b : f) b = static_cast<std::uint8_t>(rng());
    } else {
      for (int m = 1 + static_cast<int>(rng() % 3); m > 0 && !f.empty(); --m) {
        const std::size_t at = rng() % f.size();
        switch (rng() % 4) {
          case 0:
            f[at] = static_cast<std::uint8_t>(rng());
            break;
          case 1:
            for (std::size_t i = at; i < std::min(f.size(), at + 4); ++i) f[i] = 0xff;
            break;
          case 2:
            f.resize(at);
            break;
          default:
            f.insert(f.begin() + static_cast<std::ptrdiff_t>(at), rng() % 600, 0x41);
            if (rng() % 2 == 0) end_frame(f, 0);  // an honest length, possibly over the limit
            break;
        }
      }
    }
    Header h;
    auto hs = decode_header(f, true, limits, h);
    if (!hs.ok() || f.size() - kHeaderBytes < h.body_bytes || h.body_bytes == 0) {
      if (!hs.ok()) {
        EXPECT_FALSE(describe(hs, limits).empty());
      }
      ++rejected;
      continue;
    }
    ASSERT_LE(h.body_bytes, limits.max_response_bytes);
    ++accepted;
    std::span<const std::uint8_t> body(f.data() + kHeaderBytes, h.body_bytes);
    const auto* lo = body.data();
    const auto* hi = body.data() + body.size();
    Reader r(body.subspan(1), limits);
    if (body[0] == static_cast<std::uint8_t>(Status::kOk)) {
      std::uint32_t n = 0;
      if (r.count(n)) {
        for (std::uint32_t i = 0; i < n; ++i) {
          std::span<const std::uint8_t> v;
          if (!r.value(v)) break;
          ASSERT_TRUE(v.empty() || (v.data() >= lo && v.data() + v.size() <= hi));
        }
      }
    } else {
      std::string_view message;
      if (r.key(message)) {
        const auto* p = reinterpret_cast<const std::uint8_t*>(message.data());
        ASSERT_TRUE(message.empty() || (p >= lo && p + message.size() <= hi));
      }
    }
    r.finish();
  }
  EXPECT_GT(accepted, 1000);
  EXPECT_GT(rejected, 1000);
}

}  // namespace
}  // namespace c10d::inline v1::store::wire
