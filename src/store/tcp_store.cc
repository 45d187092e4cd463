// TCPStore: the client of the TCP store server (frames in wire.h). This file holds the public
// class: its options and token, the server it may host, and each Store operation as one
// request; how a request travels is in tcp_store_impl.h and the files it lists.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "c10d/store.h"
#include "core/auth.h"
#include "core/check.h"
#include "store/store_util.h"
#include "store/tcp_store_impl.h"
#include "store/tcp_store_server.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

using store::deadline_after;
using store::wire::Kind;

// Extra time a client gives the server beyond a wait's own timeout before it calls the server
// unresponsive (the server answers a wait that times out itself): as long again as the wait,
// within these bounds. A short wait must fail in about its own time when the server stops
// answering with the connection open (its host cut off: nothing resets the connection), as a
// failing rank's 500 ms probe of the store; a long one leaves a busy server 5 s.
constexpr Milliseconds kMinServerGrace{1000};
constexpr Milliseconds kMaxServerGrace{5000};

// "[a, b, c]"; long lists are cut after a few keys so messages stay readable.
std::string keys_text(std::span<const std::string> keys) {
  constexpr std::size_t kShown = 8;
  if (keys.size() <= kShown) return fmt::format("[{}]", fmt::join(keys, ", "));
  return fmt::format("[{}, ... {} keys in all]", fmt::join(keys.first(kShown), ", "), keys.size());
}

Milliseconds plus_grace(Milliseconds t) {
  const Milliseconds grace = std::clamp(t, kMinServerGrace, kMaxServerGrace);
  return t >= Milliseconds::max() - grace ? Milliseconds::max() : t + grace;
}

// The option, else C10D_STORE_TOKEN (refused when set but empty), else none.
std::string resolve_token(const TCPStoreOptions& options) {
  if (!options.token.empty()) return options.token;
  return core::token_from_env().value_or(std::string());
}

std::string format_address(const std::string& host, std::uint16_t port) {
  return host.find(':') != std::string::npos ? fmt::format("[{}]:{}", host, port)
                                             : fmt::format("{}:{}", host, port);
}

std::string quoted(std::string_view key) { return fmt::format("'{}'", key); }

}  // namespace

TCPStore::TCPStore(TCPStoreOptions options) : Store(options.timeout) {
  options.token = resolve_token(options);
  if (options.is_server) {
    store::ServerOptions server_options;
    server_options.host = options.host;
    server_options.port = options.port;
    server_options.token = options.token;
    server_options.limits = options.limits;
    server_ = std::make_unique<TCPStoreServer>(std::move(server_options));
    options.port = server_->port();
  }
  impl_ = std::make_unique<Impl>();
  impl_->limits = options.limits;
  impl_->address = format_address(options.host, options.port);
  impl_->label = "store " + impl_->address;
  impl_->options = std::move(options);
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->connect(deadline_after(impl_->options.timeout));
}

TCPStore::~TCPStore() {
  impl_.reset();    // close our connection first
  server_.reset();  // then stop the hosted server, if any
}

const std::string& TCPStore::host() const { return impl_->options.host; }
std::uint16_t TCPStore::port() const { return impl_->options.port; }
std::string TCPStore::address() const { return impl_->address; }

void TCPStore::set(std::string_view key, std::span<const std::uint8_t> value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_key(key);
  impl_->check_value(value);
  impl_->send_only(
      Kind::kSet, timeout(),
      [&](Bytes& out) {
        store::wire::put_string(out, key);
        store::wire::put_bytes(out, value);
      },
      "SET of key " + quoted(key));
}

Bytes TCPStore::get(std::string_view key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_key(key);
  const Milliseconds t = timeout();
  auto r = impl_->call(
      Kind::kGet, plus_grace(t),
      [&](Bytes& out) {
        store::wire::put_u64(out, static_cast<std::uint64_t>(t.count()));
        store::wire::put_string(out, key);
      },
      "GET of key " + quoted(key), t);
  return impl_->value_of(r, "GET");
}

std::int64_t TCPStore::add(std::string_view key, std::int64_t delta) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_key(key);
  auto r = impl_->call(
      Kind::kAdd, timeout(),
      [&](Bytes& out) {
        store::wire::put_string(out, key);
        store::wire::put_u64(out, static_cast<std::uint64_t>(delta));
      },
      "ADD to key " + quoted(key));
  return impl_->int_of(r, "ADD");
}

Bytes TCPStore::compare_set(std::string_view key, std::span<const std::uint8_t> expected,
                            std::span<const std::uint8_t> desired) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_key(key);
  impl_->check_value(expected);
  impl_->check_value(desired);
  auto r = impl_->call(
      Kind::kCompareSet, timeout(),
      [&](Bytes& out) {
        store::wire::put_string(out, key);
        store::wire::put_bytes(out, expected);
        store::wire::put_bytes(out, desired);
      },
      "COMPARE_SET of key " + quoted(key));
  return impl_->value_of(r, "COMPARE_SET");
}

bool TCPStore::check(std::span<const std::string> keys) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_keys(keys);
  auto r = impl_->call(
      Kind::kCheck, timeout(), [&](Bytes& out) { store::wire::put_key_list(out, keys); },
      "CHECK of keys " + keys_text(keys));
  return !r.payload.empty() && r.payload[0] != 0;
}

void TCPStore::wait(std::span<const std::string> keys, Milliseconds wait_timeout) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_keys(keys);
  impl_->call(
      Kind::kWait, plus_grace(wait_timeout),
      [&](Bytes& out) {
        store::wire::put_u64(out, static_cast<std::uint64_t>(wait_timeout.count()));
        store::wire::put_key_list(out, keys);
      },
      "WAIT for keys " + keys_text(keys), wait_timeout);
}

bool TCPStore::delete_key(std::string_view key) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_key(key);
  auto r = impl_->call(
      Kind::kDelete, timeout(), [&](Bytes& out) { store::wire::put_string(out, key); },
      "DELETE of key " + quoted(key));
  return !r.payload.empty() && r.payload[0] != 0;
}

std::int64_t TCPStore::num_keys() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto r = impl_->call(
      Kind::kNumKeys, timeout(), [](Bytes&) {}, "NUM_KEYS");
  return impl_->int_of(r, "NUM_KEYS");
}

void TCPStore::append(std::string_view key, std::span<const std::uint8_t> value) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_key(key);
  impl_->check_value(value);
  impl_->call(
      Kind::kAppend, timeout(),
      [&](Bytes& out) {
        store::wire::put_string(out, key);
        store::wire::put_bytes(out, value);
      },
      "APPEND to key " + quoted(key));
}

std::vector<Bytes> TCPStore::multi_get(std::span<const std::string> keys) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->check_keys(keys);
  // Even empty values take 4 bytes each in the answer: a list too long for the answer limit is
  // refused here, with the error the server would give (StoreError either way).
  const std::uint64_t least = store::wire::multi_get_answer_bytes(keys.size(), 0);
  if (least > impl_->options.limits.max_response_bytes) {
    C10D_THROW(StoreError,
               "store {}: MULTI_GET of {} keys would answer at least {} bytes, over the limit "
               "of {} bytes per answer (max_response_bytes)",
               impl_->address, keys.size(), least, impl_->options.limits.max_response_bytes);
  }
  const Milliseconds t = timeout();
  auto r = impl_->call(
      Kind::kMultiGet, plus_grace(t),
      [&](Bytes& out) {
        store::wire::put_u64(out, static_cast<std::uint64_t>(t.count()));
        store::wire::put_key_list(out, keys);
      },
      "MULTI_GET of keys " + keys_text(keys), t);
  store::wire::Reader reader(r.payload, impl_->options.limits);
  std::uint32_t n = 0;
  reader.count(n);
  std::vector<Bytes> values;
  values.reserve(n);
  for (std::uint32_t i = 0; i < n; ++i) {
    std::span<const std::uint8_t> v;
    if (!reader.value(v)) break;
    values.emplace_back(v.begin(), v.end());
  }
  if (!reader.finish().ok() || values.size() != keys.size()) impl_->malformed("MULTI_GET");
  impl_->trim_input();
  return values;
}

void TCPStore::multi_set(std::span<const std::string> keys, std::span<const Bytes> values) {
  std::lock_guard<std::mutex> lock(impl_->mu);
  C10D_CHECK(keys.size() == values.size(), "multi_set: {} keys but {} values", keys.size(),
             values.size());
  impl_->check_keys(keys);
  for (const auto& v : values) impl_->check_value(v);
  impl_->call(
      Kind::kMultiSet, timeout(),
      [&](Bytes& out) {
        store::wire::put_u32(out, static_cast<std::uint32_t>(keys.size()));
        for (std::size_t i = 0; i < keys.size(); ++i) {
          store::wire::put_string(out, keys[i]);
          store::wire::put_bytes(out, values[i]);
        }
      },
      "MULTI_SET of keys " + keys_text(keys));
}

}  // namespace c10d::inline v1
