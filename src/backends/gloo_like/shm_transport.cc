// ShmTransport (shm_transport.h) over the layout of shm_layout.h: the public class, its
// requests, and posting: a send joins its peer's queue and is written at once if the ring has
// room; a receive takes a message that arrived unexpected, or waits in the matcher for one.
// Dropping a request before it completes cancels it; abort fails every pending and later one.
// The other parts are listed in shm_transport_impl.h.
#include "backends/gloo_like/shm_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <mutex>

#include "backends/gloo_like/shm_transport_impl.h"
#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::inline v1::gloo_like {

namespace {

using namespace shm_detail;
using Pull = shm_detail::Pull;

class ShmRequest final : public transport::Request {
 public:
  ShmRequest(std::shared_ptr<ShmTransport::Impl> impl, std::shared_ptr<Op> op)
      : impl_(std::move(impl)), op_(std::move(op)) {}
  ~ShmRequest() override { impl_->cancel(op_); }
  bool test() override {
    if (!op_->done.load(std::memory_order_acquire)) impl_->progress();
    if (!op_->done.load(std::memory_order_acquire)) {
      // A tester that never sleeps in a wait (the p2p completer) learns of a closed peer here.
      if (op_->is_send) impl_->end_sends_if_closed(op_->peer);
      if (!op_->done.load(std::memory_order_acquire)) return false;
    }
    if (op_->error) std::rethrow_exception(op_->error);
    return true;
  }
  void wait(Clock::time_point deadline) override { impl_->wait(*op_, deadline); }
  int source() const override { return op_->source.load(std::memory_order_acquire); }
  transport::PeerActivity heard() const override {
    return op_->any_source() ? transport::PeerActivity{} : impl_->heard_from(op_->peer);
  }

 private:
  std::shared_ptr<ShmTransport::Impl> impl_;
  std::shared_ptr<Op> op_;
};

}  // namespace

// ---- Posting ----

// Under mu: false, with the request failed, once the transport has failed.
bool ShmTransport::Impl::admit_locked(Op& op) {
  if (failure) op.complete(failure);
  return !failure;
}

std::shared_ptr<Op> ShmTransport::Impl::post_send(int peer_rank, Tag tag,
                                                  std::span<const std::byte> data,
                                                  transport::Call call) {
  auto op = make_op(true, peer_rank, tag, call, data.size());
  op->send_data = data.data();
  std::lock_guard lock(mu);
  if (!admit_locked(*op)) return op;
  announce_locked(*op);
  Peer& p = peer(peer_rank);
  p.sends.push_back(op);
  write_locked(p);
  return op;
}

// A receive from `peer_rank` (kAnySource: any same-host rank); `claim`: see Op::claim.
std::shared_ptr<Op> ShmTransport::Impl::post_recv(int peer_rank, Tag tag, std::span<std::byte> data,
                                                  transport::Call call,
                                                  std::shared_ptr<transport::SourceClaim> claim) {
  auto op = make_op(false, peer_rank, tag, call, data.size());
  op->recv_data = data.data();
  op->claim = std::move(claim);
  std::lock_guard lock(mu);
  if (!admit_locked(*op)) return op;
  announce_locked(*op);
  if (op->any_source() && peers.empty()) {
    op->complete(C10D_ERROR(NetworkError, "{}: this rank has no same-host peer that could send it",
                            op->describe()));
    return op;
  }
  if (op->claim && op->claim->taken_by_other(op.get())) {
    op->complete();  // the receive completed on the other transport
    return op;
  }
  const auto found = matcher.find_unexpected(peer_rank, tag);
  if (!found) {
    if (auto refused = matcher.call_refusal(rank, *op)) {
      op->complete(std::move(refused));
      return op;
    }
    matcher.post(peer_rank, tag, op);
    if (op->any_source()) {
      for (Peer& p : peers) read_locked(p);
    } else {
      read_locked(peer(peer_rank));
    }
    return op;
  }
  if (op->claim && !op->claim->take(op.get())) {
    op->complete();  // the other part took the claim just now; the message stays
    return op;
  }
  Peer& p = peer(found->peer);
  std::shared_ptr<Unexpected> u = matcher.take(*found);
  matcher.release(p.rank, u->held());
  op->source.store(p.rank, std::memory_order_relaxed);
  if (u->error) {  // its single-copy message could not be copied
    op->complete(u->error);
    return op;
  }
  const bool arriving = p.reading_unexpected == u;
  const bool single_copy = u->copy != Unexpected::Copy::kNone;  // not all copied yet
  if (refuse_locked(op, p.rank, u->call, u->data.size())) {
    if (arriving) p.reading_unexpected.reset();  // the rest is dropped as it comes
    if (single_copy) drop_single_copy_locked(p, *u);
    return op;
  }
  if (single_copy) {  // the rest straight from the sender into the receive's buffer
    pull_into_locked(p, u, op);
    pull_locked(p);
    write_locked(p);
    return op;
  }
  u->data.copy_to({op->recv_data, static_cast<std::size_t>(u->got)});
  if (arriving) {  // the rest goes straight into the receive's buffer
    p.reading_unexpected.reset();
    p.reading_op = op;
    read_locked(p);
  } else {
    op->complete();
  }
  return op;
}

std::shared_ptr<Op> ShmTransport::Impl::make_op(bool is_send, int peer_rank, Tag tag,
                                                transport::Call call, std::size_t bytes) const {
  C10D_CHECK((!is_send && peer_rank == transport::kAnySource) ||
                 (peer_rank >= 0 && peer_rank < world &&
                  peer_index[static_cast<std::size_t>(peer_rank)] >= 0),
             "rank {}: rank {} is not a same-host peer of this shared-memory transport", rank,
             peer_rank);
  auto op = std::make_shared<Op>();
  op->is_send = is_send;
  op->self = rank;
  op->peer = peer_rank;
  op->tag = tag;
  op->call = call;
  op->bytes = bytes;
  return op;
}

// Under mu: `op` of a collective is posted; the first of its op (tag, without lane: a rooted
// op's entry check counts) says so in this rank's segment, for the peers' shared-slot rounds
// (shm_layout.h: SegmentHeader::posted_tag). The tag is kWritingTag while the call changes, so
// that a reader never pairs one op's tag with another's call.
void ShmTransport::Impl::announce_locked(const Op& op) {
  const Tag op_tag = transport::lane_op_tag(op.tag);
  if (op.call == transport::kUnchecked || op_tag == posted_tag || own_header == nullptr) return;
  posted_tag = op_tag;
  // A seqlock's write (shm_slots.cc reads): plain stores on x86, the fence orders them.
  own_header->posted_tag.store(kWritingTag, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  own_header->posted_call.store(op.call, std::memory_order_relaxed);
  own_header->posted_tag.store(op_tag, std::memory_order_release);
}

// A request dropped before it completed: its buffer may go away. A send partly in the ring
// goes on with unwritten bytes (the stream must stay framed); a receive being read drops the
// rest of its message.
void ShmTransport::Impl::cancel(const std::shared_ptr<Op>& op) {
  if (op->done.load(std::memory_order_acquire)) return;
  std::lock_guard lock(mu);
  if (op->done.load(std::memory_order_relaxed)) return;
  if (op->is_send) {
    Peer& p = peer(op->peer);
    if (op->single_copy) {  // the peer may be copying it: void it before the buffer goes
      revoke_locked(p, op->sequence + 1);
      return;
    }
    if (!p.sends.empty() && p.sends.front() == op && p.send_pos > 0) {
      op->send_data = nullptr;
      return;
    }
    std::erase(p.sends, op);
    return;
  }
  // Matched and not done: its message is being read into it.
  if (const int from = op->source.load(std::memory_order_relaxed); from >= 0) {
    Peer& p = peer(from);
    if (p.reading_op == op) p.reading_op.reset();
    for (Pull& pull : p.pulls) {
      if (pull.op == op) pull.op.reset();  // the rest is dropped
    }
    return;
  }
  matcher.cancel(op->peer, op);
}

// ---- Failure ----

void ShmTransport::Impl::abort_locked(std::exception_ptr reason) {
  if (failure) return;
  failure = std::move(reason);
  failed.store(true, std::memory_order_release);
  matcher.take_all_receives([&](const std::shared_ptr<Op>& op) { op->complete(failure); });
  for (Peer& p : peers) {
    for (auto& op : p.sends) op->complete(failure);
    if (p.reading_op) p.reading_op->complete(failure);
    p.sends.clear();
    p.reading_op.reset();
    // Single-copy sends fail now and their buffers may go: void their descriptors first.
    if (!p.cma_sent.empty()) revoke_locked(p, p.next_sequence);
    for (auto& op : p.cma_sent) op->complete(failure);
    for (Pull& pull : p.pulls) {
      if (pull.op) pull.op->complete(failure);
    }
    p.cma_sent.clear();
    p.pulls.clear();
    p.parked.clear();
    p.acks.clear();
  }
  parked.store(0, std::memory_order_relaxed);
  if (own_header != nullptr) ring_doorbell(own_header);
}

ShmTransport::~ShmTransport() { close(); }

void ShmTransport::close() {
  if (impl_->closing.exchange(true)) return;
  // Closed in order: the peers' liveness looks (lost_peer) take this process's end for a finish,
  // and a peer's any-source receive that waits for the last sender looks again (peers_open).
  if (impl_->own_header != nullptr) {
    impl_->flush_acks(transport::Clock::now() + shm_detail::kCloseFlush);
    impl_->own_header->closed.store(1, std::memory_order_release);
    for (shm_detail::Peer& p : impl_->peers) shm_detail::ring_doorbell(p.header);
  }
  abort(C10D_ERROR(NetworkError, "rank {}: the shared-memory transport was closed", rank_));
}

bool ShmTransport::serves(int peer) const {
  return peer >= 0 && peer < world_size_ && impl_->peer_index[static_cast<std::size_t>(peer)] >= 0;
}

int ShmTransport::same_host_peers() const { return static_cast<int>(impl_->peers.size()); }

std::vector<int> ShmTransport::host_of_rank() const { return impl_->host_of_rank; }
bool ShmTransport::single_copy_to(int peer) const {
  return serves(peer) && impl_->peer(peer).cma_out;  // set at set-up, read-only after
}

bool ShmTransport::has_pending() const {
  // Polled in a TCP waiter's loop (routed_transport.cc): a held mutex means someone moves bytes
  // now, so count it as pending rather than wait for it, as progress() does with try_lock.
  // A shared-slot round waits on the peers too (the TCP side's failure watch looks while
  // anything waits).
  if (impl_->slots && impl_->slots->busy.load(std::memory_order_relaxed)) return true;
  std::unique_lock lock(impl_->mu, std::try_to_lock);
  if (!lock.owns_lock()) return true;
  return impl_->matcher.receives() > 0 || impl_->single_copy_pending_locked() ||
         std::any_of(impl_->peers.begin(), impl_->peers.end(),
                     [](const Peer& p) { return !p.sends.empty() || p.reading_op != nullptr; });
}

bool ShmTransport::progress() { return impl_->progress(); }

transport::SharedSlots* ShmTransport::shared_slots() { return impl_->slots.get(); }

std::optional<std::uint64_t> ShmTransport::earliest_unexpected(transport::Tag tag) const {
  std::lock_guard lock(impl_->mu);
  const auto found = impl_->matcher.find_unexpected(transport::kAnySource, tag);
  if (!found) return std::nullopt;
  return impl_->matcher.arrival(*found);
}

std::unique_ptr<transport::Request> ShmTransport::isend(int peer, transport::Tag tag,
                                                        std::span<const std::byte> data,
                                                        transport::Call call) {
  return std::make_unique<ShmRequest>(impl_, impl_->post_send(peer, tag, data, call));
}

std::unique_ptr<transport::Request> ShmTransport::irecv(int peer, transport::Tag tag,
                                                        std::span<std::byte> data,
                                                        transport::Call call) {
  return std::make_unique<ShmRequest>(impl_, impl_->post_recv(peer, tag, data, call));
}

std::unique_ptr<transport::Request> ShmTransport::irecv_any(transport::Tag tag,
                                                            std::span<std::byte> data) {
  return irecv_any(tag, data, nullptr);
}

std::unique_ptr<transport::Request> ShmTransport::irecv_any(
    transport::Tag tag, std::span<std::byte> data, std::shared_ptr<transport::SourceClaim> claim) {
  return std::make_unique<ShmRequest>(
      impl_,
      impl_->post_recv(transport::kAnySource, tag, data, transport::kUnchecked, std::move(claim)));
}

std::shared_ptr<transport::ArrivalClock> ShmTransport::arrivals() const {
  std::lock_guard lock(impl_->mu);
  return impl_->matcher.arrivals();
}

void ShmTransport::abort(std::exception_ptr reason) {
  std::lock_guard lock(impl_->mu);
  impl_->abort_locked(std::move(reason));
}

}  // namespace c10d::inline v1::gloo_like
