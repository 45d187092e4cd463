// The io thread's watch on the sockets: it waits in epoll for a peer's socket to become
// readable only while no waiter polls it (a waiter that polls moves its own bytes, and a
// wake-up of the io thread on the core it polls on only costs it), looking again later while
// waiters keep polling (rewatch_later), and at once when the last poller leaves a receive
// asleep (watch_for_sleeper). Sockets are registered with epoll only while the io thread waits
// on them (register_read, register_write, settle): see Connection::read_reactor.
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"

namespace c10d::inline v1::gloo_like {
using tcp_detail::kRewatchInterval;
using tcp_detail::kRewatchMax;

// Io thread: wait for the socket to become readable, drain, and wait again; unless a thread
// is polling the socket or polled it since the last look (polled_since_look), in which case
// look again later (rewatch_later).
void TCPTransport::Impl::watch(int peer) {
  Connection& c = conn(peer);
  // Not connected yet: attach_read watches it once it is.
  if (c.read_watched || c.read_fd.load(std::memory_order_acquire) < 0) return;
  if (c.read_closed.load()) {
    settle(c);
    return;
  }
  error_code ec;
  auto* r = register_read(c, ec);
  if (r == nullptr) {
    std::lock_guard lock(mu_);
    kill_locked(peer, ec);
    return;
  }
  c.read_watched = true;
  c.polls_seen = c.polls.load();
  r->async_wait(asio::posix::descriptor_base::wait_read,
                [self = shared_from_this(), peer](error_code wait_ec) {
                  Connection& conn = self->conn(peer);
                  conn.read_watched = false;
                  if (wait_ec == asio::error::operation_aborted) return;
                  if (polled_since_look(conn)) {
                    settle(conn);
                    self->rewatch_later(peer);
                    return;
                  }
                  conn.rewatch_interval = kRewatchInterval;
                  self->watch_and_drain(peer);
                });
}

// Io thread: watches `peer`'s socket (again) and reads what is there: bytes that came since the
// last drain raised no edge the new watch could see.
void TCPTransport::Impl::watch_and_drain(int peer) {
  watch(peer);
  try_drain(peer);
}

// Io thread: the last poller of `peer` left while a receive sleeps until its message comes
// (the poller's own, or another thread's). Watch the socket now (and look at it: bytes may
// have come since the last poll), counting the polls before as seen: else a watch already
// armed would take the sleeper's message for a poller's and leave it until the next look, up
// to kRewatchMax later.
void TCPTransport::Impl::watch_for_sleeper(int peer) {
  Connection& c = conn(peer);
  c.polls_seen = c.polls.load();
  c.rewatch_interval = kRewatchInterval;
  watch_and_drain(peer);
}

// A thread sleeps outside this transport until an any-source receive completes
// (TCPTransport::AnySourceSleep): it counts as a sleeper on every connection, as TCPRequest::wait
// counts a receive, and the io thread watches every socket that no waiter polls now (a poller
// that leaves sees the sleeper and has it watched then).
void TCPTransport::Impl::enter_sleep_any() {
  for (std::size_t p = 0; p < conns.size(); ++p) {
    Connection* c = conns[p].get();
    if (c == nullptr) continue;
    c->sleepers.fetch_add(1);
    if (c->pollers.load() == 0 && !c->read_closed.load()) {
      asio::post(io, [self = shared_from_this(), peer = static_cast<int>(p)] {
        self->watch_for_sleeper(peer);
      });
    }
  }
}
void TCPTransport::Impl::leave_sleep_any() {
  for (const auto& c : conns) {
    if (c) c->sleepers.fetch_sub(1);
  }
}

// Io thread, looking at `c`: whether a waiter polls it, or did since the last look; records
// this look.
bool TCPTransport::Impl::polled_since_look(Connection& c) {
  const std::uint32_t polls = c.polls.load();
  const bool polled = c.pollers.load() > 0 || polls != c.polls_seen;
  c.polls_seen = polls;
  return polled;
}

// Io thread: looks at `peer`'s socket again after rewatch_interval, and then, while waiters keep
// polling it, at twice the interval each time (up to kRewatchMax).
void TCPTransport::Impl::rewatch_later(int peer) {
  Connection& c = conn(peer);
  if (c.rewatch_pending) return;
  c.rewatch_pending = true;
  auto timer = std::make_shared<asio::steady_timer>(io, c.rewatch_interval);
  c.rewatch_interval = std::min(2 * c.rewatch_interval, kRewatchMax);
  timer->async_wait([self = shared_from_this(), timer, peer](error_code) {
    Connection& looked = self->conn(peer);
    looked.rewatch_pending = false;
    if (polled_since_look(looked)) {
      self->rewatch_later(peer);
      return;
    }
    self->watch_and_drain(peer);
  });
}

// Io thread: `c`'s read_fd (write_fd) registered with the io thread's epoll (see
// Connection::read_reactor); null, with `ec` set, when it cannot be.
asio::posix::stream_descriptor* TCPTransport::Impl::register_read(Connection& c, error_code& ec) {
  return register_fd(c.read_reactor, c.read_fd.load(std::memory_order_acquire), ec);
}
asio::posix::stream_descriptor* TCPTransport::Impl::register_write(Connection& c, error_code& ec) {
  return register_fd(c.write_reactor, c.write_fd.load(std::memory_order_acquire), ec);
}
asio::posix::stream_descriptor* TCPTransport::Impl::register_fd(
    std::optional<asio::posix::stream_descriptor>& r, int fd, error_code& ec) {
  if (!r) {
    r.emplace(io);
    r->assign(fd, ec);
    if (ec) {
      r.reset();  // not open: does not close the fd
      return nullptr;
    }
  }
  return &*r;
}

// Io thread: takes `c`'s socket out of epoll once the io thread waits on it for nothing.
void TCPTransport::Impl::settle(Connection& c) {
  if (c.read_reactor && !c.read_watched) {
    c.read_reactor->release();
    c.read_reactor.reset();
  }
  if (c.write_reactor && !c.write_waiting) {
    c.write_reactor->release();
    c.write_reactor.reset();
  }
}

}  // namespace c10d::inline v1::gloo_like
