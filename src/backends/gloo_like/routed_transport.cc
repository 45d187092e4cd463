#include "backends/gloo_like/routed_transport.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <array>

#include "core/check.h"
#include "transport/matcher.h"

namespace c10d::inline v1::gloo_like {
namespace {

// A TCP request of a rank that also has same-host peers (see the header).
class PollingRequest final : public transport::Request {
 public:
  PollingRequest(std::unique_ptr<transport::Request> tcp, std::shared_ptr<ShmTransport> shm)
      : tcp_(std::move(tcp)), shm_(std::move(shm)) {}
  bool test() override {
    shm_->progress();
    return tcp_->test();
  }
  void wait(transport::Clock::time_point deadline) override {
    while (shm_->has_pending()) {
      if (tcp_->test()) return;
      if (!shm_->progress()) {
        if (transport::Clock::now() >= deadline) break;  // tcp_->wait names the request
        sched_yield();
      }
    }
    tcp_->wait(deadline);
  }
  int source() const override { return tcp_->source(); }
  transport::PeerActivity heard() const override { return tcp_->heard(); }

 private:
  std::unique_ptr<transport::Request> tcp_;
  std::shared_ptr<ShmTransport> shm_;
};

// An any-source receive over both channels: two parts sharing a claim (see the header).
class AnySourceRequest final : public transport::Request {
 public:
  AnySourceRequest(std::shared_ptr<transport::SourceClaim> claim, std::shared_ptr<ShmTransport> shm,
                   std::shared_ptr<TCPTransport> tcp, std::unique_ptr<transport::Request> first,
                   std::unique_ptr<transport::Request> second, transport::Tag tag, std::string what)
      : claim_(std::move(claim)),
        shm_(std::move(shm)),
        tcp_(std::move(tcp)),
        parts_{std::move(first), std::move(second)},
        tag_(tag),
        what_(std::move(what)) {}

  bool test() override {
    if (source_ >= 0) return true;
    if (error_) std::rethrow_exception(error_);
    shm_->progress();
    if (completed()) return true;
    if (auto why = claim_->given_up(); why && !claim_->taken() && !shm_->peers_open()) {
      // Neither channel has a peer left (see last_look): after a grace for the rings, fail.
      const auto now = transport::Clock::now();
      if (gave_up_seen_ == transport::Clock::time_point{}) gave_up_seen_ = now;
      if (now - gave_up_seen_ >= kLastLook && claim_->take(this)) fail(why);
    }
    return completed();
  }

  void wait(transport::Clock::time_point deadline) override {
    for (;;) {
      if (test()) return;
      // A part took a message: wait for it to land (or for its error) as that channel waits.
      if (claim_->taken()) {
        for (std::size_t i = 0; i < parts_.size(); ++i) {
          if (!parts_[i] || parts_[i]->source() < 0) continue;
          drop_all_but(i);
          parts_[i]->wait(deadline);
          source_ = parts_[i]->source();
          return;
        }
      }
      const auto now = transport::Clock::now();
      if (now >= deadline) break;
      if (auto why = claim_->given_up(); why && !claim_->taken() && !shm_->peers_open()) {
        last_look(why, deadline);
        continue;
      }
      // Until a part takes the claim, or the TCP part gives up: this thread moves shared memory's
      // bytes and sleeps on its doorbell (poll_until also looks after the same-host peers'
      // processes), while the io thread moves the TCP sockets' bytes for it; the TCP part's
      // completion rings the doorbell (claim->on_complete).
      const TCPTransport::AnySourceSleep sleep(*tcp_);
      shm_->poll_until(
          [&] { return claim_->taken() || (claim_->given_up() != nullptr && !shm_->peers_open()); },
          deadline);
    }
    if (test()) return;
    throw transport::any_source_timeout(what_, tag_, posted_at_);
  }

  int source() const override { return source_; }

 private:
  // How long the shared-memory part may still take a message once the TCP part gave up.
  static constexpr std::chrono::milliseconds kLastLook{10};

  // The TCP part gave up with `why`: every peer's connection is gone. A same-host peer wrote
  // what it sent into its ring before it closed its TCP connection, so the shared-memory part
  // takes that now or never: it gets kLastLook, then the receive fails with `why` (the request
  // takes the claim itself, so neither part takes a message later).
  void last_look(const std::exception_ptr& why, transport::Clock::time_point deadline) {
    shm_->poll_until(
        [&] { return claim_->taken(); },
        std::min<transport::Clock::time_point>(deadline, transport::Clock::now() + kLastLook));
    if (claim_->take(this)) fail(why);
  }

  // Whether the part that took the claim completed; rethrows its error. A part that completes
  // without the claim does so without a message and without an error (source() -1).
  bool completed() {
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      if (!parts_[i]) continue;
      bool done = false;
      try {
        done = parts_[i]->test();
      } catch (...) {
        drop_all_but(i);
        throw;
      }
      if (done && parts_[i]->source() >= 0) {
        source_ = parts_[i]->source();
        drop_all_but(i);
        return true;
      }
    }
    return false;
  }

  // The request itself fails the receive with `why` (given_up), for good.
  [[noreturn]] void fail(std::exception_ptr why) {
    drop_all_but(parts_.size());
    error_ = why;
    std::rethrow_exception(std::move(why));
  }

  // Part `keep` (none: parts_.size()) has the receive's outcome, so the others can take nothing
  // more: they leave their channels now (a request's destructor cancels its receive) instead of
  // waiting in their matchers' any-source queues until a message with the tag comes or this
  // request goes. Meanwhile every message of that channel would be tested against them, and a
  // shared-memory part keeps ShmTransport::has_pending() true, so that every TCP wait of this
  // rank polls shared memory.
  void drop_all_but(std::size_t keep) {
    for (std::size_t i = 0; i < parts_.size(); ++i) {
      if (i != keep) parts_[i].reset();
    }
  }

  std::shared_ptr<transport::SourceClaim> claim_;
  std::shared_ptr<ShmTransport> shm_;
  std::shared_ptr<TCPTransport> tcp_;
  std::array<std::unique_ptr<transport::Request>, 2> parts_;
  transport::Tag tag_;
  std::string what_;  // "rank 0 irecv from any rank (group 0 user tag 3, 8 bytes, ...)"
  const transport::Clock::time_point posted_at_ = transport::Clock::now();
  int source_ = -1;           // set once completed
  std::exception_ptr error_;  // set once the request itself failed the receive (fail)
  transport::Clock::time_point gave_up_seen_{};  // test(): when it first saw the TCP part give up
};

}  // namespace

RoutedTransport::RoutedTransport(std::shared_ptr<ShmTransport> shm,
                                 std::shared_ptr<TCPTransport> tcp)
    : shm_(std::move(shm)), tcp_(std::move(tcp)) {
  C10D_CHECK(shm_ != nullptr && tcp_ != nullptr, "RoutedTransport needs both transports");
  C10D_CHECK(shm_->rank() == tcp_->rank() && shm_->size() == tcp_->size(),
             "RoutedTransport: shared memory has rank {} of {}, TCP rank {} of {}", shm_->rank(),
             shm_->size(), tcp_->rank(), tcp_->size());
  C10D_CHECK(shm_->arrivals() != nullptr && shm_->arrivals() == tcp_->arrivals(),
             "RoutedTransport rank {}: the shared-memory and TCP transports must share one "
             "transport::ArrivalClock (ShmTransportOptions::arrivals, "
             "TCPTransportOptions::arrivals): an any-source receive compares their arrival stamps",
             tcp_->rank());
  std::vector<int> same_host;
  for (int p = 0; p < tcp_->size(); ++p) {
    if (shm_->serves(p)) same_host.push_back(p);
  }
  tcp_->carried_elsewhere(same_host);
}

std::unique_ptr<transport::Request> RoutedTransport::over_tcp(
    std::unique_ptr<transport::Request> request) {
  return std::make_unique<PollingRequest>(std::move(request), shm_);
}

std::unique_ptr<transport::Request> RoutedTransport::isend(int peer, transport::Tag tag,
                                                           std::span<const std::byte> data,
                                                           transport::Call call) {
  if (shm_->serves(peer)) return shm_->isend(peer, tag, data, call);
  return over_tcp(tcp_->isend(peer, tag, data, call));
}

std::unique_ptr<transport::Request> RoutedTransport::irecv(int peer, transport::Tag tag,
                                                           std::span<std::byte> data,
                                                           transport::Call call) {
  if (shm_->serves(peer)) return shm_->irecv(peer, tag, data, call);
  return over_tcp(tcp_->irecv(peer, tag, data, call));
}

std::unique_ptr<transport::Request> RoutedTransport::irecv_any(transport::Tag tag,
                                                               std::span<std::byte> data) {
  if (shm_->same_host_peers() == 0) return over_tcp(tcp_->irecv_any(tag, data));
  auto claim = std::make_shared<transport::SourceClaim>();
  // A waiter sleeps on the shared-memory doorbell: the TCP part's completion must ring it.
  claim->on_complete = [weak = std::weak_ptr<ShmTransport>(shm_)] {
    if (auto shm = weak.lock()) shm->wake();
  };
  // Where a message for it waits on both channels, the one that arrived first is taken: its
  // channel's part goes first, and takes it; the other part then finds the claim taken.
  const auto on_shm = shm_->earliest_unexpected(tag);
  const auto on_tcp = tcp_->earliest_unexpected(tag);
  const bool shm_first = on_shm && (!on_tcp || *on_shm < *on_tcp);
  std::unique_ptr<transport::Request> first;
  std::unique_ptr<transport::Request> second;
  if (shm_first) {
    first = shm_->irecv_any(tag, data, claim);
    second = tcp_->irecv_any(tag, data, claim);
  } else {
    first = tcp_->irecv_any(tag, data, claim);
    second = shm_->irecv_any(tag, data, claim);
  }
  return std::make_unique<AnySourceRequest>(
      std::move(claim), shm_, tcp_, std::move(first), std::move(second), tag,
      transport::any_source_description(rank(), tag, data.size(), "shared memory and TCP"));
}

void RoutedTransport::abort(std::exception_ptr reason) {
  shm_->abort(reason);
  tcp_->abort(std::move(reason));
}

}  // namespace c10d::inline v1::gloo_like
