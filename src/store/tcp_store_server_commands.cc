// The store server's commands (tcp_store_server_impl.h; the frames are drawn in wire.h): the
// key-value map and the waiters parked on missing keys, and serve_request(), which answers each
// request after the handshake: SET, GET, ADD, COMPARE_SET, CHECK, WAIT, MULTI_GET, DELETE,
// NUM_KEYS, APPEND, MULTI_SET.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <optional>
#include <string>
#include <string_view>

#include "core/logging.h"
#include "core/parse.h"
#include "store/store_util.h"
#include "store/tcp_store_server_impl.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;

std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace

// ---- keys and waiters ----

void TCPStoreServer::Impl::notify(std::string_view key) {
  auto it = waiters.find(key);
  if (it == waiters.end()) return;
  std::vector<Waiter*> list = std::move(it->second);
  waiters.erase(it);
  for (Waiter* w : list) {
    if (--w->missing == 0) w->timer.cancel();
  }
}

void TCPStoreServer::Impl::put(std::string_view key, std::span<const std::uint8_t> value) {
  auto it = data.find(key);
  if (it == data.end()) {
    data.emplace(std::string(key), Bytes(value.begin(), value.end()));
  } else {
    it->second.assign(value.begin(), value.end());
  }
  keys.store(data.size(), std::memory_order_relaxed);
  notify(key);
}

// Parks the connection until every key exists or the deadline passes; true when they exist.
awaitable<bool> TCPStoreServer::Impl::wait_for(Connection& conn,
                                               const std::vector<std::string_view>& want,
                                               std::uint64_t timeout_ms) {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(std::min<std::uint64_t>(timeout_ms, 365ull * 24 * 3600 * 1000));
  for (;;) {
    Waiter w(io);
    for (std::string_view k : want) {
      if (!data.contains(k)) {
        ++w.missing;
        waiters[std::string(k)].push_back(&w);
      }
    }
    if (w.missing == 0) co_return true;
    if (stopping || std::chrono::steady_clock::now() >= deadline) {
      unregister(w, want);
      co_return false;
    }
    w.timer.expires_at(deadline);
    conn.waiter = &w;
    held.fetch_add(1, std::memory_order_relaxed);
    error_code ec;
    co_await w.timer.async_wait(asio::redirect_error(use_awaitable, ec));
    held.fetch_sub(1, std::memory_order_relaxed);
    conn.waiter = nullptr;
    unregister(w, want);
    // Woken: all keys were set (one may have been deleted since: look again), the deadline
    // passed, or the server is stopping.
  }
}

void TCPStoreServer::Impl::unregister(Waiter& w, const std::vector<std::string_view>& want) {
  for (std::string_view k : want) {
    auto it = waiters.find(k);
    if (it == waiters.end()) continue;
    std::erase(it->second, &w);
    if (it->second.empty()) waiters.erase(it);
  }
}

// ---- responses ----

std::size_t TCPStoreServer::Impl::begin_ok(Bytes& out, Kind kind) {
  std::size_t start =
      store::wire::begin_frame(out, static_cast<std::uint8_t>(kind) | store::wire::kResponseBit);
  out.push_back(static_cast<std::uint8_t>(Status::kOk));
  return start;
}

void TCPStoreServer::Impl::put_i64(Bytes& out, std::int64_t v) {
  store::wire::put_u64(out, static_cast<std::uint64_t>(v));
}

// Serves one decoded request (after the handshake), appending its response to conn.out.
// Returns false when the connection must be closed after the response is flushed.
//
// A request that answers with values (GET, COMPARE_SET, MULTI_GET) sizes its answer first:
// over max_response_bytes it is refused, and a large one waits for room (wait_for_room()),
// then looks again, since the keys may have changed while it waited.
awaitable<bool> TCPStoreServer::Impl::serve_request(Connection& conn,
                                                    const store::wire::Request& req) {
  using store::wire::encode_error;
  using store::wire::put_bytes;
  Bytes& out = conn.out;
  switch (req.kind) {
    case Kind::kSet:  // no answer when it succeeds (wire.h)
      put(req.keys[0], req.values[0]);
      break;
    case Kind::kGet: {
      for (;;) {
        auto it = data.find(req.keys[0]);
        if (it == data.end()) {
          if (!out.empty()) co_await flush(conn);
          if (!co_await wait_for(conn, req.keys, req.timeout_ms)) {
            encode_error(
                out, req.kind, Status::kTimeout,
                fmt::format("key '{}' was not set within {} ms", req.keys[0], req.timeout_ms));
            break;
          }
          continue;
        }
        // Within max_response_bytes: the constructor checks that a largest value fits.
        const std::uint64_t bytes = store::wire::value_answer_bytes(it->second.size());
        if (!answer_fits(conn, bytes)) {
          if (!co_await wait_for_room(conn, req.kind, bytes)) break;
          continue;
        }
        out.reserve(out.size() + store::wire::kHeaderBytes + bytes);
        std::size_t start = begin_ok(out, req.kind);
        put_bytes(out, it->second);
        store::wire::end_frame(out, start);
        break;
      }
      break;
    }
    case Kind::kAdd: {
      auto it = data.find(req.keys[0]);
      const auto parsed =
          it == data.end() ? std::optional<std::int64_t>(0) : store::parse_int64(it->second);
      if (!parsed) {
        encode_error(out, req.kind, Status::kNotInteger,
                     fmt::format("add to key '{}': its value is not an integer", req.keys[0]));
        break;
      }
      const std::int64_t current = *parsed;
      std::int64_t sum = 0;
      if (__builtin_add_overflow(current, req.delta, &sum)) {
        encode_error(out, req.kind, Status::kOutOfRange,
                     fmt::format("add of {} to key '{}' (value {}) would overflow int64", req.delta,
                                 req.keys[0], current));
        break;
      }
      char text[24];
      auto [end, ec] = std::to_chars(text, text + sizeof(text), sum);
      put(req.keys[0], as_bytes(std::string_view(text, end - text)));
      std::size_t start = begin_ok(out, req.kind);
      put_i64(out, sum);
      store::wire::end_frame(out, start);
      break;
    }
    case Kind::kCompareSet: {
      const auto& expected = req.values[0];
      const auto& desired = req.values[1];
      for (;;) {
        auto it = data.find(req.keys[0]);
        // The answer is one of the three values; room is made for the largest.
        const std::uint64_t bytes = store::wire::value_answer_bytes(
            std::max({it == data.end() ? std::size_t{0} : it->second.size(), expected.size(),
                      desired.size()}));
        if (!answer_fits(conn, bytes)) {
          if (!co_await wait_for_room(conn, req.kind, bytes)) break;
          continue;
        }
        std::span<const std::uint8_t> result;
        if ((it == data.end() && expected.empty()) ||
            (it != data.end() &&
             std::equal(it->second.begin(), it->second.end(), expected.begin(), expected.end()))) {
          put(req.keys[0], desired);
          result = desired;
        } else if (it == data.end()) {
          result = expected;
        } else {
          result = it->second;
        }
        out.reserve(out.size() + store::wire::kHeaderBytes + bytes);
        std::size_t start = begin_ok(out, req.kind);
        put_bytes(out, result);
        store::wire::end_frame(out, start);
        break;
      }
      break;
    }
    case Kind::kCheck: {
      bool all = true;
      for (auto k : req.keys) all = all && data.contains(k);
      std::size_t start = begin_ok(out, req.kind);
      out.push_back(all ? 1 : 0);
      store::wire::end_frame(out, start);
      break;
    }
    case Kind::kWait:
    case Kind::kMultiGet: {
      for (;;) {
        if (!out.empty()) co_await flush(conn);
        if (!co_await wait_for(conn, req.keys, req.timeout_ms)) {
          // A few keys by name: the message stays readable, and small however long the list
          // (an answer, too, must fit max_response_bytes).
          constexpr std::size_t kNamed = 8;
          std::vector<std::string_view> missing;
          std::size_t count = 0;
          for (auto k : req.keys) {
            if (data.contains(k)) continue;
            if (++count <= kNamed) missing.push_back(k);
          }
          encode_error(
              out, req.kind, Status::kTimeout,
              fmt::format("keys [{}{}] were not set within {} ms", fmt::join(missing, ", "),
                          count > kNamed ? fmt::format(", ... {} keys missing in all", count)
                                         : std::string(),
                          req.timeout_ms));
          break;
        }
        if (req.kind == Kind::kWait) {
          store::wire::end_frame(out, begin_ok(out, req.kind));
          break;
        }
        // A small request may name one large value many times: the answer is sized before
        // it is built.
        std::uint64_t value_bytes = 0;
        for (auto k : req.keys) value_bytes += data.find(k)->second.size();
        const std::uint64_t bytes =
            store::wire::multi_get_answer_bytes(req.keys.size(), value_bytes);
        if (bytes > options.limits.max_response_bytes) {
          encode_error(out, req.kind, Status::kResponseTooLarge,
                       fmt::format("MULTI_GET of {} keys would answer {} bytes, over the limit "
                                   "of {} bytes per answer (max_response_bytes)",
                                   req.keys.size(), bytes, options.limits.max_response_bytes));
          break;
        }
        if (!answer_fits(conn, bytes)) {
          if (!co_await wait_for_room(conn, req.kind, bytes)) break;
          continue;
        }
        out.reserve(out.size() + store::wire::kHeaderBytes + bytes);
        std::size_t start = begin_ok(out, req.kind);
        store::wire::put_u32(out, static_cast<std::uint32_t>(req.keys.size()));
        for (auto k : req.keys) put_bytes(out, data.find(k)->second);
        store::wire::end_frame(out, start);
        break;
      }
      break;
    }
    case Kind::kDelete: {
      auto it = data.find(req.keys[0]);
      const bool existed = it != data.end();
      if (existed) data.erase(it);
      keys.store(data.size(), std::memory_order_relaxed);
      std::size_t start = begin_ok(out, req.kind);
      out.push_back(existed ? 1 : 0);
      store::wire::end_frame(out, start);
      break;
    }
    case Kind::kNumKeys: {
      std::size_t start = begin_ok(out, req.kind);
      put_i64(out, static_cast<std::int64_t>(data.size()));
      store::wire::end_frame(out, start);
      break;
    }
    case Kind::kAppend: {
      auto it = data.find(req.keys[0]);
      if (it != data.end() &&
          it->second.size() + req.values[0].size() > options.limits.max_value_bytes) {
        encode_error(out, req.kind, Status::kLimitExceeded,
                     fmt::format("append to key '{}' would make a value of {} bytes, over the "
                                 "limit of {}",
                                 req.keys[0], it->second.size() + req.values[0].size(),
                                 options.limits.max_value_bytes));
        break;
      }
      if (it == data.end()) {
        put(req.keys[0], req.values[0]);
      } else {
        it->second.insert(it->second.end(), req.values[0].begin(), req.values[0].end());
        notify(req.keys[0]);
      }
      store::wire::end_frame(out, begin_ok(out, req.kind));
      break;
    }
    case Kind::kMultiSet: {
      for (std::size_t i = 0; i < req.keys.size(); ++i) put(req.keys[i], req.values[i]);
      store::wire::end_frame(out, begin_ok(out, req.kind));
      break;
    }
    case Kind::kHello:
    case Kind::kAuth:
      encode_error(out, req.kind, Status::kBadRequest,
                   fmt::format("{} after the handshake", store::wire::kind_name(req.kind)));
      co_return false;
  }
  co_return true;
}

}  // namespace c10d::inline v1
