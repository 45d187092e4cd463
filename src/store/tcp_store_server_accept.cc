// Accepting and closing the store server's connections (tcp_store_server_impl.h): the accept
// loops on the TCP listener and the local socket, the connection cap (ServerOptions::
// max_connections) with eviction of connections still in their handshake, closing a connection
// from outside its coroutine, running out of descriptors, the rate-limited log lines about all
// of these, and shutdown.
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "core/check.h"
#include "core/logging.h"
#include "store/tcp_store_server_impl.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::socket_base;
using asio::use_awaitable;
using asio::ip::tcp;
using store::tcp_server::Event;
using store::tcp_server::kEventKinds;
using store::tcp_server::kLogBurst;
using store::tcp_server::kLogWindow;
using store::tcp_server::kUnlimitedConnections;

// For the summary line: "N more <this> in the last 10 s".
std::string_view event_summary(Event e) {
  switch (e) {
    case Event::kBadInput:
      return "connections closed for bad input, a broken limit or a wrong token";
    case Event::kHandshake:
      return "connections closed for no handshake within the deadline";
    case Event::kEvicted:
      return "connections closed in their handshake to make room";
    case Event::kRefused:
      return "connections refused over the connection cap";
    case Event::kStalled:
      return "connections closed for not reading their answers";
    case Event::kBusy:
      return "answers refused at the limit on unread answers";
    case Event::kReadStalled:
      return "connections closed for a request stalled mid-frame";
    case Event::kStarved:
      return "connections closed for no room for a large request";
    case Event::kAcceptFailed:
      return "failed accepts";
  }
  return "events";
}

}  // namespace

// ---- rate-limited logging ----

void TCPStoreServer::Impl::log_event(Event e, std::string_view line) {
  if (core::LogLevel::kWarn < core::log_level()) return;
  roll_log_window();
  LogGate& gate = log_gates[static_cast<std::size_t>(e)];
  if (gate.logged < kLogBurst) {
    ++gate.logged;
    C10D_LOG_WARN("store server :{}: {}", port, line);
    return;
  }
  ++gate.suppressed;
  if (!log_timer_armed && !stopping) {
    log_timer_armed = true;
    log_timer.expires_at(log_window_start + kLogWindow);
    log_timer.async_wait([this](error_code ec) {
      log_timer_armed = false;
      if (!ec) roll_log_window();
    });
  }
}

// Past the window (or when `force`d, at stop): one line per kind that had lines left out, and
// a fresh window.
void TCPStoreServer::Impl::roll_log_window(bool force) {
  const auto now = Clock::now();
  if (!force && now - log_window_start < kLogWindow) return;
  const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now - log_window_start);
  for (std::size_t i = 0; i < kEventKinds; ++i) {
    if (log_gates[i].suppressed > 0) {
      C10D_LOG_WARN(
          "store server :{}: {} more {} in the last {} s (the first {} of each kind are "
          "logged every {} s)",
          port, log_gates[i].suppressed, event_summary(static_cast<Event>(i)), seconds.count(),
          kLogBurst, kLogWindow.count());
    }
    log_gates[i] = {};
  }
  log_window_start = now;
}

// ---- connections: the cap, eviction, closing ----

std::size_t TCPStoreServer::Impl::connection_cap() const {
  if (options.max_connections > 0) return options.max_connections;
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
    return kUnlimitedConnections;
  }
  const std::size_t soft = static_cast<std::size_t>(lim.rlim_cur);
  const std::size_t reserve = std::max<std::size_t>(32, soft / 8);
  return std::min(kUnlimitedConnections, soft > reserve ? soft - reserve : std::size_t{1});
}

// Counts a closing by the server and logs it (rate-limited).
void TCPStoreServer::Impl::note_rejected(const Connection& c, Event e, std::string_view why) {
  rejected.fetch_add(1, std::memory_order_relaxed);
  log_event(e, fmt::format("closing connection from {}: {}", c.peer, why));
}

void TCPStoreServer::Impl::leave_handshaking(Connection& c) {
  if (!c.in_handshake) return;
  handshaking.erase(c.handshake_at);
  c.in_handshake = false;
}

// Closes `c` now, from outside its coroutine (a timer, or the accept loop making room): its
// descriptor is free at once and it no longer counts against the cap; its coroutine sees the
// socket closed and ends.
// `reset`: drop unsent answers with a reset rather than leave the kernel trying to deliver
// them to a client that does not read.
void TCPStoreServer::Impl::close_connection(Connection& c, Event e, std::string_view why,
                                            bool reset) {
  if (c.closed) return;
  c.closed = true;
  note_rejected(c, e, why);
  leave_handshaking(c);
  connections.erase(&c);
  error_code ignored;
  if (reset) c.socket.set_option(socket_base::linger(true, 0), ignored);
  c.socket.close(ignored);
  if (c.input_room_timer != nullptr) c.input_room_timer->cancel();
}

// Before serving a new connection. Near the cap (3/4 of it), connections still in their
// handshake after busy_handshake_timeout are closed; at the cap, the oldest one still in its
// handshake is. A client shakes hands within a round trip of connecting, so what this closes
// is idle or hostile. False when the server is at its cap and every connection has shaken
// hands: the new one is refused.
bool TCPStoreServer::Impl::make_room() {
  const std::size_t cap = connection_cap();
  if (connections.size() + 1 > cap - cap / 4) {
    const auto too_old = Clock::now() - options.busy_handshake_timeout;
    while (!handshaking.empty() && handshaking.front()->accepted_at <= too_old) {
      evicted.fetch_add(1, std::memory_order_relaxed);
      close_connection(*handshaking.front(), Event::kEvicted,
                       fmt::format("no handshake within {} ms while the server is near its cap "
                                   "of {} connections",
                                   options.busy_handshake_timeout.count(), cap));
    }
  }
  if (connections.size() < cap) return true;
  if (handshaking.empty()) return false;
  evicted.fetch_add(1, std::memory_order_relaxed);
  close_connection(*handshaking.front(), Event::kEvicted,
                   fmt::format("the server is at its cap of {} connections and this is the "
                               "oldest one still in its handshake",
                               cap));
  return true;
}

// Out of descriptors with nothing to evict: accepts one waiting connection on the spare
// descriptor and closes it, so its client learns at once instead of waiting in the backlog.
void TCPStoreServer::Impl::refuse_waiting(int listen_fd) {
  if (spare_fd < 0) return;
  ::close(spare_fd);
  const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
  if (fd >= 0) {
    ::close(fd);
    refused.fetch_add(1, std::memory_order_relaxed);
    rejected.fetch_add(1, std::memory_order_relaxed);
    log_event(Event::kRefused, "out of file descriptors: closed a new connection at once");
  }
  spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
}

// ---- accepting ----

// Accepts connections on `acceptor` (TCP or Unix) until the server stops; each is served by
// its own coroutine.
template <typename Acceptor>
awaitable<void> TCPStoreServer::Impl::accept_loop(Acceptor& acceptor_ref) {
  constexpr bool kLocal = std::is_same_v<Acceptor, asio::local::stream_protocol::acceptor>;
  for (;;) {
    error_code ec;
    auto socket = co_await acceptor_ref.async_accept(asio::redirect_error(use_awaitable, ec));
    if (stopping || ec == asio::error::operation_aborted) co_return;
    if (ec) {
      if (ec == asio::error::no_descriptors ||
          ec == error_code(ENFILE, boost::system::system_category())) {
        // Out of descriptors (the cap is above what the process has left): free one by
        // closing the oldest connection still in its handshake and accept again, or failing
        // that turn the waiting connection away at once.
        if (!handshaking.empty()) {
          evicted.fetch_add(1, std::memory_order_relaxed);
          close_connection(*handshaking.front(), Event::kEvicted,
                           "out of file descriptors and this is the oldest connection still "
                           "in its handshake");
          continue;
        }
        refuse_waiting(acceptor_ref.native_handle());
      }
      // Or a connection reset before accept: back off briefly, go on.
      log_event(Event::kAcceptFailed, fmt::format("accept failed: {}", ec.message()));
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
    if (!make_room()) {
      refused.fetch_add(1, std::memory_order_relaxed);
      rejected.fetch_add(1, std::memory_order_relaxed);
      const std::string why = fmt::format(
          "the server serves its cap of {} connections (max_connections, by default from the "
          "open-file limit), every one past its handshake",
          connections.size());
      log_event(Event::kRefused, fmt::format("closing connection from {} at once: {}", peer, why));
      // Best effort, without waiting: the client reads why instead of a bare close.
      Bytes answer;
      store::wire::encode_error(answer, Kind::kHello, Status::kBusy, why);
      socket.non_blocking(true, ec);
      socket.write_some(asio::buffer(answer), ec);
      socket.shutdown(socket_base::shutdown_send, ec);
      socket.close(ec);
      continue;
    }
    // Counted from here, not when its coroutine starts, so a burst of accepts cannot pass
    // the cap.
    auto conn = std::make_unique<Connection>(Socket(std::move(socket)), std::move(peer), io);
    connections.insert(conn.get());
    conn->handshake_at = handshaking.insert(handshaking.end(), conn.get());
    conn->in_handshake = true;
    open.fetch_add(1, std::memory_order_relaxed);
    asio::co_spawn(io, serve(std::move(conn)), asio::detached);
  }
}

// The constructor starts the TCP loop from tcp_store_server.cc; open_local_acceptor() below
// instantiates the Unix one.
template awaitable<void> TCPStoreServer::Impl::accept_loop(tcp::acceptor&);

// Listens on an abstract Unix socket with a random name; on failure, serves TCP only.
void TCPStoreServer::Impl::open_local_acceptor() {
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

// Runs on the io thread: closes everything so every coroutine finishes.
void TCPStoreServer::Impl::shutdown() {
  stopping = true;
  error_code ec;
  acceptor.close(ec);
  local_acceptor.close(ec);
  log_timer.cancel();
  roll_log_window(/*force=*/true);
  for (Connection* c : connections) {
    c->socket.shutdown(socket_base::shutdown_both, ec);
    c->socket.close(ec);
    if (c->waiter != nullptr) c->waiter->timer.cancel();
    if (c->room_timer != nullptr) c->room_timer->cancel();
    if (c->input_room_timer != nullptr) c->input_room_timer->cancel();
  }
}

}  // namespace c10d::inline v1
