// IciTransport: the Transport of one simulated TPU chip on the shared-memory fabric
// (fabric_layout.h), for one rank of a torus (topology.h). Ranks are processes of this host
// (started by c10drun or mpirun) or threads of one process; either way they meet through the
// store and exchange real bytes only with their torus neighbours.
//
// Semantics are those of transport.h: FIFO per (source, tag), receives from any source
// (transport/matcher.h), a message of another call fails the receive with a CallMismatch (its
// call rides in every packet header), a size mismatch with InvalidArgument naming both sizes,
// wait() takes a deadline. An any-source receive fails only when the chip fails. A send
// completes once its last byte is in the first link's ring (so sends never wait for their receive).
// A message to a far chip follows its route (Torus::route, fixed per pair, so messages never
// overtake each other) and is forwarded by the router thread of every chip on the way.
//
// Virtual time (link_model.h): the chip has a clock, starting at 0. A send posted at clock t is
// handed to its first link at t (links are served first come, first served, so congestion
// shows); every chip that forwards it hands it to the next link when its first packet arrives.
// Completing a wait() or test() moves the clock to the request's virtual completion: the
// arrival of the message's last byte for a receive, its departure from the first link for a
// send. clock() reads it; link_stats() reports bytes and busy time per outgoing link. Lanes
// (transport::lane_tag, plan.h) have clocks of their own: a send of a lane is handed over at its
// lane's clock, and a wait moves its lane's clock as well as the chip's, which stays the latest
// of all. When a message of a new stage is first posted or awaited, every lane's clock starts
// at the chip's clock (the caller has waited for the stage before). So lanes that run on their
// own here also do in virtual time, as in the simulator.
//
// Failure: abort(reason) fails every pending and later request of this chip and posts an abort
// notice in the chip's segment; each router that sees a neighbour's notice aborts its own chip
// with a NetworkError naming the rank that failed first, so a failure floods the torus. A
// neighbour process that dies without a notice counts as a failure of that rank (checked every
// 100 ms). A route cut by down links fails isend with the NetworkError of Torus::route.
//
// Threads: one router thread per chip moves packets between rings: it reads every incoming
// ring, delivers packets for this chip (straight into a posted receive's buffer, or into a
// buffer of its own, in chunks allocated as packets arrive, until the receive is posted) and
// queues the others on their next link, and writes the queued packets while the next ring has
// room. What one source's unexpected messages hold, and what waits to be forwarded on one link,
// is bounded (FabricOptions::max_unexpected_bytes): past it the chip fails naming the source
// or link, the bytes and the limit. All matching state and the clock sit behind one mutex. The
// router sleeps on its segment's doorbell (a futex) when idle. An exception in the router
// fails the chip (never the process).
// Destruction: the chip says it is leaving in the store and keeps forwarding until every chip
// has said so (bounded by 10 s), then stops the router; pending requests fail.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/tpu_ici/topology.h"
#include "c10d/store.h"
#include "c10d/types.h"
#include "transport/transport.h"

namespace c10d::inline v1::tpu_ici {

struct FabricOptions {
  std::string group_name = "default";
  Milliseconds timeout = kDefaultTimeout;         // bounds the set-up through the store
  std::size_t ring_bytes = std::size_t{1} << 20;  // per incoming link; a power of two
  // The most the messages from one source rank whose receive is not posted yet may hold here
  // (their bytes plus 128 per message), and the most a chip queues to forward on one link; past
  // either the chip fails. 0: C10D_MAX_UNEXPECTED_BYTES, else 1 GiB.
  std::uint64_t max_unexpected_bytes = 0;
};

struct LinkStats {
  int link = 0;  // Torus link id
  std::string name;
  std::uint64_t bytes = 0;
  std::uint64_t messages = 0;
  double busy_seconds = 0;
};

class IciTransport final : public transport::Transport {
 public:
  // Blocks until every neighbour has mapped this chip's segment (bounded by options.timeout).
  IciTransport(std::shared_ptr<Store> store, int rank, Torus torus, FabricOptions options = {});
  ~IciTransport() override;

  int rank() const override;
  int size() const override;
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

  const Torus& torus() const;
  double clock() const;                       // this chip's virtual time, seconds
  std::vector<LinkStats> link_stats() const;  // the links leaving this chip
  // A table of link_stats() with utilization = busy / clock().
  std::string link_report() const;

  struct Chip;  // the state shared with requests and the router thread

 private:
  // irecv and irecv_any (peer transport::kAnySource).
  std::unique_ptr<transport::Request> post_receive(int peer, transport::Tag tag,
                                                   std::span<std::byte> data, transport::Call call);

  std::shared_ptr<Chip> chip_;
};

}  // namespace c10d::inline v1::tpu_ici
