// Matching: where an arriving message goes (its posted irecv, an unexpected entry, the sink, or
// nowhere yet: parked in its socket), where a posted irecv finds its message, and what a peer's
// unexpected messages may hold. All of it under mu_ (transport/matcher.h holds the queues).
//
// Parking: a message of kParkBytes or more whose irecv is not posted yet is left in the
// socket (the sender is flow-controlled meanwhile) until the irecv comes or kParkGrace
// passes, so it is read straight into the receiver's buffer: buffering it would cost an
// allocation, page faults and a copy, several times the transfer itself. After the grace it
// is buffered anyway, since the receiver may wait for a later message on this connection
// first (another tag).
//
// Unexpected entries: a message buffered before its irecv gets chunks of up to 1 MiB as its
// bytes arrive (next_window; transport/unexpected_buffer.h), never the length its header
// claims, and every chunk, plus kUnexpectedOverheadBytes per message, counts against the
// peer's limit (hold_locked) until the entry leaves its queue (release_locked).
#include <algorithm>
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"

namespace c10d::inline v1::gloo_like {

namespace {

// Messages from this size up wait in the socket for their irecv (see above).
constexpr std::uint64_t kParkBytes = 64 << 10;
constexpr std::chrono::milliseconds kParkGrace{20};
static_assert(kParkBytes > tcp_detail::kReadAhead,
              "a parked message's payload must reach into the socket");

// How the matcher fails a queued receive (a message of another call: Matcher::refused).
constexpr auto complete_with = [](const std::shared_ptr<tcp_detail::Op>& r, std::exception_ptr e) {
  r->complete_locked(std::move(e));
};

}  // namespace

namespace tcp_detail {

std::string Op::describe() const {
  if (any_source()) return transport::any_source_description(self, tag, bytes());
  return fmt::format("rank {} {} rank {} ({}, {} bytes)", self, is_send ? "isend to" : "irecv from",
                     peer, transport::tag_string(tag), bytes());
}

}  // namespace tcp_detail

using tcp_detail::kReadAhead;
using tcp_detail::what_of;

// Requires mu_. Chooses where the payload of the message in front goes: its irecv, an
// unexpected entry, the sink (a receive of another call or size), or nowhere yet (parked: false;
// also false when the entry broke the peer's limit and the transport aborted).
bool TCPTransport::Impl::start_payload_locked(Connection& c, int peer) {
  c.payload_got = 0;
  c.into_at = 0;
  c.into = {};  // a dropped payload, or an entry's first chunk: next_window
  std::optional<std::shared_ptr<Op>> recv = matcher.match_claiming(
      peer, c.frame_tag, [](const std::shared_ptr<Op>& lost) { lost->complete_locked(nullptr); });
  if (recv) {
    c.target = std::move(*recv);
    c.target->source.store(peer, std::memory_order_relaxed);
    if (matcher.refuse(c.target, rank, peer, c.frame_call, c.target->recv_data.size(),
                       c.frame_length, complete_with)) {
      c.target.reset();
    } else {
      c.target->in_flight = true;
      c.into = c.target->recv_data;
    }
  } else {
    matcher.check_arrived_call(rank, peer, c.frame_tag, c.frame_call, complete_with);
    const auto now = Clock::now();
    if (c.frame_length >= kParkBytes && !c.dead && !aborted) {
      if (!c.parked) {
        c.parked = true;
        c.parked_tag = c.frame_tag;
        c.park_deadline = now + kParkGrace;
        asio::post(io, [self = shared_from_this(), peer] {
          auto timer = std::make_shared<asio::steady_timer>(self->io, kParkGrace);
          timer->async_wait([self, timer, peer](error_code) { self->try_drain(peer); });
        });
        return false;
      }
      if (now < c.park_deadline) return false;
    }
    if (!hold_locked(c, peer, transport::kUnexpectedOverheadBytes)) return false;
    c.entry = std::make_shared<Unexpected>(peer, c.frame_length, c.frame_call);
    matcher.push_unexpected(peer, c.frame_tag, c.entry);
    // A small payload is most likely in c.ahead already: its one chunk now, under this lock.
    if (c.frame_length > 0 && c.frame_length <= kReadAhead) {
      if (!hold_locked(c, peer, c.frame_length)) return false;
      c.into = c.entry->data.span_at(0);
    }
  }
  c.parked = false;
  c.in_payload = true;
  return true;
}

// The payload in front is all here: complete its irecv, or offer the buffered message.
void TCPTransport::Impl::finish_payload(Connection& c, int peer) {
  std::lock_guard lock(mu_);
  c.in_payload = false;
  c.header_got = 0;
  if (c.abort_body) {
    c.abort_body = false;
    c.read_closed.store(true);
    // Blaming a rank outside the group, or this one, is a peer's garbage: blame no one. A rank
    // of the group that made no progress (sent as -2 - rank, decoded with `stalled`) stands,
    // and this rank's own notice says so too.
    kill_locked(peer, notice_loss(peer, {c.sink.get(), static_cast<std::size_t>(c.frame_length)}));
    return;
  }
  if (c.target) {
    c.target->complete_locked(nullptr);
    c.target.reset();
    return;
  }
  if (!c.entry) return;  // dropped
  std::shared_ptr<Unexpected> entry = std::move(c.entry);
  entry->complete = true;
  // Dropped (a failure, a size mismatch), or still queued for a receive to come.
  if (entry->dropped || !entry->waiter) return;
  // Taken while on the wire: hand over.
  entry->data.copy_to(entry->waiter->recv_data);
  entry->waiter->complete_locked(nullptr);
  release_locked(*entry);
  c.claimed.reset();
}

// Requires mu_: a receive, not refused, is posted. It takes the unexpected entry the matcher
// finds for it (an any-source one after its claim), else waits in the matcher's queue.
void TCPTransport::Impl::submit_receive_locked(const std::shared_ptr<Op>& op) {
  if (op->claim && op->claim->taken_by_other(op.get())) {
    op->complete_locked(nullptr);  // the receive completed on another transport
    return;
  }
  const auto found = matcher.find_unexpected(op->peer, op->tag);
  if (!found) {
    if (auto refusal = matcher.call_refusal(rank, *op)) {
      op->complete_locked(std::move(refusal));
      return;
    }
    if (op->any_source()) {
      if (auto none = no_sender_locked()) {
        refuse_any_source_locked(*op, std::move(none));
        return;
      }
      matcher.post(op->peer, op->tag, op);
      // A message for it parked in a socket (see drain) comes in now.
      for (std::size_t p = 0; p < conns.size(); ++p) {
        if (conns[p] && conns[p]->parked && conns[p]->parked_tag == op->tag) {
          asio::post(io, [self = shared_from_this(), peer = static_cast<int>(p)] {
            self->try_drain(peer);
          });
        }
      }
      return;
    }
    Connection& c = conn(op->peer);
    if (c.dead) {
      op->complete_locked(c.dead);
      return;
    }
    matcher.post(op->peer, op->tag, op);
    // A peer that is gone fails the connect now, rather than this receive at its timeout.
    if (lazy) want_connection_locked(op->peer, /*to_send=*/false);
    if (c.parked && c.parked_tag == op->tag) {
      asio::post(io, [self = shared_from_this(), peer = op->peer] { self->try_drain(peer); });
    }
    return;
  }
  if (op->claim && !op->claim->take(op.get())) {
    op->complete_locked(nullptr);  // the other part took the claim just now; the entry stays
    return;
  }
  const int peer = found->peer;
  Connection& c = conn(peer);
  const std::shared_ptr<Unexpected> u = matcher.take(*found);
  op->source.store(peer, std::memory_order_relaxed);
  // A message of another call or size is dropped, the rest of it unread if it is still arriving.
  if (!matcher.refuse(op, rank, peer, u->call, op->recv_data.size(), u->data.size(),
                      complete_with)) {
    if (!u->complete) {
      u->waiter = op;  // finish_payload hands it over
      op->in_flight = true;
      c.claimed = u;
      return;
    }
    u->data.copy_to(op->recv_data);
    op->complete_locked(nullptr);
  }
  release_locked(*u);
}

// Requires mu_. `bytes` more held for `peer`'s unexpected messages; past the limit the
// transport aborts, naming the peer, and this returns false.
bool TCPTransport::Impl::hold_locked(Connection& c, int peer, std::uint64_t bytes) {
  if (auto refused = matcher.hold(peer, bytes, who)) {
    c.read_closed.store(true);
    abort_locked(std::move(refused));
    return false;
  }
  return true;
}

// Requires mu_. `u` no longer counts against its peer's limit (it left its queue, or its
// receive took it whole), and if it is still arriving the read side drops the rest of it
// (next_window).
void TCPTransport::Impl::release_locked(Unexpected& u) {
  matcher.release(u.peer, u.held());
  if (!u.complete) u.dropped = true;
}

// Requires mu_. Why `op` cannot start. A receive from a dead peer may still match a message it
// sent; an any-source receive is refused later (submit_receive_locked: no_sender_locked).
std::exception_ptr TCPTransport::Impl::refusal_locked(const Op& op) {
  if (aborted) return aborted;
  if (op.any_source()) return nullptr;
  const Connection& c = conn(op.peer);
  if (!c.dead) return nullptr;
  if (!op.is_send && matcher.find_unexpected(op.peer, op.tag)) return nullptr;
  return c.dead;
}

// Requires mu_. Why an any-source receive cannot wait: no peer is left that could send (every
// connection is gone; the last one's error says why). Null while one is up, or may still come
// (a lazy transport's peer that has not connected yet). Peers another channel carries
// (`elsewhere`) send nothing here.
std::exception_ptr TCPTransport::Impl::no_sender_locked() const {
  std::exception_ptr last;
  for (std::size_t p = 0; p < conns.size(); ++p) {
    const auto& c = conns[p];
    if (!c || elsewhere[p]) continue;
    if (!c->dead) return nullptr;
    last = c->dead;
  }
  const bool any_elsewhere = std::find(elsewhere.begin(), elsewhere.end(), 1) != elsewhere.end();
  return C10D_ERROR(NetworkError,
                    "rank {}: an any-source receive cannot complete: the connection to every "
                    "peer is gone (the last: {})",
                    rank,
                    last            ? what_of(last)
                    : any_elsewhere ? std::string("every peer is on this host, and closed")
                                    : std::string("this rank has no peers"));
}

// Requires mu_. Fails the queued any-source receives with `e`, or, when `e` is null, with
// no_sender_locked once no peer is left (a part of a composite receive gives up instead).
void TCPTransport::Impl::fail_any_source_locked(std::exception_ptr e) {
  if (!matcher.any_source_posted()) return;
  const bool aborting = e != nullptr;
  if (!e) e = no_sender_locked();
  if (!e) return;
  matcher.take_receives(transport::kAnySource, [&](const std::shared_ptr<Op>& op) {
    if (aborting) {
      op->complete_locked(e);
    } else {
      refuse_any_source_locked(*op, e);
    }
  });
}

// Requires mu_. An any-source receive that no peer is left to send to fails with `none`; a
// part of a composite receive gives up instead (transport/matcher.h: SourceClaim), and stays
// pending, in no queue, until its request goes.
void TCPTransport::Impl::refuse_any_source_locked(Op& op, std::exception_ptr none) {
  if (op.claim) {
    op.claim->give_up(std::move(none));
    op.claim->completed();
  } else {
    op.complete_locked(std::move(none));
  }
}

}  // namespace c10d::inline v1::gloo_like
