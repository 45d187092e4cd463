// The listener of a transport that connects on first use (TCPConnect::kLazy), on the io thread,
// from the end of set-up until every peer has connected (or the transport closes). Connections
// are taken as they come and each one's handshake is read as its bytes arrive and answered
// (accept_step, tcp_handshake.h), so that a stranger that sends nothing, or dribbles, never holds
// up a real peer: at most kMaxPendingHandshakes at once (past that the oldest is dropped), each
// for at most options.timeout. A connection that fails is closed and logged by address (the
// first few, then a count) and never takes a rank's place; one that proves itself becomes that
// peer's read side (attach_read).
#include <sys/socket.h>
#include <unistd.h>

#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"
#include "core/logging.h"

namespace c10d::inline v1::gloo_like {
using asio::ip::tcp;
using tcp_detail::PendingAccept;

// Io thread: waits for the next connection.
void TCPTransport::Impl::start_accepting() {
  if (!accepting || !accepting->acceptor.is_open()) return;
  accepting->acceptor.async_wait(tcp::acceptor::wait_read,
                                 [self = shared_from_this()](error_code ec) {
                                   if (!ec) self->accept_pending();
                                 });
}

// Io thread: takes every connection waiting in the backlog and starts its handshake.
void TCPTransport::Impl::accept_pending() {
  tcp_detail::Accepting& a = *accepting;
  while (a.acceptor.is_open()) {
    error_code ec;
    tcp::socket s(io);
    a.acceptor.accept(s, ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) break;
    if (ec == asio::error::connection_aborted || ec == asio::error::interrupted) continue;
    if (ec) {
      // A rank that cannot take its peers' connections cannot work with them.
      const bool out_of_files = ec.value() == EMFILE || ec.value() == ENFILE;
      std::lock_guard lock(mu_);
      abort_locked(C10D_ERROR(NetworkError, "rank {}: cannot accept a peer's connection: {}{}",
                              rank, ec.message(),
                              out_of_files ? "; " + descriptor_limits() : std::string()));
      return;
    }
    s.non_blocking(true, ec);
    if (ec) continue;  // closed at once: no handshake waits on a blocking socket
    if (a.pending.size() == kMaxPendingHandshakes) {
      const std::shared_ptr<PendingAccept> oldest = a.pending.front();
      a.log.refused(oldest->handshake.from,
                    fmt::format("dropped: {} connections were already waiting to finish a "
                                "handshake",
                                kMaxPendingHandshakes));
      drop_pending(oldest);
    }
    std::string from = remote_of(s);
    auto p = std::make_shared<PendingAccept>(PendingHandshake{std::move(s), std::move(from)}, io);
    a.pending.push_back(p);
    p->expiry.expires_after(a.ctx.timeout);
    p->expiry.async_wait([self = shared_from_this(), p](error_code wait_ec) {
      if (wait_ec || p->gone) return;
      self->accepting->log.refused(
          p->handshake.from,
          fmt::format("no whole handshake within {} ms", self->accepting->ctx.timeout.count()));
      self->drop_pending(p);
    });
    step_handshake(p);
  }
  start_accepting();
}

// Io thread: reads what has come of `p`'s handshake and answers it; waits for more, or ends it.
void TCPTransport::Impl::step_handshake(const std::shared_ptr<PendingAccept>& p) {
  tcp_detail::Accepting& a = *accepting;
  bool done = false;
  const std::optional<std::uint32_t> peer = accept_step(
      p->handshake, a.ctx,
      [&](std::uint32_t r) {
        return conn(static_cast<int>(r)).read_fd.load(std::memory_order_acquire) >= 0;
      },
      a.log, done);
  if (peer) {
    tcp::socket s = std::move(p->handshake.socket);
    drop_pending(p);
    attach_read(static_cast<int>(*peer), std::move(s));
    return;
  }
  if (done) {
    drop_pending(p);
    return;
  }
  p->handshake.socket.async_wait(tcp::socket::wait_read,
                                 [self = shared_from_this(), p](error_code ec) {
                                   if (!ec && !p->gone) self->step_handshake(p);
                                 });
}

// Io thread: `p` leaves the list; its socket (unless taken) closes, its timer stops.
void TCPTransport::Impl::drop_pending(const std::shared_ptr<PendingAccept>& p) {
  if (p->gone) return;
  p->gone = true;
  p->expiry.cancel();
  error_code ec;
  if (p->handshake.socket.is_open()) p->handshake.socket.close(ec);
  accepting->pending.remove(p);
}

// Io thread: `peer` connected and proved itself; `s` becomes its read side. Once every peer has
// connected, nothing listens any more.
void TCPTransport::Impl::attach_read(int peer, tcp::socket s) {
  error_code ec;
  s.set_option(tcp::no_delay(true), ec);  // best effort: small frames go out at once
  s.non_blocking(false, ec);
  const int fd = ec ? -1 : s.release(ec);
  Connection& c = conn(peer);
  {
    std::lock_guard lock(mu_);
    if (fd < 0 || ec) {
      kill_locked(peer,
                  PeerLoss{.why = C10D_ERROR(NetworkError, "rank {}: connection from rank {}: {}",
                                             rank, peer, ec.message())});
      return;
    }
    if (aborted || c.dead) {  // lost meanwhile: nobody else has seen the descriptor
      ::close(fd);
      return;
    }
    c.ahead = std::make_unique_for_overwrite<std::byte[]>(tcp_detail::kReadAhead);
    c.read_fd.store(fd, std::memory_order_release);
  }
  stop_reverse(c);  // the peer's frames come here now, its last one too
  if (++accepting->joined == static_cast<int>(conns.size()) - 1) stop_accepting();
  watch_and_drain(peer);
}

// Io thread: closes the listener and every connection still in its handshake.
void TCPTransport::Impl::stop_accepting() {
  if (!accepting) return;
  error_code ec;
  accepting->acceptor.close(ec);
  while (!accepting->pending.empty()) {
    const std::shared_ptr<PendingAccept> p = accepting->pending.front();
    drop_pending(p);
  }
}

}  // namespace c10d::inline v1::gloo_like
