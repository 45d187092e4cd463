// The transport's failures: a lost peer (kill_locked), an abort with its last frame (an abort
// notice naming the first cause, or a goodbye) on every connection, in both directions, and the
// end of a connection as its last frame says (the peer's goodbye, its abort notice, a frame of
// no protocol). The records in the store are tcp_records.cc's.
#include <sys/socket.h>

#include <algorithm>
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"
#include "core/logging.h"

namespace c10d::inline v1::gloo_like {

using core::what_of;
using tcp_detail::PeerEnd;
using tcp_detail::WriteSide;

namespace {

// Shuts `fd` down, once it is made (-1: nothing yet).
void shut(const std::atomic<int>& fd, int how) {
  const int n = fd.load(std::memory_order_acquire);
  if (n >= 0) ::shutdown(n, how);
}

}  // namespace

// Requires mu_. Fails the queued ops of `c` (peer `peer`). Messages that arrived whole stay
// receivable unless `arrived` drops them: a peer that sent and then closed its end has still
// sent them. Any-source receives fail only when no peer is left (fail_any_source_locked).
void TCPTransport::Impl::fail_queued_locked(Connection& c, int peer, const std::exception_ptr& e,
                                            ArrivedMessages arrived) {
  if (c.failed_write) {
    c.failed_write->complete_locked(e);
    c.failed_write.reset();
  }
  // A send a poller is writing (progress_sends) stays: the poller still reads its buffer, and
  // completes it when its write returns.
  std::erase_if(c.sends, [&](const std::shared_ptr<Op>& op) {
    if (op->in_flight) return false;
    op->complete_locked(e);
    return true;
  });
  matcher.take_receives(peer, [&](const std::shared_ptr<Op>& op) { op->complete_locked(e); });
  if (c.claimed) {
    if (!c.claimed->waiter->done) c.claimed->waiter->complete_locked(e);
    release_locked(*c.claimed);
    c.claimed.reset();
  }
  matcher.erase_unexpected_if(peer, [&](const std::shared_ptr<Unexpected>& u) {
    const bool drop = arrived == ArrivedMessages::kDrop || !u->complete;
    if (drop) release_locked(*u);
    return drop;
  });
}

// Requires mu_; io thread. The connection to `peer` broke with the socket error `ec`.
void TCPTransport::Impl::kill_locked(int peer, const error_code& ec) {
  kill_locked(peer, PeerLoss{.ec = ec});
}

// Requires mu_. Marks the connection to `peer` dead with `loss.why` (or, when null, a
// loss caused by `loss.ec`), closes it and fails its queued ops. A failure (a loss or an abort
// frame, not a goodbye) aborts the whole transport when fail_all_on_peer_loss is set.
// `loss.blame` is whom this rank's abort notice will name, passed on from the notice or record
// that explained the loss (none: `peer` itself, gone).
void TCPTransport::Impl::kill_locked(int peer, PeerLoss loss) {
  Connection& c = conn(peer);
  // Shut down, never closed before the transport goes: another thread may be reading the fd,
  // and a closed fd number can be reused.
  shut(c.read_fd, SHUT_RDWR);
  shut(c.write_fd, SHUT_RDWR);
  if (!c.dead) {
    c.dead = loss.why ? std::move(loss.why)
                      : C10D_ERROR(NetworkError, "rank {}: connection to peer rank {} lost: {}",
                                   rank, peer, loss.ec.message());
    if (loss.end == PeerEnd::kFailure && fail_all_on_peer_loss && !aborted) {
      abort_locked(c.dead, loss.blame.value_or(Blame::gone(peer)));
      return;
    }
  }
  fail_queued_locked(c, peer, aborted ? aborted : c.dead,
                     aborted ? ArrivedMessages::kDrop : ArrivedMessages::kKeep);
  fail_any_source_locked(aborted);
}

// Requires mu_; io thread. A write to `peer` failed: stop writing, let the read loop find the
// cause within a second, and kill the connection with `ec` if it has not by then. No later
// send starts meanwhile (the write side counts as failed): it would fail alike, and its
// failure would take failed_write's place, leaving that send in flight for ever.
void TCPTransport::Impl::defer_write_failure_locked(int peer, std::shared_ptr<Op> op,
                                                    const error_code& ec) {
  Connection& c = conn(peer);
  c.failed_write = std::move(op);
  c.write_side = WriteSide::kFailed;
  shut(c.write_fd, SHUT_WR);
  auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::seconds(1));
  timer->async_wait([self = shared_from_this(), timer, peer, ec](error_code) {
    std::lock_guard lock(self->mu_);
    self->kill_locked(peer, ec);
  });
}

// What a rank that hears `notice` from `peer` reports, after its own "rank R: ".
std::string TCPTransport::Impl::describe_failure(const AbortNotice& notice, int peer) {
  const std::string cause =
      notice.lost_rank == kNoLostRank ? fmt::format("peer rank {} aborted", peer)
      : notice.stalled ? fmt::format("peer rank {} made no progress", notice.lost_rank)
                       : fmt::format("peer rank {} is gone", notice.lost_rank);
  return fmt::format("{} (rank {} reports: {})", cause, peer, notice.message);
}

// The losses a peer's last frames make, read off its connection (tcp_reader.cc) or back on the
// one this rank made (end_of_last_frame): a goodbye ends only that peer's connection; an abort
// notice names the first cause as the peer heard it (a lost rank outside the group, or this one,
// is a peer's garbage and blames no one: heard_abort_notice); a header of no protocol ends the
// connection as a loss of the peer, naming the fault.
tcp_detail::PeerLoss TCPTransport::Impl::goodbye_loss(int peer) const {
  return PeerLoss{.why = C10D_ERROR(NetworkError,
                                    "rank {}: peer rank {} closed its transport (it finished or "
                                    "destroyed its group)",
                                    rank, peer),
                  .end = PeerEnd::kGoodbye};
}
tcp_detail::PeerLoss TCPTransport::Impl::notice_loss(int peer,
                                                     std::span<const std::byte> payload) const {
  const AbortNotice notice =
      heard_abort_notice(decode_abort_notice(payload), rank, static_cast<int>(conns.size()));
  return PeerLoss{
      .why = C10D_ERROR(NetworkError, "rank {}: {}", rank, describe_failure(notice, peer)),
      .blame = Blame{notice.lost_rank, notice.stalled}};
}
tcp_detail::PeerLoss TCPTransport::Impl::fault_loss(int peer, FrameFault fault,
                                                    const FrameHeader& h) const {
  return PeerLoss{.why = C10D_ERROR(NetworkError,
                                    "rank {}: peer rank {} sent a frame header that is not of "
                                    "this protocol: {}",
                                    rank, peer, describe_frame_fault(fault, h))};
}

// Io thread: the reverse watch of `peer` ended with `frame`, its last frame whole, or what came of
// it before the stream ended (`ec`). Ends the connection as the frame says; a stream that ended
// without one is a loss, explained by a record in the store when there is one (as read_failed).
void TCPTransport::Impl::end_of_last_frame(int peer, std::span<const std::byte> frame,
                                           const error_code& ec) {
  Connection& c = conn(peer);
  {
    std::lock_guard lock(mu_);
    if (c.dead) {  // ended already (this rank shut it down, or the peer's own connection told)
      stop_reverse(c);
      return;
    }
  }
  std::optional<PeerLoss> loss;
  if (frame.size() >= kFrameHeaderBytes) {
    FrameHeader h;
    const FrameFault fault = decode_frame_header(frame.first<kFrameHeaderBytes>(), h);
    if (fault != FrameFault::kNone) {
      loss = fault_loss(peer, fault, h);
    } else if (h.kind == FrameKind::kGoodbye) {
      loss = goodbye_loss(peer);
    } else if (h.kind == FrameKind::kAbort && frame.size() == kFrameHeaderBytes + h.length) {
      loss = notice_loss(peer, frame.subspan(kFrameHeaderBytes));
    } else if (h.kind == FrameKind::kData) {
      loss = PeerLoss{.why = C10D_ERROR(NetworkError,
                                        "rank {}: peer rank {} sent a message on the connection "
                                        "this rank made to it, which carries none",
                                        rank, peer)};
    }
  }
  stop_reverse(c);
  if (!loss) {
    end_unexplained(peer, ec ? ec : error_code(asio::error::eof));
    return;
  }
  std::lock_guard lock(mu_);
  kill_locked(peer, std::move(*loss));
}

// Io thread, as a transport goes down: `frame` (a goodbye or an abort notice, tcp_wire.h) on
// every connection, then close. Forward on the connections this rank made, when idle (one
// mid-write just closes: its peer then sees a loss); back on the ones its peers made, which
// carried nothing that way, so the frame always fits (tcp_connection.h).
void TCPTransport::Impl::send_last_frame_and_close(const std::vector<std::byte>& frame) {
  stop_accepting();
  std::lock_guard lock(mu_);
  for (auto& c : conns) {
    if (!c || c->dead) continue;
    // One attempt each: a frame the socket does not take whole arrives cut, as a loss.
    if (c->write_side == WriteSide::kOpen && !c->writing) {
      [[maybe_unused]] const ssize_t n =
          ::send(c->write_fd.load(), frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    if (const int in = c->read_fd.load(std::memory_order_acquire); in >= 0) {
      [[maybe_unused]] const ssize_t n =
          ::send(in, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
  }
  close_all();  // under mu_: a thread writing directly (submit) never sees a closed fd
}

// An exception escaped `where` (a handler of the io thread, or a read): abort the transport
// with a NetworkError that carries it.
void TCPTransport::Impl::fail_on_exception(const std::exception_ptr& e, const std::string& where) {
  const std::string what = what_of(e);
  C10D_LOG_ERROR("rank {}: {} of the TCP transport failed: {}", rank, where, what);
  std::lock_guard lock(mu_);
  abort_locked(
      C10D_ERROR(NetworkError, "rank {}: {} of the TCP transport failed: {}", rank, where, what));
}

// Io thread, under mu_; see kill_locked for why nothing is closed but the reverse watch's own
// descriptors (stop_reverse).
void TCPTransport::Impl::close_all() {
  for (auto& c : conns) {
    if (!c) continue;
    shut(c->read_fd, SHUT_RDWR);
    shut(c->write_fd, SHUT_RDWR);
    stop_reverse(*c);
  }
}

void TCPTransport::Impl::abort(std::exception_ptr reason, LastFrame last) {
  // An op that timed out names the rank it found stalled (PeerTimeout): the notice passes that
  // on, so the others blame it rather than this rank, which only gave up waiting.
  Blame blame;
  try {
    if (reason) std::rethrow_exception(reason);
  } catch (const transport::PeerTimeout& t) {
    if (t.peer() >= 0) blame = Blame::made_no_progress(t.peer());
  } catch (...) {
  }
  std::lock_guard lock(mu_);
  abort_locked(std::move(reason), blame, last);
}

// Fails everything with `reason` and closes every connection after a last frame: a goodbye, or
// an abort notice naming `blame` (the peer whose loss caused this, or the one that made no
// progress, or no one) so that the other ranks learn the first cause rather than this rank's
// reaction to it.
void TCPTransport::Impl::abort_locked(std::exception_ptr reason, Blame blame, LastFrame last) {
  if (aborted) return;
  aborted = std::move(reason);
  closing.store(true);  // connects under way give up; the connector threads leave
  connect_cv.notify_all();
  failure_watch_cv.notify_all();
  if (on_abort) {
    // A callback that throws must not leave the abort half done (or unwind the io thread).
    try {
      on_abort(aborted);
    } catch (...) {
      C10D_LOG_ERROR("rank {}: TCPTransportOptions::on_abort threw: {}", rank,
                     what_of(std::current_exception()));
    }
  }
  for (std::size_t p = 0; p < conns.size(); ++p) {
    if (conns[p]) {
      fail_queued_locked(*conns[p], static_cast<int>(p), aborted, ArrivedMessages::kDrop);
    }
  }
  fail_any_source_locked(aborted);
  std::vector<std::byte> frame;
  std::optional<AbortNotice> notice;
  if (last == LastFrame::kGoodbye) {
    const auto goodbye = encode_frame_header(kGoodbyeTag, 0);
    frame.assign(goodbye.begin(), goodbye.end());
  } else {
    notice = AbortNotice{blame.rank, what_of(aborted), blame.stalled};
    frame = encode_abort_notice(*notice);
  }
  asio::post(io, [self = shared_from_this(), frame = std::move(frame), notice] {
    if (notice) self->publish_failure(*notice);
    self->send_last_frame_and_close(frame);
  });
}

}  // namespace c10d::inline v1::gloo_like
