// TCPStore connecting (tcp_store_impl.h): every address of host:port in turn, again with
// exponential backoff while the server is not up yet, all within the caller's deadline; the
// handshake (HELLO, which also brings the server's limits, then AUTH when the server asks for a
// token, refusing a server that asks for none when this client has one); and the switch to the
// server's abstract Unix socket when it is on this host.
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/logging.h"
#include "store/tcp_store_impl.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

using store::tcp_client::Clock;
using store::tcp_client::remaining;

// For poll(2): milliseconds left, clamped to what an int holds.
int poll_timeout(Clock::time_point deadline) {
  return static_cast<int>(std::min<std::int64_t>(remaining(deadline).count(), INT_MAX));
}

}  // namespace

// Tries every address of host:port once. Returns an error text on failure.
std::string TCPStore::Impl::try_connect(Clock::time_point deadline) {
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
    Fd s(::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol));
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
void TCPStore::Impl::connect(Clock::time_point deadline) {
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
std::string TCPStore::Impl::handshake(Clock::time_point deadline) {
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
void TCPStore::Impl::switch_to_local(const std::string& name, Clock::time_point deadline) {
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

}  // namespace c10d::inline v1
