// ShmTransport's single-copy messages (shm_transport_impl.h). A message of cma_min_bytes or more
// to a peer that can read this process is not copied through the ring: its sender writes a
// descriptor (shm_layout.h: kSingleCopy, with its pid, the buffer's address and length) and the
// receiver, once a receive takes it, copies the bytes straight from the sender's buffer into the
// receive's with process_vm_readv (transport/cross_memory.h), a chunk per progress turn, then
// answers with an acknowledgement (kAck) through its own ring to the sender, whose request
// completes only then: the sender's buffer stays untouched and alive until the copy is done.
//
// Set-up decides per direction: each rank with C10D_SHM_CMA on publishes in its segment header
// where a peer can read a random word of its memory; each rank reads that word in each peer
// (the probe), and says in the store which peers it can read (the fault point
// "shm:cma_probe:fail" makes the probe fail). A pair whose probe fails (Yama, seccomp, no such
// system call, C10D_SHM_CMA=0 on either side) uses the ring, with a debug log line saying why.
//
// A descriptor is a peer's word: it is checked (check_message_header: pid, non-empty span that
// does not wrap), its length must equal the receive's (else the receive fails as for any size
// mismatch), and no byte outside the span is read; a copy that fails (the span is not mapped
// there) fails the receive naming the peer, the span and the errno, and tells the sender.
//
// Unexpected single-copy messages wait as descriptors ("parked", holding no bytes) for kParkGrace
// for their receive; then they are copied into an unexpected buffer (bounded per peer) like a
// message of the ring, so that two ranks that each wait for their own send before receiving
// never deadlock.
//
// Taking a send back: a request dropped before its ack (a failing collective), or an abort,
// records in the ring's writer word (transport/shm_ring.h) that the descriptors below a sequence
// number are void before the buffer may go away; the receiver looks there before each chunk and
// after the last one, and fails the receive instead of delivering bytes of a freed buffer.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <random>

#include "backends/gloo_like/shm_transport_impl.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "core/fault_point.h"
#include "core/logging.h"
#include "core/parse.h"
#include "transport/cross_memory.h"

namespace c10d::inline v1::gloo_like {

namespace {

using namespace shm_detail;

// The most copied out of a sender per progress turn and peer: a waiter looks at its deadline
// and at other pairs between chunks. 1 MiB copies ran at full speed (smaller ones paid the
// system call and page pinning more often).
constexpr std::uint64_t kPullChunk = std::uint64_t{1} << 20;

std::string errno_text(int err) { return fmt::format("{} ({})", std::strerror(err), err); }

}  // namespace

// ---- Set-up ----

// Before this rank's segment is published: whether it takes part, and what peers probe.
void ShmTransport::Impl::setup_single_copy(const ShmTransportOptions& options,
                                           SegmentHeader& own_h) {
  cma_enabled = options.single_copy.value_or(core::env_flag("C10D_SHM_CMA").value_or(true));
  cma_min_bytes = options.single_copy_min_bytes != 0 ? options.single_copy_min_bytes
                                                     : kDefaultSingleCopyMinBytes;
  if (!cma_enabled) {
    C10D_LOG_DEBUG("{}: single-copy messages are off (C10D_SHM_CMA=0 or the option)", who);
    return;
  }
  if (const std::string note = transport::allow_same_user_readers(); !note.empty()) {
    C10D_LOG_DEBUG("{}: {}", who, note);
  }
  std::random_device rd;
  cma_probe_word = ((std::uint64_t{rd()} << 32) ^ rd()) | 1;  // never 0
  own_h.cma_probe_address = reinterpret_cast<std::uintptr_t>(&cma_probe_word);
  own_h.cma_probe_value = cma_probe_word;
}

// After `p`'s segment is mapped and checked: whether this rank can read `p`'s memory.
void ShmTransport::Impl::probe_single_copy(Peer& p) {
  if (!cma_enabled) return;
  const std::uint64_t address = p.header->cma_probe_address;
  if (address == 0) {
    C10D_LOG_DEBUG("{}: rank {} sends no single-copy messages (C10D_SHM_CMA=0 there)", who, p.rank);
    return;
  }
  std::uint64_t got = 0;
  int err = EPERM;  // what the fault point stands for: a kernel that refuses
  if (!core::fault_point("shm:cma_probe")) {
    err =
        transport::read_process_memory(p.pid, address, std::as_writable_bytes(std::span(&got, 1)));
  }
  if (err == 0 && got == p.header->cma_probe_value) {
    p.cma_in = true;
    return;
  }
  const std::string why = err != 0 ? fmt::format("process_vm_readv: {}", errno_text(err))
                                   : fmt::format("read {:#x} where its segment says {:#x}", got,
                                                 p.header->cma_probe_value);
  C10D_LOG_DEBUG("{}: rank {} (pid {}) sends through the ring, not single-copy: {}", who, p.rank,
                 p.pid, why);
}

// What this rank publishes: one character per rank, '1' for the peers it can read.
std::string ShmTransport::Impl::single_copy_sources() const {
  std::string s(static_cast<std::size_t>(world), '0');
  for (const Peer& p : peers) {
    if (p.cma_in) s[static_cast<std::size_t>(p.rank)] = '1';
  }
  return s;
}

// What `p` published (single_copy_sources); anything malformed counts as "cannot read".
void ShmTransport::Impl::learn_single_copy(Peer& p, std::string_view theirs) {
  p.cma_out = cma_enabled && theirs.size() == static_cast<std::size_t>(world) &&
              theirs[static_cast<std::size_t>(rank)] == '1';
  if (p.cma_out) {
    C10D_LOG_DEBUG("{}: messages of {} bytes and more to rank {} go single-copy", who,
                   cma_min_bytes, p.rank);
  }
}

// ---- The sender ----

// Under mu, at a message boundary: the descriptor of the send in front of `p`'s queue instead of
// its bytes. False when the ring has no room for it.
bool ShmTransport::Impl::write_single_copy_locked(Peer& p, ShmRing::Writer& w, Op& op) {
  if (w.room() < kMessageHeaderBytes) return false;
  MessageHeader h;
  h.tag = op.tag;
  h.bytes = op.bytes;
  h.sequence = p.next_sequence++;
  h.call = op.call;
  h.kind = kSingleCopy;
  h.pid = own_header->pid;
  h.address = reinterpret_cast<std::uintptr_t>(op.send_data);
  w.write(std::as_bytes(std::span(&h, 1)));
  op.single_copy = true;
  op.sequence = h.sequence;
  p.cma_sent.push_back(std::move(p.sends.front()));
  p.sends.pop_front();
  return true;
}

// Under mu, at a message boundary: the acknowledgements owed to `p`, while the ring has room.
bool ShmTransport::Impl::write_acks_locked(Peer& p, ShmRing::Writer& w) {
  bool moved = false;
  while (!p.acks.empty() && w.room() >= kMessageHeaderBytes) {
    const Ack& a = p.acks.front();
    MessageHeader h;
    h.tag = a.tag;
    h.sequence = p.next_sequence++;
    h.kind = kAck;
    h.acked = a.sequence;
    h.status = static_cast<std::uint16_t>(a.status);
    w.write(std::as_bytes(std::span(&h, 1)));
    p.acks.pop_front();
    moved = true;
  }
  return moved;
}

// Under mu: `p` acknowledged a single-copy send of this rank, which completes. False when it
// names none (the transport has failed).
bool ShmTransport::Impl::take_ack_locked(Peer& p, const MessageHeader& h) {
  const auto it = std::find_if(p.cma_sent.begin(), p.cma_sent.end(),
                               [&](const auto& op) { return op->sequence == h.acked; });
  if (it == p.cma_sent.end()) {
    abort_locked(C10D_ERROR(NetworkError,
                            "rank {}: corrupt message from rank {} in shared memory: an "
                            "acknowledgement of message {}, which awaits none",
                            rank, p.rank, h.acked));
    return false;
  }
  std::shared_ptr<Op> op = std::move(*it);
  p.cma_sent.erase(it);
  if (h.status == 0) {
    op->complete();
  } else {
    op->complete(C10D_ERROR(NetworkError,
                            "{}: rank {} could not copy the message out of this process "
                            "(single-copy, process_vm_readv: {})",
                            op->describe(), p.rank, errno_text(static_cast<int>(h.status))));
  }
  return true;
}

// Under mu: the descriptors to `p` below sequence number `below` are void (their requests went
// away, or the transport failed): `p` must not deliver what it copies of them from now on.
void ShmTransport::Impl::revoke_locked(Peer& p, std::uint64_t below) {
  auto& word = p.out.header().writer_word;
  if (word.load(std::memory_order_relaxed) < below) word.store(below, std::memory_order_seq_cst);
}

// ---- The receiver ----

// Under mu: a single-copy message from `p` arrived (its header checked). Its receive, if posted,
// takes it; else it waits parked. False when that broke the peer's limit.
bool ShmTransport::Impl::begin_single_copy_locked(Peer& p, const MessageHeader& h) {
  std::optional<std::shared_ptr<Op>> recv = matcher.match_claiming(
      p.rank, h.tag, [](const std::shared_ptr<Op>& lost) { lost->complete(); });
  if (!recv) {
    check_arrived_locked(p, h);
    if (!hold_locked(p, transport::kUnexpectedOverheadBytes)) return false;
    auto u = std::make_shared<Unexpected>(p.rank, h.bytes, h.call);
    u->copy = Unexpected::Copy::kParked;
    u->sequence = h.sequence;
    u->address = h.address;
    u->tag = h.tag;
    u->arrived = Clock::now();
    matcher.push_unexpected(p.rank, h.tag, u);
    p.parked.push_back(std::move(u));
    parked.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  std::shared_ptr<Op> op = std::move(*recv);
  op->source.store(p.rank, std::memory_order_relaxed);
  Pull pull{.tag = h.tag, .sequence = h.sequence, .address = h.address, .bytes = h.bytes};
  if (!refuse_locked(op, p.rank, h.call, h.bytes)) pull.op = std::move(op);  // else dropped
  p.pulls.push_back(std::move(pull));
  return true;
}

// Under mu: a receive takes `u`, a single-copy message not copied yet or being copied into its
// buffer (post_recv checked the sizes); the rest goes straight into the receive's buffer.
void ShmTransport::Impl::pull_into_locked(Peer& p, const std::shared_ptr<Unexpected>& u,
                                          std::shared_ptr<Op> op) {
  if (u->copy == Unexpected::Copy::kParked) {
    std::erase(p.parked, u);
    parked.fetch_sub(1, std::memory_order_relaxed);
    p.pulls.push_back(Pull{.tag = u->tag,
                           .sequence = u->sequence,
                           .address = u->address,
                           .bytes = u->data.size(),
                           .op = std::move(op)});
    return;
  }
  for (Pull& pull : p.pulls) {
    if (pull.unexpected != u) continue;
    u->data.copy_to({op->recv_data, static_cast<std::size_t>(pull.done)});
    pull.unexpected.reset();
    pull.op = std::move(op);
    return;
  }
}

// Under mu: a receive that `u` (not copied, or being copied) does not fit; the message is dropped
// and its sender answered.
void ShmTransport::Impl::drop_single_copy_locked(Peer& p, const Unexpected& u) {
  if (u.copy == Unexpected::Copy::kParked) {
    std::erase_if(p.parked, [&](const auto& x) { return x.get() == &u; });
    parked.fetch_sub(1, std::memory_order_relaxed);
    p.acks.push_back({u.sequence, u.tag, 0});
    return;
  }
  for (Pull& pull : p.pulls) {
    if (pull.unexpected.get() == &u) pull.unexpected.reset();  // dropped when its turn comes
  }
}

// Under mu: `pull` (the front of `p.pulls`) ends, copied (err 0) or failed with `err`.
void ShmTransport::Impl::finish_pull_locked(Peer& p, Pull& pull, int err) {
  const bool revoked = p.in.header().writer_word.load(std::memory_order_seq_cst) > pull.sequence;
  std::exception_ptr error;
  if (revoked) {
    error = C10D_ERROR(NetworkError,
                       "rank {}: rank {} took its single-copy message back (its request went "
                       "away or its transport failed) before this rank had copied it ({}, {} "
                       "bytes)",
                       rank, p.rank, transport::tag_string(pull.tag), pull.bytes);
  } else if (err != 0) {
    error = C10D_ERROR(NetworkError,
                       "rank {}: cannot copy the single-copy message of {} bytes ({}) out of rank "
                       "{} (pid {}) at {:#x}, {} bytes in: process_vm_readv: {}",
                       rank, pull.bytes, transport::tag_string(pull.tag), p.rank, p.pid,
                       pull.address, pull.done, errno_text(err));
  }
  if (pull.op) {
    pull.op->complete(error);
  } else if (pull.unexpected) {
    Unexpected& u = *pull.unexpected;
    u.copy = Unexpected::Copy::kNone;
    u.got = pull.done;
    if (error) {  // the receive that takes it fails so; its bytes go now
      u.error = error;
      matcher.release(p.rank, u.data.allocated());
      u.data.release();
    }
  }
  p.acks.push_back({pull.sequence, pull.tag, revoked ? 0 : static_cast<std::uint32_t>(err)});
}

// Under mu: copies up to kPullChunk of `p`'s single-copy messages, oldest first, and starts
// copying parked ones whose grace is over into their buffers. True when bytes moved.
bool ShmTransport::Impl::pull_locked(Peer& p) {
  bool moved = false;
  if (!p.parked.empty()) {
    const auto now = Clock::now();
    while (!p.parked.empty() && now - p.parked.front()->arrived >= kParkGrace) {
      std::shared_ptr<Unexpected> u = std::move(p.parked.front());
      p.parked.pop_front();
      parked.fetch_sub(1, std::memory_order_relaxed);
      u->copy = Unexpected::Copy::kPulling;
      p.pulls.push_back(Pull{.tag = u->tag,
                             .sequence = u->sequence,
                             .address = u->address,
                             .bytes = u->data.size(),
                             .unexpected = u});
    }
  }
  std::uint64_t budget = kPullChunk;
  while (!p.pulls.empty() && budget > 0) {
    Pull& pull = p.pulls.front();
    moved = true;
    if (!pull.op && !pull.unexpected) {  // dropped: the sender need only hear that it is done
      p.acks.push_back({pull.sequence, pull.tag, 0});
      p.pulls.pop_front();
      continue;
    }
    int err = 0;
    if (p.in.header().writer_word.load(std::memory_order_seq_cst) <= pull.sequence) {
      std::uint64_t n = std::min(budget, pull.bytes - pull.done);
      std::byte* into = nullptr;
      if (pull.op) {
        into = pull.op->recv_data + pull.done;
      } else {
        Unexpected& u = *pull.unexpected;
        if (!hold_locked(p, u.data.allocation_at(pull.done))) return true;
        const auto room = u.data.span_at(pull.done);
        n = std::min<std::uint64_t>(n, room.size());
        into = room.data();
      }
      err = transport::read_process_memory(p.pid, pull.address + pull.done,
                                           {into, static_cast<std::size_t>(n)});
      if (err == 0) {
        pull.done += n;
        budget -= n;
        if (pull.done < pull.bytes) continue;
      }
    }
    finish_pull_locked(p, pull, err);
    p.pulls.pop_front();
  }
  return moved;
}

// ---- Closing ----

// Before this rank closes: the acknowledgements it owes (it copied those messages, or is copying
// them, or dropped them; their senders wait for word) go out while the peers make room in its
// rings, until `deadline`. A peer that is gone or closed reads none: none are owed to it.
void ShmTransport::Impl::flush_acks(Clock::time_point deadline) {
  const auto owed = [&] {
    std::lock_guard lock(mu);
    return !failure && std::any_of(peers.begin(), peers.end(), [](const Peer& p) {
      return (!p.acks.empty() || !p.pulls.empty()) &&
             p.header->closed.load(std::memory_order_acquire) == 0;
    });
  };
  const std::function<bool()> flushed = [&] { return !owed(); };
  if (!owed() || poll_until(flushed, deadline)) return;
  C10D_LOG_WARN(
      "{}: closing with acknowledgements owed that no peer made room for in {} ms: the "
      "single-copy sends they answer will fail",
      who, std::chrono::duration_cast<std::chrono::milliseconds>(kCloseFlush).count());
}

// Under mu: sends to peers that closed their transport end. A single-copy one that no ack in the
// ring answers (the peer closed before it copied it, or could not write the ack in time) fails
// naming the peer, as does one still queued (the peer reads its ring no more). True when one did.
bool ShmTransport::Impl::end_sends_to_closed_locked() {
  bool ended = false;
  for (Peer& p : peers) {
    if (p.cma_sent.empty() && p.sends.empty()) continue;
    if (p.header->closed.load(std::memory_order_acquire) == 0) continue;
    read_locked(p);  // the acks it wrote before it closed
    if (failure) return true;
    const auto fail = [&](Op& op, std::string_view what) {
      op.complete(C10D_ERROR(NetworkError, "{}: rank {} closed its shared-memory transport {}",
                             op.describe(), p.rank, what));
    };
    for (auto& op : p.cma_sent) fail(*op, "without acknowledging this single-copy message");
    for (auto& op : p.sends) fail(*op, "before it read this message");
    ended |= !p.cma_sent.empty() || !p.sends.empty();
    p.cma_sent.clear();
    p.sends.clear();
    p.send_pos = 0;
  }
  if (ended) ring_doorbell(own_header);  // another thread of this rank may sleep on one
  return ended;
}

// The same, when `peer_rank` closed (a send's test that found it not done).
void ShmTransport::Impl::end_sends_if_closed(int peer_rank) {
  if (peer(peer_rank).header->closed.load(std::memory_order_acquire) == 0) return;
  std::lock_guard lock(mu);
  end_sends_to_closed_locked();
}

// Under mu: whether single-copy traffic of this rank waits for anyone.
bool ShmTransport::Impl::single_copy_pending_locked() const {
  return std::any_of(peers.begin(), peers.end(), [](const Peer& p) {
    return !p.cma_sent.empty() || !p.pulls.empty() || !p.parked.empty() || !p.acks.empty();
  });
}

}  // namespace c10d::inline v1::gloo_like
