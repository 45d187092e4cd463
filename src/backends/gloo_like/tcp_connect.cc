// Connections on first use (TCPConnect::kLazy). A rank connects to a peer when it first sends to
// it, or first receives from it while the peer has not connected here (so that a receive from a
// peer that is gone fails at the connect, rather than at its timeout). A connect blocks (the
// peer's address, connect(2), the handshake's two round trips: tcp_handshake.h), so it runs on
// one of up to kMaxConnectors threads of this transport, started as they are first needed and
// kept until the transport goes; a socket that proved itself becomes the write side
// (attach_write), and sends queued meanwhile go out. A connect that fails is the loss of that
// peer (connect_failed), as a connection that breaks is.
//
// The reverse watch: the peer writes nothing back on the connection this rank made but, when its
// transport goes down, its last frame (tcp_connection.h). While the peer has not connected here,
// that frame is the only word this rank can get from it, so the io thread watches for it, on a
// duplicate of the descriptor registered for input only (room to write never wakes it).
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"
#include "core/logging.h"

namespace c10d::inline v1::gloo_like {
using tcp_detail::WriteSide;

namespace {

// Connector threads per transport: a few connects under way at once, so that an all_to_all's
// first use does not make them one after another, nor one slow peer hold up the rest.
constexpr std::size_t kMaxConnectors = 4;
// How long a failed connect waits for the peer's own connection to explain it (a goodbye or an
// abort notice may be on its way), as a failed write does (defer_write_failure_locked).
constexpr std::chrono::seconds kExplainWait{1};

}  // namespace

// Requires mu_. `peer` is used: connect to it unless a connection is made or being made, or the
// peer is lost. A receive (`to_send` false) needs none when the peer has connected here.
void TCPTransport::Impl::want_connection_locked(int peer, bool to_send) {
  Connection& c = conn(peer);
  if (c.write_side != WriteSide::kNone || c.dead || aborted) return;
  if (!to_send && c.read_fd.load(std::memory_order_acquire) >= 0) return;
  c.write_side = WriteSide::kConnecting;
  c.connect_began = Clock::now();
  connect_queue.push_back(peer);
  if (idle_connectors > 0) {
    connect_cv.notify_one();
    return;
  }
  if (connectors.size() >= kMaxConnectors) return;  // a busy connector takes it next
  try {
    connectors.emplace_back([self = shared_from_this()] { self->connect_loop(); });
  } catch (const std::exception& e) {
    if (!connectors.empty()) return;
    connect_queue.clear();
    c.write_side = WriteSide::kFailed;
    kill_locked(peer, PeerLoss{.why = C10D_ERROR(NetworkError,
                                                 "rank {}: cannot start a thread to connect to "
                                                 "rank {}: {}",
                                                 rank, peer, e.what())});
  }
}

// A connector thread: connects to the peers queued, one at a time, until the transport closes.
void TCPTransport::Impl::connect_loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    ++idle_connectors;
    connect_cv.wait(lock, [&] { return closing.load() || !connect_queue.empty(); });
    --idle_connectors;
    if (closing.load()) return;
    const int peer = connect_queue.front();
    connect_queue.pop_front();
    lock.unlock();
    connect(peer);
    lock.lock();
  }
}

// A connector thread: connects to `peer` within options.timeout from now.
void TCPTransport::Impl::connect(int peer) {
  SetupContext ctx = connect_ctx;
  ctx.deadline = Clock::now() + ctx.timeout;
  try {
    attach_write(peer, connect_to_peer(io, *store, ctx, peer));
  } catch (...) {
    connect_failed(peer, std::current_exception());
  }
}

// A connector thread, with `s` connected to `peer` and proven: it becomes the write side, and the
// sends queued meanwhile go out (a polling waiter writes them, else the io thread).
void TCPTransport::Impl::attach_write(int peer, asio::ip::tcp::socket s) {
  error_code ec;
  const int fd = s.release(ec);
  if (ec) {
    connect_failed(peer, C10D_ERROR(NetworkError, "rank {}: connection to rank {}: {}", rank, peer,
                                    ec.message()));
    return;
  }
  {
    std::lock_guard lock(mu_);
    Connection& c = conn(peer);
    if (aborted || c.dead) {  // lost meanwhile: nobody else has seen the descriptor
      c.write_side = WriteSide::kFailed;
      ::close(fd);
      return;
    }
    c.write_fd.store(fd, std::memory_order_release);
    c.write_side = WriteSide::kOpen;
  }
  asio::post(io, [self = shared_from_this(), peer] {
    self->write_next(peer);
    self->watch_reverse(peer);
  });
}

// A connector thread: the connect to `peer` failed with `e`. The peer's record in the store says
// why when it failed first (its listener closed as it went down); a connection the peer made
// here may still bring its goodbye or abort notice. Else the peer is lost, with `e`.
void TCPTransport::Impl::connect_failed(int peer, std::exception_ptr e) {
  if (closing.load()) return;  // the transport went down: the abort failed what was queued
  auto [why, blame] = published_failure(peer);
  std::lock_guard lock(mu_);
  Connection& c = conn(peer);
  c.write_side = WriteSide::kFailed;
  if (aborted || c.dead) return;
  if (!why && c.read_fd.load(std::memory_order_acquire) >= 0 && !c.read_closed.load()) {
    asio::post(io, [self = shared_from_this(), peer, e] {
      auto timer = std::make_shared<asio::steady_timer>(self->io, kExplainWait);
      timer->async_wait([self, timer, peer, e](error_code) {
        std::lock_guard later(self->mu_);
        self->kill_locked(peer, PeerLoss{.why = e});
      });
    });
    return;
  }
  const bool explained = why != nullptr;
  kill_locked(peer, PeerLoss{.why = explained ? std::move(why) : std::move(e),
                             .blame = explained ? std::optional<Blame>(blame) : std::nullopt});
}

// Io thread: watches the connection this rank made to `peer` for the peer's last frame, unless
// the peer's own connection is here (its frames say the same) or the connection is gone.
void TCPTransport::Impl::watch_reverse(int peer) {
  Connection& c = conn(peer);
  if (c.read_fd.load(std::memory_order_acquire) >= 0) return;
  int fd = -1;
  {
    std::lock_guard lock(mu_);
    if (c.dead || aborted || c.write_side != WriteSide::kOpen) return;
    fd = c.write_fd.load();
  }
  if (c.reverse_fd < 0) {
    c.reverse_fd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (c.reverse_fd < 0) {  // best effort: the failure record still tells
      C10D_LOG_DEBUG("rank {}: no descriptor to watch rank {}'s connection: {}", rank, peer,
                     std::strerror(errno));
      return;
    }
  }
  error_code ec;
  auto* r = register_fd(c.reverse_reactor, c.reverse_fd, ec);
  if (r == nullptr) return;
  r->async_wait(asio::posix::descriptor_base::wait_read,
                [self = shared_from_this(), peer](error_code wait_ec) {
                  if (wait_ec != asio::error::operation_aborted) self->read_reverse(peer);
                });
}

// Io thread: reads what has come of `peer`'s last frame; once it is whole, or the stream ended,
// the connection ends as that frame says (end_of_last_frame).
void TCPTransport::Impl::read_reverse(int peer) {
  Connection& c = conn(peer);
  if (c.reverse_fd < 0) return;
  for (;;) {
    // A goodbye is a header; an abort notice a header and its payload (tcp_wire.h).
    std::size_t want = kFrameHeaderBytes;
    if (c.last_frame.size() >= kFrameHeaderBytes) {
      FrameHeader h;
      const auto head = std::span<const std::byte>(c.last_frame).first<kFrameHeaderBytes>();
      if (decode_frame_header(head, h) == FrameFault::kNone && h.kind == FrameKind::kAbort) {
        want += static_cast<std::size_t>(h.length);
      }
      if (c.last_frame.size() >= want) {
        end_of_last_frame(peer, c.last_frame, {});
        return;
      }
    }
    std::byte buf[kFrameHeaderBytes + 4 + kMaxAbortMessageBytes];
    const ssize_t n = ::recv(c.reverse_fd, buf, want - c.last_frame.size(), MSG_DONTWAIT);
    if (n > 0) {
      c.last_frame.insert(c.last_frame.end(), buf, buf + n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      watch_reverse(peer);
      return;
    }
    end_of_last_frame(peer, c.last_frame,
                      n == 0 ? error_code(asio::error::eof)
                             : error_code(errno, boost::system::system_category()));
    return;
  }
}

// Io thread: the reverse watch of `c` ends (the peer connected here, its last frame came, or the
// transport closes). Nobody else uses reverse_fd, so it is closed at once.
void TCPTransport::Impl::stop_reverse(Connection& c) {
  if (c.reverse_reactor) {
    c.reverse_reactor->release();  // a pending wait ends with operation_aborted
    c.reverse_reactor.reset();
  }
  if (c.reverse_fd >= 0) ::close(c.reverse_fd);
  c.reverse_fd = -1;
  c.last_frame.clear();
}

// ~TCPTransport, after the abort: the connector threads leave their loop (closing), and a
// connect under way gives up within a poll slice (SetupContext::cancelled); the failure watch
// leaves once its store call returns.
void TCPTransport::Impl::join_connectors() {
  std::vector<std::thread> threads;
  {
    std::lock_guard lock(mu_);
    threads.swap(connectors);
  }
  connect_cv.notify_all();
  for (auto& t : threads) t.join();
  if (failure_watch.joinable()) failure_watch.join();
}

// For a request that timed out waiting on `peer`: what became of its connection, when that
// explains the wait ("" otherwise).
std::string TCPTransport::Impl::connection_note(int peer) {
  std::lock_guard lock(mu_);
  const Connection& c = conn(peer);
  if (c.write_side != WriteSide::kConnecting) return {};
  const auto ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - c.connect_began).count();
  return fmt::format("; the connection to rank {} is not made yet (connecting for {} ms)", peer,
                     ms);
}

}  // namespace c10d::inline v1::gloo_like
