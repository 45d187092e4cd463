// The TCP store server: see tcp_store_server.h for the contract and wire.h for the frames.
//
// Words used here: a *connection* is one accepted socket served by one coroutine; a *frame* is
// one request as drawn in wire.h; a *waiter* is a connection parked until a set of keys exists
// or its deadline passes. Everything below runs on the io thread except the public methods,
// which only post to it or read atomics.
#include "store/tcp_store_server.h"

#include <sys/resource.h>

#include <atomic>
#include <charconv>
#include <future>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "core/logging.h"
#include "store/asio.h"
#include "store/store_util.h"
#include "store/wire.h"

namespace c10d {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;
using Socket = asio::generic::stream_protocol::socket;  // a TCP or a Unix stream socket
using asio::socket_base;
using boost::system::error_code;
using store::wire::Kind;
using store::wire::Status;

// Responses are flushed once this many bytes are pending, so pipelined GETs of large values
// cannot grow a connection's output without bound.
constexpr std::size_t kFlushBytes = 256 * 1024;
constexpr std::size_t kInitialReadBuffer = 4096;
// The largest HELLO or AUTH body (AUTH: a 32-byte MAC), with room to spare.
constexpr std::uint64_t kMaxHandshakeBody = 64;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace

void store::raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

struct TCPStoreServer::Impl {
  struct Waiter {
    explicit Waiter(asio::io_context& io) : timer(io) {}
    std::size_t missing = 0;
    asio::steady_timer timer;
  };

  enum class Phase { kHello, kAuth, kReady };

  struct Connection {
    Connection(Socket s, std::string p, asio::io_context& io)
        : socket(std::move(s)), peer(std::move(p)), handshake_timer(io) {}
    ~Connection() { *alive = false; }
    Socket socket;
    std::string peer;
    // Closes the connection unless the handshake is done in time, so silent or half-open
    // connections cannot pile up. Destroyed (so cancelled) with the connection.
    asio::steady_timer handshake_timer;
    // Read by the timer's handler, which may already be queued when the connection ends.
    std::shared_ptr<bool> alive = std::make_shared<bool>(true);
    Phase phase = Phase::kHello;
    Waiter* waiter = nullptr;  // the wait this connection is parked in, if any
  };

  explicit Impl(store::ServerOptions opts) : options(std::move(opts)) {}

  // ---- state owned by the io thread (declared before io, so it outlives every coroutine
  // frame that io's destructor may still destroy) ----
  StringMap<Bytes> data;
  StringMap<std::vector<Waiter*>> waiters;
  std::unordered_set<Connection*> connections;
  bool stopping = false;

  store::ServerOptions options;
  std::uint16_t port = 0;
  std::atomic<std::uint64_t> local_accepted{0};
  std::atomic<std::uint64_t> accepted{0}, open{0}, rejected{0}, requests{0}, held{0}, keys{0};
  std::once_flag stop_once;

  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  // Same-host clients switch to this abstract Unix socket after their TCP handshake: it skips
  // the TCP/IP stack, which is most of a small request's cost on loopback. Its random name is
  // announced in the HELLO answer; it exists only in this network namespace.
  asio::local::stream_protocol::acceptor local_acceptor{io};
  std::string local_name;  // without the leading NUL; empty when there is none
  std::thread thread;

  // ---- keys and waiters ----

  void notify(std::string_view key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    std::vector<Waiter*> list = std::move(it->second);
    waiters.erase(it);
    for (Waiter* w : list) {
      if (--w->missing == 0) w->timer.cancel();
    }
  }

  void put(std::string_view key, std::span<const std::uint8_t> value) {
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
  awaitable<bool> wait_for(Connection& conn, const std::vector<std::string_view>& want,
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

  void unregister(Waiter& w, const std::vector<std::string_view>& want) {
    for (std::string_view k : want) {
      auto it = waiters.find(k);
      if (it == waiters.end()) continue;
      std::erase(it->second, &w);
      if (it->second.empty()) waiters.erase(it);
    }
  }

  // ---- responses ----

  static std::size_t begin_ok(Bytes& out, Kind kind) {
    std::size_t start =
        store::wire::begin_frame(out, static_cast<std::uint8_t>(kind) | store::wire::kResponseBit);
    out.push_back(static_cast<std::uint8_t>(Status::kOk));
    return start;
  }

  static void put_i64(Bytes& out, std::int64_t v) {
    store::wire::put_u64(out, static_cast<std::uint64_t>(v));
  }

  // Serves one decoded request (after the handshake), appending its response to `out`.
  // Returns false when the connection must be closed after the response is flushed.
  awaitable<bool> serve_request(Connection& conn, const store::wire::Request& req, Bytes& out) {
    using store::wire::encode_error;
    using store::wire::put_bytes;
    switch (req.kind) {
      case Kind::kSet:  // no answer when it succeeds (wire.h)
        put(req.keys[0], req.values[0]);
        break;
      case Kind::kGet: {
        if (!data.contains(req.keys[0])) {
          if (!out.empty()) co_await flush(conn, out);
          if (!co_await wait_for(conn, req.keys, req.timeout_ms)) {
            encode_error(
                out, req.kind, Status::kTimeout,
                fmt::format("key '{}' was not set within {} ms", req.keys[0], req.timeout_ms));
            break;
          }
        }
        std::size_t start = begin_ok(out, req.kind);
        put_bytes(out, data.find(req.keys[0])->second);
        store::wire::end_frame(out, start);
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
                       fmt::format("add of {} to key '{}' (value {}) would overflow int64",
                                   req.delta, req.keys[0], current));
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
        auto it = data.find(req.keys[0]);
        std::span<const std::uint8_t> result;
        Bytes current;
        if ((it == data.end() && expected.empty()) ||
            (it != data.end() &&
             std::equal(it->second.begin(), it->second.end(), expected.begin(), expected.end()))) {
          put(req.keys[0], desired);
          result = desired;
        } else if (it == data.end()) {
          result = expected;
        } else {
          current = it->second;
          result = current;
        }
        std::size_t start = begin_ok(out, req.kind);
        put_bytes(out, result);
        store::wire::end_frame(out, start);
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
        if (!out.empty()) co_await flush(conn, out);
        if (!co_await wait_for(conn, req.keys, req.timeout_ms)) {
          std::vector<std::string_view> missing;
          for (auto k : req.keys) {
            if (!data.contains(k)) missing.push_back(k);
          }
          encode_error(out, req.kind, Status::kTimeout,
                       fmt::format("keys [{}] were not set within {} ms", fmt::join(missing, ", "),
                                   req.timeout_ms));
          break;
        }
        std::size_t start = begin_ok(out, req.kind);
        if (req.kind == Kind::kMultiGet) {
          store::wire::put_u32(out, static_cast<std::uint32_t>(req.keys.size()));
          for (auto k : req.keys) put_bytes(out, data.find(k)->second);
        }
        store::wire::end_frame(out, start);
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

  awaitable<void> flush(Connection& conn, Bytes& out) {
    error_code ec;
    co_await asio::async_write(conn.socket, asio::buffer(out),
                               asio::redirect_error(use_awaitable, ec));
    out.clear();
    if (ec) throw boost::system::system_error(ec);
  }

  void reject(Connection& conn, const std::string& why) {
    rejected.fetch_add(1, std::memory_order_relaxed);
    C10D_LOG_WARN("store server :{}: closing connection from {}: {}", port, conn.peer, why);
  }

  // One connection: read frames into `in`, serve them in order, write responses.
  awaitable<void> serve(Socket socket, std::string peer) {
    // co_spawn runs this body later: a connection accepted just before stop() must not join
    // `connections` after shutdown() swept it.
    if (stopping) co_return;
    Connection conn(std::move(socket), std::move(peer), io);
    error_code ec;
    conn.socket.non_blocking(true, ec);
    conn.handshake_timer.expires_after(options.handshake_timeout);
    conn.handshake_timer.async_wait([this, &conn, alive = conn.alive](error_code timer_ec) {
      if (timer_ec || !*alive || conn.phase == Phase::kReady) return;
      reject(conn, "no handshake within the deadline");
      error_code ignored;
      conn.socket.close(ignored);
    });
    connections.insert(&conn);
    open.fetch_add(1, std::memory_order_relaxed);
    try {
      co_await serve_frames(conn);
    } catch (const boost::system::system_error&) {
      // The peer went away, or stop() closed the socket: nothing to answer.
    } catch (const std::exception& e) {
      reject(conn, e.what());
    }
    connections.erase(&conn);
    open.fetch_sub(1, std::memory_order_relaxed);
  }

  awaitable<void> serve_frames(Connection& conn) {
    const auto& limits = options.limits;
    store::wire::Nonce nonce{};
    Bytes in(kInitialReadBuffer);
    std::size_t begin = 0, end = 0;  // unread bytes are in[begin, end)
    Bytes out;
    store::wire::Request req;

    // Reads more bytes so that at least `need` unread bytes are buffered.
    auto fill = [&](std::size_t need) -> awaitable<void> {
      if (begin + need > in.size()) {
        std::memmove(in.data(), in.data() + begin, end - begin);
        end -= begin;
        begin = 0;
      }
      // Before waiting for input, send what is already answered: a pipelining client may be
      // waiting for it before it sends the rest.
      if (!out.empty()) co_await flush(conn, out);
      while (end - begin < need) {
        // The buffer grows with the bytes that actually arrive (at most doubling), never to a
        // size a header merely claims: a client that announces 64 MiB and sends nothing costs
        // a few KiB.
        if (end == in.size()) in.resize(std::min(need, 2 * in.size()));
        end += co_await conn.socket.async_read_some(asio::buffer(in.data() + end, in.size() - end),
                                                    use_awaitable);
      }
    };

    for (;;) {
      if (end - begin < store::wire::kHeaderBytes) co_await fill(store::wire::kHeaderBytes);
      store::wire::Header h;
      auto hs = store::wire::decode_header({in.data() + begin, end - begin}, false, limits, h);
      if (!hs.ok()) {
        const std::string why = store::wire::describe(hs, limits);
        if (hs.code == store::wire::DecodeCode::kBadVersion) {
          store::wire::encode_error(
              out, Kind::kHello, Status::kVersionMismatch,
              fmt::format("protocol version mismatch: the client speaks version {}, this server "
                          "speaks version {}",
                          h.version, store::wire::kVersion));
        } else if (hs.code == store::wire::DecodeCode::kFrameTooLarge) {
          store::wire::encode_error(out, Kind::kHello, Status::kLimitExceeded, why);
        }
        reject(conn, why);
        break;
      }
      // HELLO and AUTH bodies are a few bytes: before the handshake nothing larger is read.
      if (conn.phase != Phase::kReady && h.body_bytes > kMaxHandshakeBody) {
        store::wire::encode_error(out, static_cast<Kind>(h.kind), Status::kBadRequest,
                                  "a frame before the handshake is done must be HELLO or AUTH");
        reject(conn, fmt::format("{}-byte frame before the handshake", h.body_bytes));
        break;
      }
      const std::size_t frame = store::wire::kHeaderBytes + static_cast<std::size_t>(h.body_bytes);
      if (end - begin < frame) co_await fill(frame);
      const Kind kind = static_cast<Kind>(h.kind);
      // Before the handshake is done only its own frame is read; anything else is refused
      // without decoding its body.
      if (conn.phase == Phase::kHello && kind != Kind::kHello) {
        store::wire::encode_error(out, kind, Status::kBadRequest,
                                  "the first request on a connection must be HELLO");
        reject(conn, fmt::format("{} before HELLO", store::wire::kind_name(kind)));
        break;
      }
      if (conn.phase == Phase::kAuth && kind != Kind::kAuth) {
        store::wire::encode_error(out, kind, Status::kAuthRequired,
                                  "this store requires authentication: set C10D_STORE_TOKEN "
                                  "(or the token option) to the store's shared secret");
        reject(conn, fmt::format("{} without authentication", store::wire::kind_name(kind)));
        break;
      }
      auto ds = store::wire::decode_request(
          kind, {in.data() + begin + store::wire::kHeaderBytes, h.body_bytes}, limits, req);
      requests.fetch_add(1, std::memory_order_relaxed);
      if (!ds.ok()) {
        const bool limit = ds.code == store::wire::DecodeCode::kKeyTooLarge ||
                           ds.code == store::wire::DecodeCode::kValueTooLarge ||
                           ds.code == store::wire::DecodeCode::kTooManyKeys;
        const std::string why = fmt::format("{} request: {}", store::wire::kind_name(kind),
                                            store::wire::describe(ds, limits));
        store::wire::encode_error(out, kind, limit ? Status::kLimitExceeded : Status::kBadRequest,
                                  why);
        reject(conn, why);
        break;
      }
      bool keep = true;
      if (conn.phase == Phase::kHello) {
        const bool auth = !options.token.empty();
        if (auth) nonce = store::wire::random_nonce();
        std::size_t start = begin_ok(out, kind);
        out.push_back(auth ? 1 : 0);
        out.insert(out.end(), nonce.begin(), nonce.end());
        store::wire::put_u64(out, limits.max_key_bytes);
        store::wire::put_u64(out, limits.max_value_bytes);
        store::wire::put_u64(out, limits.max_keys_per_op);
        store::wire::put_u64(out, limits.max_frame_bytes);
        store::wire::put_string(out, local_name);
        store::wire::end_frame(out, start);
        conn.phase = auth ? Phase::kAuth : Phase::kReady;
      } else if (conn.phase == Phase::kAuth) {
        if (!store::wire::mac_equal(req.mac, store::wire::auth_mac(options.token, nonce))) {
          store::wire::encode_error(out, kind, Status::kAuthFailed,
                                    "authentication failed: the client's token does not match "
                                    "the store's");
          reject(conn, "wrong token");
          break;
        }
        store::wire::end_frame(out, begin_ok(out, kind));
        conn.phase = Phase::kReady;
      } else {
        keep = co_await serve_request(conn, req, out);
      }
      begin += frame;
      if (begin == end) begin = end = 0;
      if (!keep) break;
      if (out.size() >= kFlushBytes) co_await flush(conn, out);
    }
    // Closing: send what was answered (an error frame, usually), best effort.
    if (!out.empty()) {
      error_code ec;
      co_await asio::async_write(conn.socket, asio::buffer(out),
                                 asio::redirect_error(use_awaitable, ec));
    }
    error_code ignored;
    conn.socket.shutdown(socket_base::shutdown_both, ignored);
    conn.socket.close(ignored);
  }

  // Accepts connections on `acceptor` (TCP or Unix) until the server stops; each is served by
  // its own coroutine.
  template <typename Acceptor>
  awaitable<void> accept_loop(Acceptor& acceptor_ref) {
    constexpr bool kLocal = std::is_same_v<Acceptor, asio::local::stream_protocol::acceptor>;
    for (;;) {
      error_code ec;
      auto socket = co_await acceptor_ref.async_accept(asio::redirect_error(use_awaitable, ec));
      if (stopping || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        // Out of descriptors, or a connection reset before accept: back off briefly, go on.
        C10D_LOG_WARN("store server :{}: accept failed: {}", port, ec.message());
        asio::steady_timer pause(io, std::chrono::milliseconds(10));
        co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      std::string peer = "local";
      if constexpr (!kLocal) {
        socket.set_option(tcp::no_delay(true), ec);
        auto ep = socket.remote_endpoint(ec);
        peer = ec ? std::string("?") : fmt::format("{}:{}", ep.address().to_string(), ep.port());
      } else {
        local_accepted.fetch_add(1, std::memory_order_relaxed);
      }
      accepted.fetch_add(1, std::memory_order_relaxed);
      asio::co_spawn(io, serve(Socket(std::move(socket)), std::move(peer)), asio::detached);
    }
  }

  // Listens on an abstract Unix socket with a random name; on failure, serves TCP only.
  void open_local_acceptor() {
    const auto nonce = store::wire::random_nonce();
    std::string name = "c10d-store-";
    for (int i = 0; i < 12; ++i) name += fmt::format("{:02x}", nonce[i]);
    error_code ec;
    asio::local::stream_protocol::endpoint endpoint(std::string(1, '\0') + name);
    local_acceptor.open(endpoint.protocol(), ec);
    if (!ec) local_acceptor.bind(endpoint, ec);
    if (!ec) local_acceptor.listen(options.backlog, ec);
    if (ec) {
      C10D_LOG_INFO("store server :{}: no local socket ({}); TCP only", port, ec.message());
      local_acceptor.close(ec);
      return;
    }
    local_name = std::move(name);
    asio::co_spawn(io, accept_loop(local_acceptor), asio::detached);
  }

  // The io thread's loop. While requests keep coming it polls the reactor instead of sleeping
  // in epoll_wait: a thread woken from epoll takes tens of microseconds to run again on virtual
  // machines, more than a request costs to serve. After kSpinWindow without work it blocks, so
  // an idle server (the usual case, hosted inside rank 0) costs nothing, and it regains the
  // scheduler's favour for waking threads when many client processes share the cores.
  void run() {
    constexpr auto kSpinWindow = std::chrono::microseconds(50);
    auto last_work = std::chrono::steady_clock::now();
    while (!io.stopped()) {
      if (io.poll() > 0) {
        last_work = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - last_work > kSpinWindow) {
        io.run_one();
        last_work = std::chrono::steady_clock::now();
      }
    }
  }

  // Runs on the io thread: closes everything so every coroutine finishes.
  void shutdown() {
    stopping = true;
    error_code ec;
    acceptor.close(ec);
    local_acceptor.close(ec);
    for (Connection* c : connections) {
      c->socket.shutdown(socket_base::shutdown_both, ec);
      c->socket.close(ec);
      if (c->waiter != nullptr) c->waiter->timer.cancel();
    }
  }
};

TCPStoreServer::TCPStoreServer(store::ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& s = *impl_;
  const StoreLimits& l = s.options.limits;
  // Lengths travel as u32 on the wire; a frame must hold one key and one value.
  C10D_CHECK(l.max_key_bytes <= UINT32_MAX && l.max_value_bytes <= UINT32_MAX &&
                 l.max_keys_per_op <= UINT32_MAX,
             "store limits: key {} / value {} bytes and {} keys per request must each fit in 32 "
             "bits",
             l.max_key_bytes, l.max_value_bytes, l.max_keys_per_op);
  C10D_CHECK(l.max_frame_bytes >= l.max_key_bytes + l.max_value_bytes + 64,
             "store limits: a request of at most {} bytes cannot carry a {}-byte key and a "
             "{}-byte value",
             l.max_frame_bytes, l.max_key_bytes, l.max_value_bytes);
  const std::string& host = s.options.host;
  error_code ec;
  tcp::endpoint endpoint;
  if (host.empty() || host == "0.0.0.0") {
    endpoint = tcp::endpoint(tcp::v4(), s.options.port);
  } else if (host == "::") {
    endpoint = tcp::endpoint(tcp::v6(), s.options.port);
  } else {
    auto address = asio::ip::make_address(host, ec);
    if (ec) {
      tcp::resolver resolver(s.io);
      auto results = resolver.resolve(host, std::to_string(s.options.port), ec);
      if (ec || results.empty()) {
        C10D_THROW(NetworkError, "store server: cannot resolve host '{}': {}", host,
                   ec ? ec.message() : "no addresses");
      }
      endpoint = results.begin()->endpoint();
    } else {
      endpoint = tcp::endpoint(address, s.options.port);
    }
  }
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(s.options.backlog, ec);
  if (ec) {
    C10D_THROW(NetworkError, "store server: cannot listen on {}:{}: {}", host, s.options.port,
               ec.message());
  }
  s.port = s.acceptor.local_endpoint().port();
  asio::co_spawn(s.io, s.accept_loop(s.acceptor), asio::detached);
  if (s.options.local_socket) s.open_local_acceptor();
  s.thread = std::thread([&s] {
    try {
      s.run();
    } catch (const std::exception& e) {
      C10D_LOG_ERROR("store server :{}: io thread failed: {}", s.port, e.what());
    }
  });
  C10D_LOG_INFO("store server listening on {}:{}{}", host, s.port,
                s.options.token.empty() ? "" : " (token required)");
}

TCPStoreServer::~TCPStoreServer() { stop(); }

std::uint16_t TCPStoreServer::port() const { return impl_->port; }

const std::string& TCPStoreServer::host() const { return impl_->options.host; }

void TCPStoreServer::stop() {
  Impl& s = *impl_;
  // Every caller returns once the server has stopped; the first one does the stopping.
  std::call_once(s.stop_once, [&s] {
    asio::post(s.io, [&s] { s.shutdown(); });
    if (s.thread.get_id() == std::this_thread::get_id()) return;  // cannot join itself
    // Every coroutine ends once its socket is closed; the thread then leaves run(). The
    // watchdog stops the context outright should a coroutine fail to finish within a second.
    std::promise<void> done;
    std::thread watchdog([&s, finished = done.get_future()] {
      if (finished.wait_for(std::chrono::seconds(1)) == std::future_status::timeout) s.io.stop();
    });
    if (s.thread.joinable()) s.thread.join();
    done.set_value();
    watchdog.join();
  });
}

store::ServerStats TCPStoreServer::stats() const {
  const Impl& s = *impl_;
  store::ServerStats st;
  st.connections_accepted = s.accepted.load();
  st.local_connections_accepted = s.local_accepted.load();
  st.connections_open = s.open.load();
  st.connections_rejected = s.rejected.load();
  st.requests = s.requests.load();
  st.waits_held = s.held.load();
  st.keys = s.keys.load();
  return st;
}

}  // namespace c10d
