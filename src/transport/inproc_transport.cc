// InProcTransport: matching, copying and failing messages between threads of one process.
//
// Every op is owned by the request it was returned in; the world only keeps raw pointers to the
// unmatched ones in its inboxes, under mu_: receives as posted receives of their own rank's
// inbox, sends as unexpected messages of their destination's. An op leaves its inbox exactly
// once: when it is matched (and completed), failed by abort()/fail_rank() (and completed), or
// cancelled by its request's destructor. So the world never holds a pointer to a destroyed op.
#include "transport/inproc_transport.h"

#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <string>
#include <utility>

#include "core/check.h"

namespace c10d::inline v1::transport {
namespace {

using core::what_of;

template <typename ErrorType>
std::exception_ptr make_error(const char* file, int line, const std::string& message) {
  return std::make_exception_ptr(ErrorType(core::with_location(file, line, message)));
}

}  // namespace

struct InProcWorld::Op {
  Op(int self_rank, int peer_rank, Tag op_tag, Call op_call, std::span<const std::byte> send,
     std::span<std::byte> recv, bool send_side)
      : self(self_rank),
        peer(peer_rank),
        tag(op_tag),
        call(op_call),
        is_send(send_side),
        send_data(send),
        recv_data(recv) {}

  std::size_t bytes() const { return is_send ? send_data.size() : recv_data.size(); }
  // "rank 1 irecv from rank 0 (group 0 user tag 5, 64 bytes)": who, which way, what.
  std::string describe() const {
    if (peer == kAnySource) return any_source_description(self, tag, bytes());
    return fmt::format("rank {} {} rank {} ({}, {} bytes)", self,
                       is_send ? "isend to" : "irecv from", peer, tag_string(tag), bytes());
  }

  const int self;
  const int peer;
  const Tag tag;
  const Call call;
  const bool is_send;
  const std::span<const std::byte> send_data;  // set on the send side only
  const std::span<std::byte> recv_data;        // set on the receive side only
  const Clock::time_point posted_at = Clock::now();

  // The outcome. `error` is written under the world's mu_ strictly before `done` is released, and
  // never after, so test() can read both without the lock.
  std::atomic<bool> done{false};
  std::exception_ptr error;
  std::atomic<int> source{-1};  // a receive's sender, set before `done`
  std::condition_variable cv;   // notified under mu_ when `done` is set; waits on mu_

  // Requires the world's mu_ (the waiter re-checks `done` under it, so no wakeup is lost).
  void complete_locked(std::exception_ptr outcome) {
    error = std::move(outcome);
    done.store(true, std::memory_order_release);
    cv.notify_all();
  }
};

class InProcWorld::OpRequest final : public Request {
 public:
  template <typename... Args>
  explicit OpRequest(std::shared_ptr<InProcWorld> world, Args&&... args)
      : world_(std::move(world)), op_(std::forward<Args>(args)...) {}
  // Unregisters a pending op so nobody writes to it (or its receive buffer) once it is gone.
  ~OpRequest() override { world_->cancel(op_); }

  bool test() override { return world_->test(op_); }
  void wait(Clock::time_point deadline) override { world_->wait(op_, deadline); }
  int source() const override { return op_.source.load(std::memory_order_acquire); }
  Op& op() { return op_; }

 private:
  const std::shared_ptr<InProcWorld> world_;
  Op op_;
};

InProcWorld::InProcWorld(int size)
    : InProcWorld(size, std::vector<int>(static_cast<std::size_t>(std::max(size, 0)), 0)) {}

InProcWorld::InProcWorld(int size, std::vector<int> host_of_rank)
    : size_(size), host_of_rank_(number_hosts(host_of_rank)) {
  C10D_CHECK(size >= 1, "InProcWorld needs at least one rank, got {}", size);
  C10D_CHECK(static_cast<int>(host_of_rank_.size()) == size,
             "InProcWorld of {} ranks given a host map of {}", size, host_of_rank_.size());
  ranks_.resize(static_cast<std::size_t>(size));
  inboxes_.reserve(static_cast<std::size_t>(size));
  for (int r = 0; r < size; ++r) inboxes_.emplace_back(size, kDefaultMaxUnexpectedBytes);
}

void InProcWorld::fail_rank(int rank, std::exception_ptr reason) {
  C10D_CHECK(rank >= 0 && rank < size_, "fail_rank: rank {} is outside a world of size {}", rank,
             size_);
  if (!reason) {
    reason = make_error<NetworkError>(__FILE__, __LINE__, fmt::format("rank {} failed", rank));
  }
  std::lock_guard lock(mu_);
  auto& state = ranks_[static_cast<std::size_t>(rank)];
  if (state.died) return;
  state.died = reason;
  fail_queued_locked([&](const Op& op) -> std::exception_ptr {
    if (op.self == rank) return reason;
    if (op.peer == rank) return refusal_locked(op);  // now the NetworkError naming `rank`
    if (op.peer == kAnySource) return no_sender_locked(op.self);
    return nullptr;
  });
}

std::exception_ptr InProcWorld::no_sender_locked(int rank) const {
  for (int r = 0; r < size_; ++r) {
    if (r != rank && !ranks_[static_cast<std::size_t>(r)].died) return nullptr;
  }
  return make_error<NetworkError>(
      __FILE__, __LINE__,
      fmt::format("rank {}: an any-source receive cannot complete: every other rank of the "
                  "world failed",
                  rank));
}

void InProcWorld::abort(int rank, std::exception_ptr reason) {
  if (!reason) {
    reason = make_error<NetworkError>(__FILE__, __LINE__,
                                      fmt::format("rank {} aborted its transport", rank));
  }
  std::lock_guard lock(mu_);
  auto& state = ranks_[static_cast<std::size_t>(rank)];
  if (state.aborted) return;
  state.aborted = reason;
  fail_queued_locked(
      [&](const Op& op) -> std::exception_ptr { return op.self == rank ? reason : nullptr; });
}

std::exception_ptr InProcWorld::refusal_locked(const Op& op) const {
  const auto& self = ranks_[static_cast<std::size_t>(op.self)];
  if (self.aborted) return self.aborted;
  if (self.died) return self.died;
  if (op.peer == kAnySource) return nullptr;  // no_sender_locked, unless a send waits for it
  const auto& peer = ranks_[static_cast<std::size_t>(op.peer)];
  if (peer.died) {
    return make_error<NetworkError>(
        __FILE__, __LINE__,
        fmt::format("{}: peer rank {} failed: {}", op.describe(), op.peer, what_of(peer.died)));
  }
  return nullptr;
}

void InProcWorld::submit(Op& op) {
  std::lock_guard lock(mu_);
  if (auto refusal = refusal_locked(op)) {
    op.complete_locked(std::move(refusal));
    return;
  }
  // Each rank's inbox keeps the notes of its own receives' calls (transport/matcher.h).
  Inbox& own = inboxes_[static_cast<std::size_t>(op.self)];
  if (op.is_send) {
    Inbox& inbox = inboxes_[static_cast<std::size_t>(op.peer)];
    if (const auto recv = inbox.match(op.self, op.tag)) {
      transfer_locked(inbox, op, **recv);
    } else {
      inbox.check_arrived_call(op.peer, op.self, op.tag, op.call, [](Op* r, std::exception_ptr e) {
        r->complete_locked(std::move(e));
      });
      inbox.push_unexpected(op.self, op.tag, &op);
    }
    return;
  }
  if (const auto found = own.find_unexpected(op.peer, op.tag)) {
    transfer_locked(own, *own.take(*found), op);
    return;
  }
  if (auto refusal = own.call_refusal(op.self, op)) {
    op.complete_locked(std::move(refusal));
    return;
  }
  if (op.peer == kAnySource) {
    if (auto none = no_sender_locked(op.self)) {
      op.complete_locked(std::move(none));
      return;
    }
  }
  own.post(op.peer, op.tag, &op);
}

void InProcWorld::transfer_locked(Inbox& inbox, Op& send, Op& recv) {
  const std::size_t sent = send.send_data.size();
  const std::size_t room = recv.recv_data.size();
  if (!calls_agree(recv.call, send.call)) {
    send.complete_locked(call_mismatch(send.describe(), send.self, recv.self, send.tag, send.call,
                                       recv.call, /*outgoing=*/true));
    recv.complete_locked(
        call_mismatch(recv.describe(), recv.self, send.self, recv.tag, recv.call, send.call));
    inbox.refused(recv.self, send.self, recv.tag, recv.call, send.call,
                  [](Op* r, std::exception_ptr e) { r->complete_locked(std::move(e)); });
    return;
  }
  if (sent != room) {
    send.complete_locked(
        make_error<InvalidArgument>(__FILE__, __LINE__,
                                    fmt::format("{}: size mismatch: the send has {} bytes but the "
                                                "matching irecv on rank {} has a {}-byte buffer",
                                                send.describe(), sent, recv.self, room)));
    recv.complete_locked(make_error<InvalidArgument>(
        __FILE__, __LINE__,
        fmt::format("{}: size mismatch: the receive buffer has {} bytes "
                    "but the matching isend from rank {} has {} bytes",
                    recv.describe(), room, send.self, sent)));
    return;
  }
  // The one copy of this message. memcpy with a null pointer is undefined even for 0 bytes.
  if (sent > 0) std::memcpy(recv.recv_data.data(), send.send_data.data(), sent);
  recv.source.store(send.self, std::memory_order_relaxed);  // published by complete_locked
  send.complete_locked(nullptr);
  recv.complete_locked(nullptr);
}

void InProcWorld::fail_queued_locked(
    const std::function<std::exception_ptr(const Op&)>& error_for) {
  const auto fail = [&](Op* op) {
    auto error = error_for(*op);
    if (!error) return false;
    op->complete_locked(std::move(error));
    return true;
  };
  for (Inbox& inbox : inboxes_) {
    inbox.erase_receives_if(fail);
    inbox.erase_all_unexpected_if([&](int, Op* op) { return fail(op); });
  }
}

void InProcWorld::cancel(Op& op) {
  std::lock_guard lock(mu_);
  if (op.done.load(std::memory_order_relaxed)) return;
  // Not found: never queued (submit() did not get to run).
  if (op.is_send) {
    inboxes_[static_cast<std::size_t>(op.peer)].erase_unexpected(op.self, &op);
  } else {
    inboxes_[static_cast<std::size_t>(op.self)].cancel(op.peer, &op);
  }
}

bool InProcWorld::test(Op& op) {
  if (!op.done.load(std::memory_order_acquire)) return false;
  if (op.error) std::rethrow_exception(op.error);
  return true;
}

void InProcWorld::wait(Op& op, Clock::time_point deadline) {
  std::unique_lock lock(mu_);
  if (!op.cv.wait_until(lock, deadline, [&] { return op.done.load(std::memory_order_relaxed); })) {
    const auto pending_ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - op.posted_at).count();
    if (op.peer == kAnySource) throw any_source_timeout(op.describe(), op.tag, op.posted_at);
    throw PeerTimeout(
        core::with_location(
            __FILE__, __LINE__,
            fmt::format("{} timed out: no matching {} from rank {} {} ms after "
                        "posting",
                        op.describe(), op.is_send ? "irecv" : "isend", op.peer, pending_ms)),
        op.peer);
  }
  lock.unlock();
  if (op.error) std::rethrow_exception(op.error);
}

InProcTransport::InProcTransport(std::shared_ptr<InProcWorld> world, int rank)
    : world_(std::move(world)), rank_(rank) {
  C10D_CHECK(world_ != nullptr, "InProcTransport for rank {} needs a world", rank);
  C10D_CHECK(rank >= 0 && rank < world_->size(), "rank {} is outside a world of size {}", rank,
             world_->size());
}

std::unique_ptr<Request> InProcTransport::isend(int peer, Tag tag, std::span<const std::byte> data,
                                                Call call) {
  C10D_CHECK(peer >= 0 && peer < size(),
             "rank {} isend ({}): peer {} is outside a world of size {}", rank_, tag_string(tag),
             peer, size());
  auto request = std::make_unique<InProcWorld::OpRequest>(world_, rank_, peer, tag, call, data,
                                                          std::span<std::byte>{}, true);
  world_->submit(request->op());
  return request;
}

std::unique_ptr<Request> InProcTransport::irecv(int peer, Tag tag, std::span<std::byte> data,
                                                Call call) {
  C10D_CHECK(peer >= 0 && peer < size(),
             "rank {} irecv ({}): peer {} is outside a world of size {}", rank_, tag_string(tag),
             peer, size());
  auto request = std::make_unique<InProcWorld::OpRequest>(
      world_, rank_, peer, tag, call, std::span<const std::byte>{}, data, false);
  world_->submit(request->op());
  return request;
}

std::unique_ptr<Request> InProcTransport::irecv_any(Tag tag, std::span<std::byte> data) {
  auto request = std::make_unique<InProcWorld::OpRequest>(
      world_, rank_, kAnySource, tag, kUnchecked, std::span<const std::byte>{}, data, false);
  world_->submit(request->op());
  return request;
}

void InProcTransport::abort(std::exception_ptr reason) { world_->abort(rank_, std::move(reason)); }

}  // namespace c10d::inline v1::transport
