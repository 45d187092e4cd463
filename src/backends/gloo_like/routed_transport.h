// RoutedTransport: the TCP backend's transport when some peers share this host. Each peer goes
// through one channel for the transport's whole life: the same-host ones through shared memory
// (shm_transport.h), the others over TCP (tcp_transport.h). A receive from a peer matches only
// that peer's messages, so splitting by peer keeps transport.h's semantics for it; an any-source
// receive spans both channels (below). abort() aborts both, and a failure the TCP side sees (a
// peer that died, on any host) reaches the shared-memory side through
// TCPTransportOptions::on_abort.
//
// Any-source receives span both channels: irecv_any posts one receive on each, sharing a
// transport::SourceClaim (transport/matcher.h), so that exactly one of them takes a message (or
// fails the receive) and the other completes without one; once one has, the request cancels the
// other, which would otherwise wait in its channel's matcher for a message with the tag. Matching
// stays transport.h's: each channel orders the any-source part among its own receives by posting
// order, and a specific receive of a peer lives in that peer's channel only. When messages for it
// already wait in both channels, the one that arrived first is taken: the part of that channel is
// posted first (the two channels stamp arrivals from one transport::ArrivalClock, given to both
// in their options; the constructor checks), and the second part, finding the claim taken,
// completes at once. It fails when a part fails (an abort fails both), or when no peer is left
// on either channel: the TCP part gives up once every other host's peer is gone (the
// constructor tells the TCP transport which peers it does not carry), and every same-host peer
// has closed its transport (ShmTransport::peers_open); a same-host peer wrote what it sent into
// its ring before it closed, so the shared-memory part gets a last look of 10 ms at the rings,
// then the receive fails with the TCP part's error.
//
// Progress: the shared-memory channel moves bytes only when a thread of this rank polls it, so
// a thread that waits on a TCP request while shared-memory requests are pending polls both (a
// pair must not stall behind a full ring while this rank waits for another host); with nothing
// pending in shared memory it simply waits on TCP. A thread waiting for an any-source receive
// polls shared memory and sleeps on its doorbell until its deadline, which the TCP part also
// rings when it completes; meanwhile it counts as a sleeper on every TCP connection
// (TCPTransport::AnySourceSleep), so the io thread watches those sockets and moves their bytes.
#pragma once

#include <memory>

#include "backends/gloo_like/shm_transport.h"
#include "backends/gloo_like/tcp_transport.h"
#include "transport/transport.h"

namespace c10d::inline v1::gloo_like {

class RoutedTransport final : public transport::Transport {
 public:
  RoutedTransport(std::shared_ptr<ShmTransport> shm, std::shared_ptr<TCPTransport> tcp);
  // Shared memory closes first (ShmTransport::close: it writes the acknowledgements it owes),
  // whoever else still holds it: the TCP side's close aborts it (on_abort).
  ~RoutedTransport() override { shm_->close(); }

  int rank() const override { return tcp_->rank(); }
  int size() const override { return tcp_->size(); }
  using transport::Transport::irecv;
  using transport::Transport::isend;
  std::unique_ptr<transport::Request> isend(int peer, transport::Tag tag,
                                            std::span<const std::byte> data,
                                            transport::Call call) override;
  std::unique_ptr<transport::Request> irecv(int peer, transport::Tag tag, std::span<std::byte> data,
                                            transport::Call call) override;
  std::unique_ptr<transport::Request> irecv_any(transport::Tag tag,
                                                std::span<std::byte> data) override;
  void abort(std::exception_ptr reason) override;
  // The shared-memory side's: the hosts whose ranks it joins (host_map.h).
  std::vector<int> host_of_rank() const override { return shm_->host_of_rank(); }
  // Shared memory's, when every rank is on this host.
  transport::SharedSlots* shared_slots() override { return shm_->shared_slots(); }
  // The TCP side's: it holds the store the ranks share.
  transport::StallReport find_stalled(int peer, std::string_view doing,
                                      std::chrono::milliseconds window) override {
    return tcp_->find_stalled(peer, doing, window);
  }

 private:
  std::unique_ptr<transport::Request> over_tcp(std::unique_ptr<transport::Request> request);

  std::shared_ptr<ShmTransport> shm_;
  std::shared_ptr<TCPTransport> tcp_;
};

}  // namespace c10d::inline v1::gloo_like
