// Matcher: the matching of transport.h, written once for every transport (TCP, shared memory,
// the ICI fabric, in-process): which posted receive takes an arriving message, which waiting
// message a new receive takes, and what the waiting messages of one peer may hold.
//
// Words: a *receive* is posted for (peer, tag), or for (kAnySource, tag): an *any-source*
// receive. A *message* from peer P with tag T *arrives* when the transport has read its header;
// one that no posted receive takes is *unexpected* and waits in P's queue until a receive takes
// it. The transport decides what a Recv and a Message are (an op, a buffer being filled, a
// queued send); the matcher only orders them.
//
// Rules (MPI's, including its non-overtaking rule):
//  - A message from P with tag T is taken by the earliest posted receive that accepts it: a
//    receive from P with tag T, or an any-source receive with tag T, whichever was posted first.
//    So messages of one (peer, tag) are taken in the order they were sent, whoever receives.
//  - A receive from P with tag T takes P's oldest unexpected message with tag T.
//  - An any-source receive with tag T takes, of every peer's oldest unexpected message with tag
//    T, the one that arrived first. Arrival is stamped from the matcher's own counter when the
//    message is queued, so stamps never tie. Matchers whose stamps are compared with each other
//    (routed_transport.h: a rank's shared-memory and TCP channels) share an ArrivalClock instead.
//  - What it does not do: sizes and calls (a transport checks the buffer and the call against
//    the message it matched, transport.h: Calls), deadlines, errors.
//
// Calls of ops (transport.h: Calls): a message of another call may never meet a receive (its
// receiver waits for other peers, or other lanes, of its own op), so the matcher keeps notes of
// recent ops' calls (call_notes.h). A receive posted under an op for which a message of another
// call already waits, or a message that arrives under an op this rank posted receives of with
// another call, is a conflict: the transport fails the receive, or the op's queued receives
// (call_refusal, check_arrived_call). So is a receive that takes a message of another call: the
// op's other receives fail with it (refused), since a rank waiting for the op's other peers
// would otherwise wait for messages the other call never sends. Sends are not refused: the receiver
// meets their message and fails itself.
//
// Cost: per peer a null pointer until the peer is first received from or sends here, then one
// queue of posted receives and one of unexpected messages; and one queue of any-source receives.
// Queues are searched from the front for the tag (they are short: a collective posts a receive or
// two per peer at a time; MPI implementations such as Open MPI's ob1 keep the same per-peer
// lists). An arriving message searches its peer's posted receives, and the any-source ones only
// while there are any. A receive from a peer searches that peer's unexpected messages; an
// any-source receive searches every peer's, up to each one's oldest with the tag. Nothing is
// allocated per message but what std::deque allocates now and then for its blocks.
//
// The bound on unexpected messages (transport/unexpected_buffer.h): hold(peer, bytes, who) counts
// bytes against the peer's limit and refuses past it with the error (unexpected_limit_error);
// the transport fails with it, since only it knows how to fail.
//
// SourceClaim: an any-source receive that a composite transport (routed_transport.h) posts on
// two transports at once is two receives, *parts*, sharing one claim: the first of them to
// complete it (with a message or with an error) takes the claim, and the other, when its turn
// comes, finds the claim taken and completes without a message (its request's source() is -1).
// A part checks the claim before it takes a message; so no message is ever taken by the loser.
// A part whose transport has no peer left that could send (TCP) does not fail the receive: it
// gives up (give_up, with the error it would have failed with) and leaves the decision to the
// composite, whose other channel may still deliver.
//
// Thread-safety: none; the transport's lock guards its matcher. SourceClaim is thread-safe.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "core/check.h"
#include "transport/call_notes.h"
#include "transport/transport.h"
#include "transport/unexpected_buffer.h"

namespace c10d::inline v1::transport {

// Arrival stamps shared by the matchers of several transports, so that their stamps order the
// messages of all of them (routed_transport.h): increasing, never repeated. Thread-safe.
class ArrivalClock {
 public:
  std::uint64_t next() {
    // Relaxed: a stamp orders messages that one lock (a transport's) already orders, or that no
    // one can order better (two transports' threads, the routed transport's comparison).
    return next_.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<std::uint64_t> next_{0};
};

class SourceClaim {
 public:
  // Whether `part` (a receive's own address) completes the any-source receive: true for the
  // first part to ask, and for it again after; false for every other part.
  bool take(const void* part) {
    const void* none = nullptr;
    return owner_.compare_exchange_strong(none, part, std::memory_order_acq_rel) || none == part;
  }
  // Whether a part other than `part` took the claim.
  bool taken_by_other(const void* part) const {
    const void* owner = owner_.load(std::memory_order_acquire);
    return owner != nullptr && owner != part;
  }
  bool taken() const { return owner_.load(std::memory_order_acquire) != nullptr; }

  // A part's transport can deliver nothing more to it; `why` is the error it would fail with.
  // The first reason sticks.
  void give_up(std::exception_ptr why) {
    std::lock_guard lock(mu_);
    if (!gave_up_) gave_up_ = std::move(why);
  }
  std::exception_ptr given_up() const {
    std::lock_guard lock(mu_);
    return gave_up_;
  }

  // Called by a part after it completed, with or without the claim, from the completing thread,
  // maybe under a transport's lock: it must not block or call into a transport. Set before the
  // parts are posted.
  std::function<void()> on_complete;
  void completed() const {
    if (on_complete) on_complete();
  }

 private:
  std::atomic<const void*> owner_{nullptr};
  mutable std::mutex mu_;
  std::exception_ptr gave_up_;  // GUARDED_BY(mu_)
};

template <typename Recv, typename Message>
class Matcher {
 public:
  // Where an unexpected message waits: its peer and its place in the peer's queue. Valid until
  // the matcher changes.
  struct Found {
    int peer = -1;
    std::size_t index = 0;
  };

  Matcher() = default;
  // `arrivals`: where the arrival stamps come from when they are compared with another
  // matcher's (ArrivalClock); null: a counter of this matcher's own.
  Matcher(int peers, std::uint64_t max_unexpected_bytes,
          std::shared_ptr<ArrivalClock> arrivals = nullptr)
      : peers_(static_cast<std::size_t>(peers)),
        max_unexpected_(max_unexpected_bytes),
        arrivals_(std::move(arrivals)) {}
  Matcher(Matcher&&) = default;
  Matcher& operator=(Matcher&&) = default;

  int peers() const { return static_cast<int>(peers_.size()); }

  // ---- A receive is posted ----

  // The unexpected message a receive from `peer` (kAnySource: any) with `tag` takes, left in
  // place; nullopt when there is none.
  std::optional<Found> find_unexpected(int peer, Tag tag) const {
    if (peer != kAnySource) {
      const PeerQueues* pq = find_queues(peer);
      if (pq == nullptr) return std::nullopt;
      const auto& q = pq->unexpected;
      for (std::size_t i = 0; i < q.size(); ++i) {
        if (q[i].tag == tag) return Found{peer, i};
      }
      return std::nullopt;
    }
    std::optional<Found> best;
    std::uint64_t best_arrival = 0;
    for (std::size_t p = 0; p < peers_.size(); ++p) {
      if (!peers_[p]) continue;
      const auto& q = peers_[p]->unexpected;
      for (std::size_t i = 0; i < q.size(); ++i) {
        if (q[i].tag != tag) continue;
        if (!best || q[i].arrival < best_arrival) {
          best = Found{static_cast<int>(p), i};
          best_arrival = q[i].arrival;
        }
        break;  // only a peer's oldest with the tag may be taken
      }
    }
    return best;
  }
  // The arrival stamp of the message `found` names.
  std::uint64_t arrival(const Found& found) const {
    return find_queues(found.peer)->unexpected[found.index].arrival;
  }
  // Takes the message `found` names out of its queue.
  Message take(const Found& found) {
    auto& q = queues(found.peer).unexpected;
    Message m = std::move(q[found.index].message);
    q.erase(q.begin() + static_cast<std::ptrdiff_t>(found.index));
    return m;
  }
  // Queues a receive from `peer` (kAnySource: any) with `tag`, after every receive posted before.
  void post(int peer, Tag tag, Recv recv) {
    auto& q = peer == kAnySource ? any_ : queues(peer).posted;
    q.push_back({tag, next_order_++, std::move(recv)});
    ++receives_;
  }
  // find_unexpected, and take what it found; else post. The message taken, and its peer.
  std::optional<std::pair<int, Message>> post_or_take(int peer, Tag tag, Recv recv) {
    if (const auto found = find_unexpected(peer, tag)) {
      return std::pair<int, Message>{found->peer, take(*found)};
    }
    post(peer, tag, std::move(recv));
    return std::nullopt;
  }

  // ---- A message arrives ----

  // The earliest posted receive that takes a message from `peer` with `tag`, out of its queue;
  // nullopt when none does (the transport then keeps the message: push_unexpected).
  std::optional<Recv> match(int peer, Tag tag) {
    PeerQueues* pq = find_queues(peer);
    std::deque<Posted>* q = pq != nullptr ? &pq->posted : nullptr;
    typename std::deque<Posted>::iterator it;
    const bool specific = q != nullptr && (it = find_tag(*q, tag)) != q->end();
    if (!any_.empty()) {
      auto a = find_tag(any_, tag);
      if (a != any_.end() && (!specific || a->order < it->order)) return take_posted(any_, a);
    }
    if (!specific) return std::nullopt;
    return take_posted(*q, it);
  }
  // match() where receives may be parts of an any-source receive (SourceClaim; Recv points to an
  // op whose `claim` is null for any other receive): a part takes the message only once it holds
  // the claim. A part whose claim another part took leaves instead, completed without a message
  // by lost(recv), and the next receive is tried.
  template <typename Lost>
  std::optional<Recv> match_claiming(int peer, Tag tag, Lost&& lost) {
    for (;;) {
      std::optional<Recv> recv = match(peer, tag);
      if (!recv || !(*recv)->claim || (*recv)->claim->take(std::to_address(*recv))) return recv;
      lost(*recv);
    }
  }
  // Queues a message from `peer` that no receive took, after the others from it.
  void push_unexpected(int peer, Tag tag, Message message) {
    const std::uint64_t stamp = arrivals_ ? arrivals_->next() : next_arrival_++;
    queues(peer).unexpected.push_back({tag, stamp, std::move(message)});
  }

  // ---- Leaving early ----

  // A queued receive leaves (its request went away); `peer` as it was posted. False when it is
  // not queued.
  bool cancel(int peer, const Recv& recv) {
    std::deque<Posted>* posted = posted_queue(peer);
    if (posted == nullptr) return false;
    auto& q = *posted;
    auto it = std::find_if(q.begin(), q.end(), [&](const Posted& p) { return p.recv == recv; });
    if (it == q.end()) return false;
    take_posted(q, it);
    return true;
  }
  // An unexpected message leaves its queue unreceived; false when it is not queued.
  bool erase_unexpected(int peer, const Message& message) {
    PeerQueues* pq = find_queues(peer);
    if (pq == nullptr) return false;
    auto& q = pq->unexpected;
    auto it = std::find_if(q.begin(), q.end(), [&](const Held& h) { return h.message == message; });
    if (it == q.end()) return false;
    q.erase(it);
    return true;
  }
  // Every queued receive from `peer` (kAnySource: the any-source ones) leaves; fn(recv) for
  // each, in posting order.
  template <typename Fn>
  void take_receives(int peer, Fn&& fn) {
    std::deque<Posted>* q = posted_queue(peer);
    if (q == nullptr || q->empty()) return;
    std::deque<Posted> taken;
    taken.swap(*q);
    receives_ -= taken.size();
    for (auto& p : taken) fn(p.recv);
  }
  // Every queued receive leaves; fn(recv) for each.
  template <typename Fn>
  void take_all_receives(Fn&& fn) {
    take_receives(kAnySource, fn);
    for (int p = 0; p < peers(); ++p) take_receives(p, fn);
  }
  // The queued receives for which pred(recv) holds leave (pred may complete them).
  template <typename Pred>
  void erase_receives_if(Pred&& pred) {
    erase_posted_if([&](Posted& p) { return pred(p.recv); });
  }
  // The unexpected messages of `peer` for which pred(message) holds leave.
  template <typename Pred>
  void erase_unexpected_if(int peer, Pred&& pred) {
    if (PeerQueues* pq = find_queues(peer)) {
      std::erase_if(pq->unexpected, [&](Held& h) { return pred(h.message); });
    }
  }
  // The unexpected messages of every peer for which pred(peer, message) holds leave.
  template <typename Pred>
  void erase_all_unexpected_if(Pred&& pred) {
    for (int p = 0; p < peers(); ++p) {
      erase_unexpected_if(p, [&](Message& m) { return pred(p, m); });
    }
  }

  // ---- What is queued ----

  std::size_t receives() const { return receives_; }  // queued, any-source ones included
  bool any_source_posted() const { return !any_.empty(); }

  // ---- Calls of ops (see the top) ----

  // For a receive `op` (what Recv points to: `tag`, `call`, describe()) of rank `self` that found
  // no message waiting, CallNotes::posted: the CallMismatch to fail it with, or null.
  template <typename Op>
  std::exception_ptr call_refusal(int self, const Op& op) {
    const auto c = calls_.posted(op.tag, op.call);
    return c ? call_mismatch(op.describe(), self, c->peer, op.tag, op.call, c->call) : nullptr;
  }
  // CallNotes::arrived for a message about to wait unexpected; on a conflict the queued
  // receives of its op (any peer, any lane) of another call leave, each failed by
  // fail(recv, error).
  template <typename Fail>
  void check_arrived_call(int self, int peer, Tag tag, Call call, Fail&& fail) {
    if (calls_.arrived(peer, tag, call)) fail_op_receives(self, peer, tag, call, fail);
  }
  // A receive `recv` of rank `self`, posted for `buffer` bytes, took a message of `theirs` and
  // `bytes` from `peer` (on arrival, or waiting unexpected). When it cannot take it
  // (receive_refusal: another call, or another size) it fails, by fail(recv, error), and this
  // returns true; when the calls differ the op is lost on this rank too, so its other queued
  // receives of another call leave, each failed by fail(recv, error), and its later ones
  // conflict (CallNotes::lost). One call for both, so that no transport forgets the op's part.
  template <typename Fail>
  bool refuse(const Recv& recv, int self, int peer, Call theirs, std::uint64_t buffer,
              std::uint64_t bytes, Fail&& fail) {
    const Tag tag = recv->tag;
    const Call mine = recv->call;
    // The common case first: describe() formats a string, once per message otherwise.
    if (receive_fits(mine, theirs, buffer, bytes)) return false;
    auto error = receive_refusal(recv->describe(), self, peer, tag, mine, theirs, buffer, bytes);
    if (!error) return false;
    fail(recv, std::move(error));
    refused(self, peer, tag, mine, theirs, fail);
    return true;
  }
  // The op's part of that alone, for a transport that fails the receive itself (the in-process
  // one fails the send too): when the calls differ, the op's other queued receives of another
  // call leave, each failed by fail(recv, error), and its later ones conflict.
  template <typename Fail>
  void refused(int self, int peer, Tag tag, Call mine, Call theirs, Fail&& fail) {
    if (calls_agree(mine, theirs)) return;
    calls_.lost(peer, tag, theirs);
    fail_op_receives(self, peer, tag, theirs, fail);
  }

  // ---- The bound on unexpected messages ----

  // Counts `bytes` more for `peer`'s unexpected messages: null. When that would pass the limit it
  // counts nothing and returns the error the transport fails with, opening with `who` ("rank 3",
  // unexpected_limit_error) and naming the peer, the bytes and the limit.
  std::exception_ptr hold(int peer, std::uint64_t bytes, std::string_view who) {
    std::uint64_t& h = queues(peer).held;
    if (bytes > max_unexpected_ - h) {
      return unexpected_limit_error(who, peer, h + bytes, max_unexpected_);
    }
    h += bytes;
    return nullptr;
  }
  void release(int peer, std::uint64_t bytes) {
    PeerQueues* pq = find_queues(peer);
    const std::uint64_t h = pq != nullptr ? pq->held : 0;
    C10D_CHECK(bytes <= h, "Matcher: releasing {} bytes of peer {} that holds {}", bytes, peer, h);
    if (pq != nullptr) pq->held -= bytes;
  }
  std::uint64_t held(int peer) const {
    const PeerQueues* pq = find_queues(peer);
    return pq != nullptr ? pq->held : 0;
  }
  // The clock shared with other matchers; null when this one stamps from its own counter.
  const std::shared_ptr<ArrivalClock>& arrivals() const { return arrivals_; }

 private:
  struct Posted {
    Tag tag;
    std::uint64_t order;  // posting order, across every queue
    Recv recv;
  };
  struct Held {
    Tag tag;
    std::uint64_t arrival;  // stamped when queued (push_unexpected)
    Message message;
  };
  struct PeerQueues {
    std::deque<Posted> posted;
    std::deque<Held> unexpected;
    std::uint64_t held = 0;  // counted by hold()
  };

  // `peer`'s queues, made when first needed: a peer that never sends here, or is never received
  // from, costs a null pointer (a threads-as-ranks world of n ranks has n^2 of them; two empty
  // std::deque take about 1 KiB in libstdc++).
  PeerQueues& queues(int peer) {
    auto& pq = peers_[checked(peer)];
    if (!pq) pq = std::make_unique<PeerQueues>();
    return *pq;
  }
  // Null when `peer` has no queues yet (nothing was ever queued for it).
  PeerQueues* find_queues(int peer) { return peers_[checked(peer)].get(); }
  const PeerQueues* find_queues(int peer) const { return peers_[checked(peer)].get(); }
  // The posted receives of `peer` (kAnySource: the any-source ones); null when none were ever.
  std::deque<Posted>* posted_queue(int peer) {
    if (peer == kAnySource) return &any_;
    PeerQueues* pq = find_queues(peer);
    return pq != nullptr ? &pq->posted : nullptr;
  }
  std::size_t checked(int peer) const {
    C10D_CHECK(peer >= 0 && peer < peers(), "Matcher: peer {} outside {} peers", peer, peers());
    return static_cast<std::size_t>(peer);
  }
  static typename std::deque<Posted>::iterator find_tag(std::deque<Posted>& q, Tag tag) {
    return std::find_if(q.begin(), q.end(), [&](const Posted& p) { return p.tag == tag; });
  }
  // The queued receives of `tag`'s op (any peer, any lane) that expect another call than
  // `call`, which `peer` sent, leave, each failed by fail(recv, error).
  template <typename Fail>
  void fail_op_receives(int self, int peer, Tag tag, Call call, Fail& fail) {
    const Tag op = lane_op_tag(tag);
    erase_posted_if([&](Posted& p) {
      if (lane_op_tag(p.tag) != op || calls_agree(p.recv->call, call)) return false;
      fail(p.recv, call_mismatch(p.recv->describe(), self, peer, tag, p.recv->call, call));
      return true;
    });
  }
  // Every queued receive for which pred(posted) holds leaves.
  template <typename Pred>
  void erase_posted_if(Pred&& pred) {
    receives_ -= std::erase_if(any_, pred);
    for (auto& pq : peers_) {
      if (pq) receives_ -= std::erase_if(pq->posted, pred);
    }
  }
  Recv take_posted(std::deque<Posted>& q, typename std::deque<Posted>::iterator it) {
    Recv r = std::move(it->recv);
    q.erase(it);
    --receives_;
    return r;
  }

  std::vector<std::unique_ptr<PeerQueues>> peers_;  // by peer; null until first needed
  std::deque<Posted> any_;                          // any-source receives, in posting order
  std::uint64_t next_order_ = 0;
  std::size_t receives_ = 0;
  std::uint64_t max_unexpected_ = kDefaultMaxUnexpectedBytes;
  std::shared_ptr<ArrivalClock> arrivals_;  // shared stamps; null: next_arrival_
  std::uint64_t next_arrival_ = 0;

  CallNotes calls_;  // of recent ops (see the top)
};

}  // namespace c10d::inline v1::transport
