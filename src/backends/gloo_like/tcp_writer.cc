// The writer: a peer's write_fd, written by one thread at a time (tcp_connection.h says who):
// the poster for a small send on an idle connection, a waiter in its progress loop
// (progress_sends), or the io thread (write_next, write_on). A frame goes out in gather writes,
// header and payload straight from the caller's buffer; a send completes once it is written.
#include <sys/socket.h>
#include <sys/uio.h>

#include <algorithm>
#include <limits>
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"

namespace c10d::inline v1::gloo_like {
using tcp_detail::WriteSide;

namespace {

// Sends up to this size are written by the posting thread when the connection is idle.
constexpr std::size_t kDirectWriteBytes = 64 << 10;
// What a polling thread writes of one send per call before it reads again.
constexpr std::size_t kProgressWriteBytes = 512 << 10;
// write_some's cap for the io thread, which writes a send to its end.
constexpr std::size_t kWholePayload = std::numeric_limits<std::size_t>::max();

}  // namespace

// The poster: an op is posted. A receive goes to matching (submit_receive_locked); a send is
// written here when it is small and the connection idle, else queued for a waiter or the io
// thread, or, when the connection is not made yet, for when it is (tcp_connect.cc).
void TCPTransport::Impl::submit(const std::shared_ptr<Op>& op) {
  std::unique_lock lock(mu_);
  if (auto refusal = refusal_locked(*op)) {
    op->complete_locked(std::move(refusal));
    return;
  }
  if (op->is_send) {
    Connection& c = conn(op->peer);
    // A small send on an idle connection is written here, on the caller's thread: handing it
    // to the io thread would cost a wake-up, longer than the write. Under mu_, so the io
    // thread cannot close the socket meanwhile; the write never blocks.
    if (c.write_side == WriteSide::kOpen && !c.writing && c.sends.empty() && !c.dead &&
        op->bytes() <= kDirectWriteBytes && write_some(c, *op, kDirectWriteBytes)) {
      op->complete_locked(nullptr);
      return;
    }
    c.sends.push_back(op);
    if (c.write_side != WriteSide::kOpen) {  // it goes out once the connection is made
      want_connection_locked(op->peer, /*to_send=*/true);
      return;
    }
    // A thread polling in Request::wait writes it (progress_sends); with none, the io thread.
    // Read under mu_: a poller that leaves checks the queues under mu_ after it has counted
    // itself out, so the send is never left to nobody.
    if (progressors.load() > 0) return;
    lock.unlock();
    asio::post(io, [self = shared_from_this(), peer = op->peer] { self->write_next(peer); });
    return;
  }
  submit_receive_locked(op);
}

// Io thread: takes the send in front of `peer`'s queue and writes it, unless someone else
// writes that connection or a waiter polls now.
void TCPTransport::Impl::write_next(int peer) {
  Connection& c = conn(peer);
  std::shared_ptr<Op> op;
  {
    std::lock_guard lock(mu_);
    // A waiter polls now: it writes the queue itself (progress_sends); the last to leave
    // hands it back here (leave_progress).
    if (c.write_side != WriteSide::kOpen || c.writing || c.sends.empty() ||
        progressors.load() > 0) {
      return;
    }
    op = c.sends.front();
    c.sends.pop_front();
    op->in_flight = true;
    c.writing = true;
  }
  write_on(peer, std::move(op));
}

// Io thread, owning `peer`'s write side (`writing`): writes what the socket takes of `op`'s
// frame, waits in epoll for room and goes on, then completes `op` and starts the next send.
void TCPTransport::Impl::write_on(int peer, std::shared_ptr<Op> op) {
  Connection& c = conn(peer);
  int err = 0;
  error_code ec;
  if (!write_some(c, *op, kWholePayload, &err) && err == 0) {
    if (hand_back(c, op)) return;
    if (auto* r = register_write(c, ec)) {
      c.write_waiting = true;
      r->async_wait(asio::posix::descriptor_base::wait_write,
                    [self = shared_from_this(), peer, op](error_code wait_ec) {
                      self->conn(peer).write_waiting = false;
                      if (wait_ec) {
                        self->end_write(peer, op, wait_ec);
                      } else {
                        self->write_on(peer, op);
                      }
                    });
      return;
    }
  } else if (err != 0) {
    ec = error_code(err, boost::system::system_category());
  }
  end_write(peer, op, ec);
}

// Io thread, owning `c`'s write side with `op` written in part and the socket full: when a
// waiter polls now, puts `op` back in front of the queue for it (progress_sends) and lets go
// of the write side, instead of waking in epoll for every chunk the socket takes. A send
// posted before its waiter started polling (a collective posts, then waits) went to this
// thread: all_to_all of 64 MiB, 4 ranks on 2 cores, 38.5 ms against 45.0 (docs/benchmarks.md).
// Under mu_: a poller that leaves (leave_progress) then finds `op` queued.
bool TCPTransport::Impl::hand_back(Connection& c, std::shared_ptr<Op>& op) {
  std::lock_guard lock(mu_);
  if (progressors.load() == 0 || c.dead || aborted) return false;
  op->in_flight = false;
  c.sends.push_front(std::move(op));
  c.writing = false;
  settle(c);
  return true;
}

// Io thread: `op`'s write ended, written whole or failed with `ec`.
void TCPTransport::Impl::end_write(int peer, const std::shared_ptr<Op>& op, const error_code& ec) {
  Connection& c = conn(peer);
  {
    std::lock_guard lock(mu_);
    c.writing = false;
    if (ec && !c.dead && !aborted) {
      defer_write_failure_locked(peer, op, ec);
    } else if (ec) {
      kill_locked(peer, ec);
      op->complete_locked(aborted ? aborted : c.dead);
    } else {
      op->complete_locked(nullptr);
    }
  }
  if (!ec) write_next(peer);
  // After the next send started: one that waits for room keeps the epoll registration instead
  // of dropping and making it again for every queued send.
  settle(c);
}

// Writes as much of `op`'s frame, up to `cap` bytes of payload, as the socket takes without
// blocking; true when all of it has gone. The caller owns the connection's write side (mu_
// held, or `writing` set). A failure other than a full socket sets `*error` to its errno when
// given; pollers leave it to the io thread to meet again and report.
bool TCPTransport::Impl::write_some(Connection& c, Op& op, std::size_t cap, int* error) {
  const std::size_t head = op.header.size();
  const std::size_t total = head + op.send_data.size();
  const std::size_t skip = op.written;
  iovec iov[2];
  int n_iov = 0;
  if (skip < head) iov[n_iov++] = {op.header.data() + skip, head - skip};
  const std::size_t from = skip > head ? skip - head : 0;
  if (from < op.send_data.size()) {
    iov[n_iov++] = {const_cast<std::byte*>(op.send_data.data()) + from,
                    std::min(op.send_data.size() - from, cap)};
  }
  if (n_iov == 0) return true;
  msghdr msg{};
  msg.msg_iov = iov;
  msg.msg_iovlen = static_cast<std::size_t>(n_iov);
  const ssize_t n =
      ::sendmsg(c.write_fd.load(std::memory_order_relaxed), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n > 0) op.written += static_cast<std::size_t>(n);
  if (n < 0 && error != nullptr && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    *error = errno;
  }
  return op.written == total;
}

// A polling thread: writes what the sockets take of every idle connection's queued sends,
// at most kProgressWriteBytes per call and connection, so that reads interleave. The
// connection is marked `writing` meanwhile, so neither the io thread nor another poller
// writes it too; the fd is never closed while the transport lives (kill_locked).
void TCPTransport::Impl::progress_sends() {
  for (std::size_t p = 0; p < conns.size(); ++p) {
    Connection* c = conns[p].get();
    if (c == nullptr) continue;
    std::shared_ptr<Op> op;
    {
      std::lock_guard lock(mu_);
      if (c->write_side != WriteSide::kOpen || c->writing || c->sends.empty() || c->dead ||
          aborted) {
        continue;
      }
      op = c->sends.front();
      op->in_flight = true;
      c->writing = true;
    }
    const bool all = write_some(*c, *op, kProgressWriteBytes);
    std::lock_guard lock(mu_);
    c->writing = false;
    // The op is still the queue's front: fail_queued_locked leaves an in-flight send alone.
    if (all) {
      c->sends.pop_front();
      op->complete_locked(nullptr);
    } else if (aborted || c->dead) {  // failed meanwhile: this send will never go
      c->sends.pop_front();
      op->complete_locked(aborted ? aborted : c->dead);
    } else {
      op->in_flight = false;
    }
  }
}

// A poller counts itself out; the last one hands queued sends to the io thread.
void TCPTransport::Impl::leave_progress() {
  if (progressors.fetch_sub(1) != 1) return;
  std::lock_guard lock(mu_);
  for (std::size_t p = 0; p < conns.size(); ++p) {
    Connection* c = conns[p].get();
    if (c == nullptr || c->write_side != WriteSide::kOpen || c->writing || c->sends.empty()) {
      continue;
    }
    asio::post(io,
               [self = shared_from_this(), peer = static_cast<int>(p)] { self->write_next(peer); });
  }
}

}  // namespace c10d::inline v1::gloo_like
