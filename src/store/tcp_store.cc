// TCPStore: the client of the TCP store server (frames in wire.h).
//
// One blocking socket, used by one call at a time under mu_. Deadlines: connect polls a
// non-blocking socket; reads and writes block with SO_RCVTIMEO/SO_SNDTIMEO (two syscalls per
// round trip on the hot path, instead of four with poll) and re-check the deadline when woken.
// Any failure in the middle of a call closes the socket, so a half-read answer can never be
// taken for the next one; the next call connects again.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <thread>
#include <utility>

#include "c10d/store.h"
#include "core/auth.h"
#include "core/check.h"
#include "core/fd.h"
#include "core/logging.h"
#include "store/store_util.h"
#include "store/tcp_store_server.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

using Clock = std::chrono::steady_clock;
using store::deadline_after;
using store::wire::Kind;
using store::wire::Status;

// Extra time a client gives the server beyond a wait's own timeout before it calls the server
// unresponsive: the server answers a wait that times out itself.
constexpr Milliseconds kServerGrace{5000};

// How a client waits for an answer (see fill()). A thread blocked in recv and woken by the
// answer costs tens of microseconds on virtual machines, more than a busy server takes to
// answer; so it first polls without giving up the core for kHotSpin, then polls yielding the
// core between polls (ranks may outnumber cores) until kSpin, and only then blocks. Measured
// in docs/benchmarks.md: a longer hot phase starves other ranks when they outnumber cores.
constexpr std::chrono::microseconds kHotSpin{5};
constexpr std::chrono::microseconds kSpin{50};

// After a call, a request or answer buffer larger than this is given back: one large get or set
// must not pin its size for the store's life.
constexpr std::size_t kKeepBufferBytes = 64 * 1024;

// "[a, b, c]"; long lists are cut after a few keys so messages stay readable.
std::string keys_text(std::span<const std::string> keys) {
  constexpr std::size_t kShown = 8;
  if (keys.size() <= kShown) return fmt::format("[{}]", fmt::join(keys, ", "));
  return fmt::format("[{}, ... {} keys in all]", fmt::join(keys.first(kShown), ", "), keys.size());
}

using core::Fd;

Milliseconds plus_grace(Milliseconds t) {
  return t >= Milliseconds::max() - kServerGrace ? Milliseconds::max() : t + kServerGrace;
}

// For poll(2): milliseconds left, clamped to what an int holds.
int poll_timeout(Clock::time_point deadline);

Milliseconds remaining(Clock::time_point deadline) {
  return std::max(Milliseconds(0),
                  std::chrono::duration_cast<Milliseconds>(deadline - Clock::now()));
}

int poll_timeout(Clock::time_point deadline) {
  return static_cast<int>(std::min<std::int64_t>(remaining(deadline).count(), INT_MAX));
}

}  // namespace

struct TCPStore::Impl {
  TCPStoreOptions options;
  std::string address;
  std::string label;  // "store <address>", opening messages
  std::mutex mu;
  Fd fd;                                 // GUARDED_BY(mu)
  Milliseconds socket_timeout{-1};       // GUARDED_BY(mu): what SO_RCVTIMEO is set to
  Bytes out;                             // GUARDED_BY(mu)
  Bytes in;                              // GUARDED_BY(mu)
  std::size_t in_begin = 0, in_end = 0;  // GUARDED_BY(mu)
  // The limits of the server, from its HELLO answer, combined with ours: what the client checks
  // before sending, so that no request it sends fails for a limit.
  StoreLimits limits;  // GUARDED_BY(mu) once connected; set by connect()

  // A decoded answer: its body after the status byte.
  struct Response {
    std::span<const std::uint8_t> payload;
  };

  [[noreturn]] void fail(const char* what, const std::string& context) {
    const int err = errno;
    drop();
    C10D_THROW(StoreError, "store {}: {} during {}: {}", address, what, context,
               std::strerror(err));
  }

  // Tries every address of host:port once. Returns an error text on failure.
  std::string try_connect(Clock::time_point deadline) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const std::string port = std::to_string(options.port);
    int rc = ::getaddrinfo(options.host.c_str(), port.c_str(), &hints, &found);
    if (rc != 0) return fmt::format("cannot resolve '{}': {}", options.host, gai_strerror(rc));
    std::unique_ptr<addrinfo, decltype(&::freeaddrinfo)> list(found, ::freeaddrinfo);
    std::string last = "no addresses";
    for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
      Fd s(
          ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
      if (!s.valid()) {
        last = std::strerror(errno);
        continue;
      }
      if (::connect(s.get(), ai->ai_addr, ai->ai_addrlen) != 0) {
        if (errno != EINPROGRESS) {
          last = std::strerror(errno);
          continue;
        }
        pollfd p{s.get(), POLLOUT, 0};
        int ready = ::poll(&p, 1, poll_timeout(deadline));
        int err = 0;
        socklen_t len = sizeof(err);
        if (ready <= 0) {
          last = ready == 0 ? "connect timed out" : std::strerror(errno);
          continue;
        }
        ::getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len);
        if (err != 0) {
          last = std::strerror(err);
          continue;
        }
      }
      int flags = ::fcntl(s.get(), F_GETFL);
      ::fcntl(s.get(), F_SETFL, flags & ~O_NONBLOCK);
      int one = 1;
      ::setsockopt(s.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      fd = std::move(s);
      socket_timeout = Milliseconds(-1);
      in_begin = in_end = 0;
      return {};
    }
    return last;
  }

  // Connects (with exponential backoff while the server is not up yet) and shakes hands.
  void connect(Clock::time_point deadline) {
    Milliseconds backoff{10};
    const auto start = Clock::now();
    for (;;) {
      std::string err = try_connect(deadline);
      if (err.empty()) break;
      if (Clock::now() >= deadline) {
        C10D_THROW(TimeoutError, "store {}: could not connect within {} ms: {}", address,
                   std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count(), err);
      }
      C10D_LOG_DEBUG("store {}: connect failed ({}), retrying in {} ms", address, err,
                     backoff.count());
      std::this_thread::sleep_for(std::min(backoff, remaining(deadline)));
      backoff = std::min(backoff * 2, Milliseconds(1000));
    }
    switch_to_local(handshake(deadline), deadline);
  }

  // HELLO, then AUTH when the server asks for it. Returns the name of the server's local socket
  // (empty when it has none).
  std::string handshake(Clock::time_point deadline) {
    out.clear();
    std::size_t start = store::wire::begin_frame(out, static_cast<std::uint8_t>(Kind::kHello));
    store::wire::put_u16(out, store::wire::kVersion);
    store::wire::end_frame(out, start);
    Response r = round_trip(Kind::kHello, deadline, "HELLO");
    store::wire::Reader reader(r.payload, options.limits);
    std::uint8_t auth_required = 0;
    std::span<const std::uint8_t> nonce_bytes;
    std::string_view local_name;
    std::uint64_t key_bytes = 0, value_bytes = 0, keys_per_op = 0, frame_bytes = 0;
    reader.u8(auth_required);
    reader.fixed(store::wire::kNonceBytes, nonce_bytes);
    reader.u64(key_bytes);
    reader.u64(value_bytes);
    reader.u64(keys_per_op);
    reader.u64(frame_bytes);
    reader.key(local_name);
    if (!reader.finish().ok()) {
      drop();
      C10D_THROW(StoreError, "store {}: malformed HELLO answer", address);
    }
    std::string local(local_name);
    limits = options.limits;
    limits.max_key_bytes = std::min<std::uint64_t>(limits.max_key_bytes, key_bytes);
    limits.max_value_bytes = std::min<std::uint64_t>(limits.max_value_bytes, value_bytes);
    limits.max_keys_per_op = std::min<std::uint64_t>(limits.max_keys_per_op, keys_per_op);
    limits.max_frame_bytes = std::min<std::uint64_t>(limits.max_frame_bytes, frame_bytes);
    if (!auth_required) {
      if (options.token.empty()) return local;
      // A client with a token reaches only a server that asks for it: a server without one is
      // not its job's (a stale port taken by another process, another job's store), and what
      // it would hand out (a transport secret, peers' addresses) must not be believed.
      drop();
      C10D_THROW(StoreError,
                 "server at {} asks for no token but this client has one (C10D_STORE_TOKEN or "
                 "TCPStoreOptions::token): it is not the store of this client's job, or it was "
                 "started without the job's token",
                 address);
    }
    if (options.token.empty()) {
      drop();
      C10D_THROW(StoreError,
                 "store {} requires authentication: set C10D_STORE_TOKEN (or "
                 "TCPStoreOptions::token) to its shared secret",
                 address);
    }
    store::wire::Nonce nonce;
    std::copy(nonce_bytes.begin(), nonce_bytes.end(), nonce.begin());
    const auto mac = store::wire::auth_mac(options.token, nonce);
    out.clear();
    start = store::wire::begin_frame(out, static_cast<std::uint8_t>(Kind::kAuth));
    out.insert(out.end(), mac.begin(), mac.end());
    store::wire::end_frame(out, start);
    round_trip(Kind::kAuth, deadline, "AUTH");
    return local;
  }

  // After the TCP handshake: when the server announced a local socket and it can be reached
  // (same host and network namespace), shake hands on it and use it instead. Its name is random
  // per server, so reaching it means reaching this server; any failure keeps TCP.
  void switch_to_local(const std::string& name, Clock::time_point deadline) {
    if (name.empty() || !options.use_local_socket) return;
    sockaddr_un addr{};
    if (name.size() + 1 > sizeof(addr.sun_path)) return;
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path + 1, name.data(), name.size());  // sun_path[0] = 0: abstract
    const auto len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
    // Non-blocking: a server whose backlog is full must not hold this past the deadline.
    Fd local(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!local.valid()) return;
    if (::connect(local.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0) {
      if (errno != EAGAIN && errno != EINPROGRESS) return;
      pollfd p{local.get(), POLLOUT, 0};
      int err = 0;
      socklen_t err_len = sizeof(err);
      if (::poll(&p, 1, poll_timeout(deadline)) <= 0 ||
          ::getsockopt(local.get(), SOL_SOCKET, SO_ERROR, &err, &err_len) != 0 || err != 0) {
        return;
      }
    }
    ::fcntl(local.get(), F_SETFL, ::fcntl(local.get(), F_GETFL) & ~O_NONBLOCK);
    Fd tcp = std::move(fd);
    fd = std::move(local);
    socket_timeout = Milliseconds(-1);
    try {
      handshake(deadline);
      C10D_LOG_DEBUG("store {}: using the server's local socket", address);
    } catch (const Error& e) {
      C10D_LOG_DEBUG("store {}: local socket refused ({}); staying on TCP", address, e.what());
      fd = std::move(tcp);
      socket_timeout = Milliseconds(-1);
      in_begin = in_end = 0;
    }
  }

  // SO_RCVTIMEO/SO_SNDTIMEO bound each blocking syscall; the deadline loop around them decides
  // when a call has timed out. Slices are capped at kSlice so that calls with different
  // timeouts (GET carries the grace, SET does not) share one setting instead of paying a
  // setsockopt each; only a call with less than kSlice left sets a shorter one.
  void set_socket_timeout(Milliseconds t) {
    constexpr Milliseconds kSlice{1000};
    t = std::clamp((t + Milliseconds(9)) / 10 * 10, Milliseconds(10), kSlice);
    if (t == socket_timeout) return;
    timeval tv{};
    tv.tv_sec = t.count() / 1000;
    tv.tv_usec = (t.count() % 1000) * 1000;
    ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    socket_timeout = t;
  }

  [[noreturn]] void timed_out(Clock::time_point start, const std::string& context) {
    drop();
    C10D_THROW(TimeoutError, "store {}: no answer to {} within {} ms", address, context,
               std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count());
  }

  // Reads until `need` unread bytes are buffered.
  void fill(std::size_t need, Clock::time_point start, Clock::time_point deadline,
            const std::string& context) {
    if (in_begin + need > in.size()) {
      std::memmove(in.data(), in.data() + in_begin, in_end - in_begin);
      in_end -= in_begin;
      in_begin = 0;
    }
    const auto spin_start = Clock::now();
    while (in_end - in_begin < need) {
      // The buffer grows with the bytes that arrive (at most doubling), never to a length an
      // answer merely claims.
      if (in_end == in.size()) {
        try {
          in.resize(std::min(need, std::max<std::size_t>(4096, 2 * in.size())));
        } catch (const std::bad_alloc&) {
          drop();
          C10D_THROW(StoreError, "store {}: an answer to {} of {} bytes cannot be buffered",
                     address, context, need);
        }
      }
      const auto now = Clock::now();
      if (now >= deadline) timed_out(start, context);
      const bool spinning = now - spin_start < kSpin;
      ssize_t n =
          ::recv(fd.get(), in.data() + in_end, in.size() - in_end, spinning ? MSG_DONTWAIT : 0);
      if (n < 0 && spinning && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        if (now - spin_start >= kHotSpin) sched_yield();
        continue;
      }
      if (n > 0) {
        in_end += static_cast<std::size_t>(n);
      } else if (n == 0) {
        drop();
        C10D_THROW(StoreError, "store {}: the server closed the connection during {}", address,
                   context);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        continue;  // SO_RCVTIMEO slice over; the deadline check above decides
      } else if (errno != EINTR) {
        fail("receive failed", context);
      }
    }
  }

  // Sends `out`, one or more request frames.
  void send_out(Clock::time_point start, Clock::time_point deadline, const std::string& context) {
    set_socket_timeout(remaining(deadline));
    std::size_t sent = 0;
    while (sent < out.size()) {
      ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
      if (n >= 0) {
        sent += static_cast<std::size_t>(n);
      } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
        if (Clock::now() >= deadline) timed_out(start, context);
      } else if (errno != EINTR) {
        fail("send failed", context);
      }
    }
  }

  // Reads the next answer, which must be to a request of `kind`. Throws on an error status.
  Response read_answer(Kind kind, Clock::time_point start, Clock::time_point deadline,
                       const std::string& context) {
    if (in.size() < 4096) in.resize(4096);
    fill(store::wire::kHeaderBytes, start, deadline, context);
    store::wire::Header h;
    auto hs = store::wire::decode_header({in.data() + in_begin, in_end - in_begin}, true,
                                         options.limits, h);
    if (!hs.ok()) {
      drop();
      C10D_THROW(StoreError, "store {}: bad answer to {}: {}", address, context,
                 store::wire::describe(hs, options.limits));
    }
    const std::size_t frame = store::wire::kHeaderBytes + static_cast<std::size_t>(h.body_bytes);
    fill(frame, start, deadline, context);
    std::span<const std::uint8_t> body(in.data() + in_begin + store::wire::kHeaderBytes,
                                       h.body_bytes);
    in_begin += frame;
    if (in_begin == in_end) in_begin = in_end = 0;
    if (body.empty()) {
      drop();
      C10D_THROW(StoreError, "store {}: empty answer to {}", address, context);
    }
    const auto status = static_cast<Status>(body[0]);
    if (status == Status::kOk && h.version == store::wire::kVersion &&
        h.kind == (static_cast<std::uint8_t>(kind) | store::wire::kResponseBit)) {
      return {body.subspan(1)};
    }
    throw_status(status, h, context, error_text(body.subspan(1)));
  }

  Response round_trip(Kind kind, Clock::time_point deadline, const std::string& context) {
    const auto start = Clock::now();
    send_out(start, deadline, context);
    return read_answer(kind, start, deadline, context);
  }

  // An answer that does not parse is the server's fault, not the caller's.
  [[noreturn]] void malformed(std::string_view kind) {
    drop();
    C10D_THROW(StoreError, "store {}: malformed {} answer", address, kind);
  }

  // The answer's one value, or its one i64; anything else is malformed.
  Bytes value_of(const Response& r, std::string_view kind) {
    store::wire::Reader reader(r.payload, options.limits);
    std::span<const std::uint8_t> value;
    reader.value(value);
    if (!reader.finish().ok()) malformed(kind);
    Bytes result(value.begin(), value.end());
    trim_input();
    return result;
  }
  std::int64_t int_of(const Response& r, std::string_view kind) {
    store::wire::Reader reader(r.payload, options.limits);
    std::int64_t v = 0;
    reader.i64(v);
    if (!reader.finish().ok()) malformed(kind);
    return v;
  }

  // Give back the buffer a large request or answer grew: the request's once it is sent, the
  // answer's once its values are copied out (a Response points into it until then).
  void trim_output() {
    if (out.capacity() > kKeepBufferBytes) Bytes().swap(out);
  }
  void trim_input() {
    if (in.size() > kKeepBufferBytes && in_begin == in_end) Bytes().swap(in);
  }

  // Forgets the connection: the next call connects again.
  void drop() {
    fd.reset();
    in_begin = in_end = 0;
  }

  static std::string_view error_text(std::span<const std::uint8_t> rest) {
    if (rest.size() < 4) return {};
    std::uint32_t n = store::wire::get_u32(rest.data());
    if (n > rest.size() - 4) return {};
    return {reinterpret_cast<const char*>(rest.data() + 4), n};
  }

  [[noreturn]] void throw_status(Status status, const store::wire::Header& h,
                                 const std::string& context, std::string_view message) {
    switch (status) {
      case Status::kTimeout:
        C10D_THROW(TimeoutError, "store {}: {} timed out: {}", address, context, message);
      case Status::kNotInteger:
      case Status::kOutOfRange:
        C10D_THROW(InvalidArgument, "store {}: {}: {}", address, context, message);
      case Status::kLimitExceeded:
        drop();  // the server may have closed the connection (it does for a broken frame limit)
        C10D_THROW(InvalidArgument, "store {}: {} refused: {}", address, context, message);
      case Status::kResponseTooLarge:
      case Status::kBusy:
        // The server answered and serves on: the connection stays.
        C10D_THROW(StoreError, "store {}: {} refused: {}", address, context, message);
      case Status::kVersionMismatch:
        drop();
        C10D_THROW(StoreError,
                   "store {}: protocol version mismatch: this client speaks version {}, the "
                   "server speaks version {} ({})",
                   address, store::wire::kVersion, h.version, message);
      case Status::kAuthFailed:  // in this client's words alone: the server's say the same
        drop();
        C10D_THROW(StoreError,
                   "store {}: authentication failed: this client's token does not match the "
                   "store's (C10D_STORE_TOKEN or TCPStoreOptions::token must be the store's "
                   "secret)",
                   address);
      case Status::kOk:
        drop();
        C10D_THROW(StoreError, "store {}: answer to {} does not match the request (kind {:#x})",
                   address, context, h.kind);
      default:
        drop();
        C10D_THROW(StoreError, "store {}: {} failed: {}: {}", address, context,
                   store::wire::status_name(status), message);
    }
  }

  // One request: connect when needed, send the frame that `build` writes, read its answer.
  // `connect_within` bounds the connect on its own: a WAIT or GET may wait `t` at the server
  // and gives the answer kServerGrace more, but reconnecting to a server that is gone must not
  // take that grace too (a failing transport probes a dead store with a 500 ms WAIT).
  template <typename Build>
  Response call(Kind kind, Milliseconds timeout, const Build& build, const std::string& context,
                Milliseconds connect_within = Milliseconds::max()) {
    const auto start = Clock::now();
    const auto deadline = deadline_after(timeout);
    build_frame(kind, build, std::min(deadline, deadline_after(connect_within)));
    send_out(start, deadline, context);
    trim_output();
    return read_answer(kind, start, deadline, context);
  }

  // A request the server does not answer when it succeeds (SET): send it and return. Should it
  // fail, its error answer comes ahead of the next call's answer, which throws it.
  template <typename Build>
  void send_only(Kind kind, Milliseconds timeout, const Build& build, const std::string& context) {
    const auto start = Clock::now();
    const auto deadline = deadline_after(timeout);
    build_frame(kind, build, deadline);
    send_out(start, deadline, context);
    trim_output();
  }

  template <typename Build>
  void build_frame(Kind kind, const Build& build, Clock::time_point deadline) {
    if (!fd.valid()) connect(deadline);
    out.clear();
    const std::size_t start = store::wire::begin_frame(out, static_cast<std::uint8_t>(kind));
    build(out);
    store::wire::end_frame(out, start);
    const std::size_t body = out.size() - start - store::wire::kHeaderBytes;
    C10D_CHECK(body <= limits.max_frame_bytes,
               "store {}: a {} request of {} bytes exceeds the server's limit of {} per request",
               address, store::wire::kind_name(kind), body, limits.max_frame_bytes);
  }

  void check_key(std::string_view key) const { store::check_key(who(), key, limits); }
  void check_value(std::span<const std::uint8_t> value) const {
    store::check_value(who(), {}, value.size(), limits);  // the key is checked on its own
  }
  void check_keys(std::span<const std::string> keys) const {
    store::check_keys(who(), keys, limits);
  }
  const std::string& who() const { return label; }
};

namespace {

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
