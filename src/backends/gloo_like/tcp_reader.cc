// The reader: frames off a peer's read_fd. A connection's bytes are read by whichever thread
// holds its read_owner flag (tcp_connection.h), in drain(): the io thread when epoll says the
// socket is readable, or a thread waiting in TCPRequest::wait/test for a message from this
// peer, which then reads its message itself instead of waiting for the io thread to wake (a
// wake-up costs more than a small message's whole trip). drain() reads without blocking until
// the socket is empty, so a thread that finds the flag taken only sets drain_again, and the
// holder drains once more before it lets go: no readiness is ever lost between two threads.
// Where a payload goes is matching's choice (tcp_matching.cc).
#include <sys/socket.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"

namespace c10d::inline v1::gloo_like {
using tcp_detail::kReadAhead;
using tcp_detail::PeerEnd;

namespace {

// A payload nobody will read (a receive's size did not match) is read through a buffer this size
// and dropped; an abort notice's payload lands there too.
constexpr std::size_t kSinkBytes = 64 << 10;
static_assert(kSinkBytes >= 4 + kMaxAbortMessageBytes, "an abort notice fits the sink");

}  // namespace

// Any thread: reads what read_fd has, unless another thread holds read_owner (then that one
// drains once more for it).
void TCPTransport::Impl::try_drain(int peer) {
  Connection& c = conn(peer);
  if (c.read_fd.load(std::memory_order_acquire) < 0) return;  // the peer has not connected yet
  c.drain_again.store(true);
  if (c.read_owner.exchange(true)) return;  // the holder will see drain_again
  for (;;) {
    c.drain_again.store(false);
    try {
      drain(c, peer);
    } catch (...) {  // nothing in drain should throw; if it does, no thread unwinds from here
      c.read_closed.store(true);
      fail_on_exception(std::current_exception(), fmt::format("reading from peer rank {}", peer));
      std::lock_guard lock(mu_);
      if (c.target) c.target->complete_locked(aborted);  // in flight: in no queue abort fails
      c.target.reset();
    }
    c.read_owner.store(false);
    if (!c.drain_again.load() || c.read_owner.exchange(true)) return;
  }
}

// Holder of c.read_owner. Reads, without blocking, until the socket is empty, the message in
// front is parked, or the stream ended. Bytes are taken from c.ahead first; the socket is read
// into c.ahead (kReadAhead at a time) for headers and small payloads, and straight into place
// for larger payloads. So it returns only when it needs bytes the socket does not have yet
// (or parked, or ended): what c.ahead holds then is part of the frame in front, and a poller
// that finds the socket empty (poll_drain) misses nothing. A read that returns less than it
// asked for emptied the socket (TCP hands over all it has), so drain returns at the next need
// for bytes instead of asking again for an EAGAIN: bytes that come later raise a new
// readiness edge for the io thread, and pollers poll. One recv per small message, as Open MPI
// does, against three before (header, payload, EAGAIN). A payload goes into c.into, which for
// a posted irecv is its whole buffer; an unexpected message gets its next chunk, and a dropped
// one the sink again, only when bytes for it are here (next_window).
void TCPTransport::Impl::drain(Connection& c, int peer) {
  bool empty = false;  // the last read found the socket emptied
  while (!c.read_closed.load()) {
    if (!c.in_payload) {
      if (c.header_got < c.header.size()) {
        if (c.ahead_begin == c.ahead_end && !read_ahead(c, peer, empty)) return;
        c.header_got +=
            take_ahead(c, c.header.data() + c.header_got, c.header.size() - c.header_got);
        if (c.header_got < c.header.size()) continue;
        if (!read_frame_header(c, peer)) return;
        if (c.in_payload) continue;  // an abort notice's payload
        c.heard_tag.store(c.frame_tag, std::memory_order_relaxed);
        c.heard_at.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
      }
      std::lock_guard lock(mu_);
      if (!start_payload_locked(c, peer)) return;  // parked, or over the limit
    }
    if (c.payload_got < c.frame_length) {
      std::uint64_t used = c.payload_got - c.into_at;
      if (used == c.into.size()) {
        if (c.ahead_begin == c.ahead_end && empty) return;  // no bytes for a new window yet
        if (!next_window(c, peer)) return;
        used = 0;
      }
      std::byte* to = c.into.data() + used;
      const std::uint64_t room =
          std::min<std::uint64_t>(c.frame_length - c.payload_got, c.into.size() - used);
      if (c.ahead_begin < c.ahead_end) {
        c.payload_got +=
            take_ahead(c, to, static_cast<std::size_t>(std::min<std::uint64_t>(room, kReadAhead)));
      } else if (room >= kReadAhead) {
        if (empty) return;
        const ssize_t n = ::recv(c.read_fd.load(std::memory_order_relaxed), to,
                                 static_cast<std::size_t>(room), MSG_DONTWAIT);
        if (n <= 0) {
          if (!read_failed(c, peer, n)) return;
          continue;
        }
        c.payload_got += static_cast<std::uint64_t>(n);
        empty = static_cast<std::uint64_t>(n) < room;
      } else if (!read_ahead(c, peer, empty)) {
        return;
      }
      if (c.payload_got < c.frame_length) continue;
    }
    finish_payload(c, peer);
  }
}

// Holder of c.read_owner, with c.into full and more of the payload to come: where the next
// bytes go. An unexpected entry gets its next chunk (counted against the peer's limit: false
// when that aborted the transport); one dropped meanwhile (release_locked), or a payload
// nobody takes, goes through the sink.
bool TCPTransport::Impl::next_window(Connection& c, int peer) {
  c.into_at = c.payload_got;
  if (c.entry) {
    std::lock_guard lock(mu_);
    if (!c.entry->dropped) {
      if (!hold_locked(c, peer, c.entry->data.allocation_at(c.payload_got))) return false;
      c.into = c.entry->data.span_at(c.payload_got);
      return true;
    }
    c.entry->data.release();
    c.entry.reset();
  }
  c.into = sink(c);
  return true;
}

std::span<std::byte> TCPTransport::Impl::sink(Connection& c) {
  if (!c.sink) c.sink = std::make_unique_for_overwrite<std::byte[]>(kSinkBytes);
  return {c.sink.get(), kSinkBytes};
}

// Holder of c.read_owner: moves up to `want` bytes from c.ahead to `to`; returns how many.
std::size_t TCPTransport::Impl::take_ahead(Connection& c, std::byte* to, std::size_t want) {
  const std::size_t k = std::min(want, c.ahead_end - c.ahead_begin);
  std::memcpy(to, c.ahead.get() + c.ahead_begin, k);
  c.ahead_begin += k;
  return k;
}

// Holder of c.read_owner, with c.ahead consumed: refills it from the socket. False when the
// socket is (or was found) empty or the stream ended (read_closed is then set).
bool TCPTransport::Impl::read_ahead(Connection& c, int peer, bool& empty) {
  while (!empty) {
    const ssize_t n =
        ::recv(c.read_fd.load(std::memory_order_relaxed), c.ahead.get(), kReadAhead, MSG_DONTWAIT);
    if (n > 0) {
      c.ahead_begin = 0;
      c.ahead_end = static_cast<std::size_t>(n);
      empty = c.ahead_end < kReadAhead;
      return true;
    }
    if (!read_failed(c, peer, n) || c.read_closed.load()) return false;
  }
  return false;
}

// recv returned n <= 0: false when the socket is merely empty (come back later), true when
// the caller should loop (EINTR, or the stream ended and read_closed is now set).
bool TCPTransport::Impl::read_failed(Connection& c, int peer, ssize_t n) {
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
  if (n < 0 && errno == EINTR) return true;
  const error_code ec =
      n == 0 ? error_code(asio::error::eof) : error_code(errno, boost::system::system_category());
  // A peer that aborted while writing to us could not frame an abort notice; it published the
  // cause first, then closed (publish_failure).
  c.read_closed.store(true);
  end_unexplained(peer, ec);
  return true;
}

// Holder of c.read_owner: a header just arrived. Decodes it (decode_frame_header), ends the
// stream at a goodbye or a fault, and starts an abort notice's payload (true: go on reading;
// false: the stream is over).
bool TCPTransport::Impl::read_frame_header(Connection& c, int peer) {
  FrameHeader h;
  const FrameFault fault = decode_frame_header(c.header, h);
  c.frame_tag = h.tag;
  c.frame_length = h.length;
  c.frame_call = h.call;
  if (fault != FrameFault::kNone || h.kind == FrameKind::kGoodbye) {
    std::lock_guard lock(mu_);
    c.read_closed.store(true);
    kill_locked(peer, fault != FrameFault::kNone ? fault_loss(peer, fault, h) : goodbye_loss(peer));
    return false;
  }
  if (h.kind == FrameKind::kAbort) {
    c.into = sink(c);
    c.into_at = 0;
    c.payload_got = 0;
    c.abort_body = true;
    c.in_payload = true;
  }
  return true;
}

}  // namespace c10d::inline v1::gloo_like
