// RoutedTransport: the TCP backend's transport when some peers share this host. Each peer goes
// through one channel for the transport's whole life: the same-host ones through shared memory
// (shm_transport.h), the others over TCP (tcp_transport.h). Matching is per (peer, tag), so
// splitting by peer keeps transport.h's semantics. abort() aborts both, and a failure the TCP
// side sees (a peer that died, on any host) reaches the shared-memory side through
// TCPTransportOptions::on_abort.
//
// Progress: the shared-memory channel moves bytes only when a thread of this rank polls it, so
// a thread that waits on a TCP request while shared-memory requests are pending polls both (a
// pair must not stall behind a full ring while this rank waits for another host); with nothing
// pending in shared memory it simply waits on TCP.
#pragma once

#include <memory>

#include "backends/gloo_like/shm_transport.h"
#include "transport/transport.h"

namespace c10d::inline v1::gloo_like {

class RoutedTransport final : public transport::Transport {
 public:
  RoutedTransport(std::shared_ptr<ShmTransport> shm, std::shared_ptr<transport::Transport> tcp);

  int rank() const override { return tcp_->rank(); }
  int size() const override { return tcp_->size(); }
  std::unique_ptr<transport::Request> isend(int peer, transport::Tag tag,
                                            std::span<const std::byte> data) override;
  std::unique_ptr<transport::Request> irecv(int peer, transport::Tag tag,
                                            std::span<std::byte> data) override;
  void abort(std::exception_ptr reason) override;
  // The TCP side's: it holds the store the ranks share.
  transport::StallReport find_stalled(int peer, std::string_view doing,
                                      std::chrono::milliseconds window) override {
    return tcp_->find_stalled(peer, doing, window);
  }

 private:
  std::unique_ptr<transport::Request> over_tcp(std::unique_ptr<transport::Request> request);

  std::shared_ptr<ShmTransport> shm_;
  std::shared_ptr<transport::Transport> tcp_;
};

}  // namespace c10d::inline v1::gloo_like
