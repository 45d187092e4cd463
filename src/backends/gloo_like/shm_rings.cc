// ShmTransport's rings (shm_transport_impl.h): under Impl::mu, whoever moves bytes writes each
// same-host peer's queued sends into the ring in that peer's segment, in chunks as room appears
// (large ones as single-copy descriptors, shm_cma.cc, which also copies those it receives),
// and reads the messages in its own segment's rings, each into its posted receive or, when none
// is posted yet, into an unexpected buffer of its own (bounded per peer), ringing the doorbell
// of whoever may wait for the bytes or the room.
#include <algorithm>
#include <cstdint>
#include <optional>

#include "backends/gloo_like/shm_transport_impl.h"
#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::inline v1::gloo_like {

namespace {

using namespace shm_detail;

// Bytes copied between publications of a ring position: the other side starts on a chunk as
// soon as it is in, so a large message's two copies overlap.
constexpr std::uint64_t kChunk = std::uint64_t{128} << 10;

// How the matcher fails a queued receive (a message of another call: Matcher::refused).
constexpr auto complete_with = [](const std::shared_ptr<Op>& r, std::exception_ptr e) {
  r->complete(std::move(e));
};

}  // namespace

// ---- Writing ----

// Under mu: writes the acknowledgements owed to the peer and its queued sends (descriptors for
// single-copy ones, shm_cma.cc) while its ring has room. True when bytes moved.
bool ShmTransport::Impl::write_locked(Peer& p) {
  if (p.sends.empty() && p.acks.empty()) return false;
  ShmRing::Writer w = p.out.writer();
  bool moved = false;
  for (;;) {
    if (p.send_pos == 0) {  // between messages
      if (!p.acks.empty()) moved |= write_acks_locked(p, w);
      if (!p.acks.empty() || p.sends.empty()) break;
      Op& front = *p.sends.front();
      if (p.cma_out && front.bytes >= cma_min_bytes && front.send_data != nullptr) {
        if (!write_single_copy_locked(p, w, front)) break;
        moved = true;
        continue;
      }
    }
    Op& op = *p.sends.front();
    const std::uint64_t total = kMessageHeaderBytes + padded(op.bytes);
    if (p.send_pos == 0) {
      if (w.room() < kMessageHeaderBytes) break;
      MessageHeader h;
      h.tag = op.tag;
      h.bytes = op.bytes;
      h.sequence = p.next_sequence++;
      h.call = op.call;
      w.write(std::as_bytes(std::span(&h, 1)));  // published with the payload's first chunk
      p.send_pos = kMessageHeaderBytes;
      moved = true;
    }
    while (p.send_pos < total) {
      const std::uint64_t room = w.room();
      if (room == 0) break;
      const std::uint64_t n = std::min({room, total - p.send_pos, kChunk});
      const std::uint64_t at = p.send_pos - kMessageHeaderBytes;  // in the padded payload
      std::uint64_t real = 0;
      if (op.send_data != nullptr && at < op.bytes) {
        real = std::min<std::uint64_t>(n, op.bytes - at);
        w.write({op.send_data + at, static_cast<std::size_t>(real)});
      }
      w.skip(n - real);  // padding, or what an abandoned send no longer has
      p.send_pos += n;
      w.publish();
      moved = true;
    }
    if (p.send_pos < total) break;  // the ring is full
    op.complete();
    p.sends.pop_front();
    p.send_pos = 0;
  }
  if (moved) {
    w.publish();
    ring_doorbell(p.header);
  }
  return moved;
}

// ---- Reading ----

// Under mu: a message from `p` begins (its header checked). Matches it with the oldest posted
// receive of its tag, else keeps it as unexpected: false when that broke the peer's limit
// (the transport has failed).
bool ShmTransport::Impl::begin_message_locked(Peer& p, const MessageHeader& h) {
  p.reading = true;
  p.reading_bytes = h.bytes;
  p.reading_pos = 0;
  std::optional<std::shared_ptr<Op>> recv = matcher.match_claiming(
      p.rank, h.tag, [](const std::shared_ptr<Op>& lost) { lost->complete(); });
  if (!recv) {
    check_arrived_locked(p, h);
    if (!hold_locked(p, transport::kUnexpectedOverheadBytes)) return false;
    auto u = std::make_shared<Unexpected>(p.rank, h.bytes, h.call);
    matcher.push_unexpected(p.rank, h.tag, u);
    p.reading_unexpected = std::move(u);
    return true;
  }
  std::shared_ptr<Op> op = std::move(*recv);
  op->source.store(p.rank, std::memory_order_relaxed);
  if (refuse_locked(op, p.rank, h.call, h.bytes)) return true;  // the message is dropped
  p.reading_op = std::move(op);
  return true;
}

// Under mu: a message from `p` (its header `h`) is about to wait unexpected; receives of its op
// that expect another call fail (transport/matcher.h: Calls of ops).
void ShmTransport::Impl::check_arrived_locked(const Peer& p, const MessageHeader& h) {
  matcher.check_arrived_call(rank, p.rank, h.tag, h.call, complete_with);
}

// Under mu: `bytes` more held for `p`'s unexpected messages; past the limit the transport
// fails, naming the peer (false).
bool ShmTransport::Impl::hold_locked(Peer& p, std::uint64_t bytes) {
  if (auto refused = matcher.hold(p.rank, bytes, who)) {
    abort_locked(std::move(refused));
    return false;
  }
  return true;
}

// Under mu: copies the next `n` payload bytes of `r` (not consumed) into the arriving
// unexpected message, from its byte `at` on, allocating its chunks as they fill. False when the
// limit broke.
bool ShmTransport::Impl::copy_to_unexpected_locked(Peer& p, const ShmRing::Reader& r,
                                                   std::uint64_t at, std::uint64_t n) {
  Unexpected& u = *p.reading_unexpected;
  std::uint64_t offset = 0;
  while (n > 0) {
    if (!hold_locked(p, u.data.allocation_at(at))) return false;
    const auto room = u.data.span_at(at);
    const std::uint64_t k = std::min<std::uint64_t>(n, room.size());
    r.peek(offset, room.first(static_cast<std::size_t>(k)));
    offset += k;
    at += k;
    n -= k;
    u.got = at;
  }
  return true;
}

// Under mu: when the receive `op` cannot take a message of `call` and `bytes` from `sender`,
// fails it, and the rest of its op when the calls differ (Matcher::refuse): true. False when it
// can take it.
bool ShmTransport::Impl::refuse_locked(const std::shared_ptr<Op>& op, int sender,
                                       transport::Call call, std::uint64_t bytes) {
  return matcher.refuse(op, rank, sender, call, op->bytes, bytes, complete_with);
}

// Under mu: reads what has arrived from `p`. True when bytes moved.
bool ShmTransport::Impl::read_locked(Peer& p) {
  ShmRing::Reader r = p.in.reader();
  bool moved = false;
  while (r.available() != 0) {
    if (!p.reading) {
      if (r.available() < kMessageHeaderBytes) break;
      MessageHeader h;
      r.peek(0, std::as_writable_bytes(std::span(&h, 1)));
      if (const std::string bad =
              check_message_header(h, p.next_in_sequence, {.single_copy = p.cma_in, .pid = p.pid});
          !bad.empty()) {
        abort_locked(C10D_ERROR(NetworkError,
                                "rank {}: corrupt message header from rank {} in shared memory: {}",
                                rank, p.rank, bad));
        return true;
      }
      ++p.next_in_sequence;
      r.skip(kMessageHeaderBytes);
      moved = true;
      p.heard = {true, {}, h.tag};
      p.heard_at = Clock::now();
      if (h.kind == kAck) {  // nothing follows these two in the ring
        if (!take_ack_locked(p, h)) return true;
        continue;
      }
      if (h.kind == kSingleCopy) {
        if (!begin_single_copy_locked(p, h)) return true;
        continue;
      }
      if (!begin_message_locked(p, h)) return true;
    }
    const std::uint64_t total = padded(p.reading_bytes);
    while (p.reading_pos < total && r.available() != 0) {
      const std::uint64_t n = std::min({r.available(), total - p.reading_pos, kChunk});
      const std::uint64_t at = p.reading_pos;
      if (at < p.reading_bytes) {
        const std::uint64_t real = std::min<std::uint64_t>(n, p.reading_bytes - at);
        if (p.reading_op) {
          r.peek(0, {p.reading_op->recv_data + at, static_cast<std::size_t>(real)});
        } else if (p.reading_unexpected && !copy_to_unexpected_locked(p, r, at, real)) {
          return true;
        }
      }
      r.skip(n);  // padding included
      p.reading_pos += n;
      r.publish();
      moved = true;
    }
    if (p.reading_pos < total) break;
    if (p.reading_op) p.reading_op->complete();
    p.reading_op.reset();
    p.reading_unexpected.reset();
    p.reading = false;
  }
  if (moved) {
    r.publish();
    ring_doorbell(p.header);  // its writer may be waiting for room
  }
  return moved;
}

// Under mu.
bool ShmTransport::Impl::progress_locked() {
  if (failure) return false;
  bool moved = false;
  for (Peer& p : peers) {
    moved |= write_locked(p);
    if (failure) break;
    moved |= read_locked(p);
    if (failure) break;
    if (p.pulls.empty() && p.parked.empty()) continue;
    moved |= pull_locked(p);
    if (failure) break;
    if (!p.acks.empty()) write_locked(p);  // the sender waits for them
  }
  // A thread of this rank may sleep on a request this one completed.
  if (moved && own_header->sleepers.load(std::memory_order_seq_cst) != 0) {
    ring_doorbell(own_header);
  }
  return moved;
}

bool ShmTransport::Impl::progress() {
  std::unique_lock lock(mu, std::try_to_lock);
  return lock.owns_lock() && progress_locked();
}

}  // namespace c10d::inline v1::gloo_like
