#include "backends/gloo_like/routed_transport.h"

#include <sched.h>

#include "core/check.h"

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

 private:
  std::unique_ptr<transport::Request> tcp_;
  std::shared_ptr<ShmTransport> shm_;
};

}  // namespace

RoutedTransport::RoutedTransport(std::shared_ptr<ShmTransport> shm,
                                 std::shared_ptr<transport::Transport> tcp)
    : shm_(std::move(shm)), tcp_(std::move(tcp)) {
  C10D_CHECK(shm_ != nullptr && tcp_ != nullptr, "RoutedTransport needs both transports");
  C10D_CHECK(shm_->rank() == tcp_->rank() && shm_->size() == tcp_->size(),
             "RoutedTransport: shared memory has rank {} of {}, TCP rank {} of {}", shm_->rank(),
             shm_->size(), tcp_->rank(), tcp_->size());
}

std::unique_ptr<transport::Request> RoutedTransport::over_tcp(
    std::unique_ptr<transport::Request> request) {
  return std::make_unique<PollingRequest>(std::move(request), shm_);
}

std::unique_ptr<transport::Request> RoutedTransport::isend(int peer, transport::Tag tag,
                                                           std::span<const std::byte> data) {
  if (shm_->serves(peer)) return shm_->isend(peer, tag, data);
  return over_tcp(tcp_->isend(peer, tag, data));
}

std::unique_ptr<transport::Request> RoutedTransport::irecv(int peer, transport::Tag tag,
                                                           std::span<std::byte> data) {
  if (shm_->serves(peer)) return shm_->irecv(peer, tag, data);
  return over_tcp(tcp_->irecv(peer, tag, data));
}

void RoutedTransport::abort(std::exception_ptr reason) {
  shm_->abort(reason);
  tcp_->abort(std::move(reason));
}

}  // namespace c10d::inline v1::gloo_like
