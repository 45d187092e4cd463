// InProcTransport: a Transport between threads of one process, one thread per rank, for the
// threads-as-ranks tests of collectives.
//
// The N ranks of one test share an InProcWorld (std::make_shared<InProcWorld>(n)); each rank's
// thread gets its own InProcTransport(world, rank). Semantics are those of transport.h:
//   - Matching is transport.h's, by each destination rank's Matcher (transport/matcher.h): FIFO
//     per (source, destination, tag), any-source receives included. A send that no receive
//     took waits as the destination's unexpected message (nothing copied; no bound applies).
//   - An any-source receive fails once every other rank has died (fail_rank) with nothing for it
//     queued, or when its own rank aborts or dies.
//   - Nothing is copied at post time. A message is copied exactly once, by whichever side posts
//     second, straight from the sender's span into the receiver's span; that completes both
//     requests. So a send completes only once a receive matched it (rendezvous): an algorithm
//     that waits on a send before posting the receive that unblocks its peer deadlocks here, which
//     is what a test wants to find.
//   - A receive and a send of different calls (transport.h: Calls) fail both with a
//     CallMismatch, each from its own side (the send's `outgoing`); calls are compared before
//     sizes. A size mismatch fails both requests with InvalidArgument naming the peer, tag and
//     sizes.
//   - wait() blocks on a condition variable up to its deadline, then throws TimeoutError; the
//     request stays pending. test() never blocks.
//   - abort(reason) fails this rank's pending and later requests with `reason`.
//   - InProcWorld::fail_rank(r, reason) simulates rank r dying: every other rank's pending and
//     later requests with peer r fail with a NetworkError naming r, and r's own with `reason`.
//   - host_of_rank(): the world's host map; by default every rank on one host (they are threads
//     of one process). A test gives the world a map of pretend hosts to run the hierarchical
//     collectives (transport.h: Hosts).
//
// Thread-safety: all matching state of a world sits behind the world's one mutex, so every method
// of both classes may be called from any thread (one thread waits on a given request at a time).
//
// Ownership and lifetime: transports and the requests they return hold the world by shared_ptr,
// so a request may outlive its transport. A request may be destroyed while pending (after a
// timeout or an abort): it is unregistered first and never touched again, and the buffer of a
// destroyed receive is never written.
#pragma once

#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "transport/matcher.h"
#include "transport/transport.h"

namespace c10d::inline v1::transport {

class InProcWorld {
 public:
  explicit InProcWorld(int size);
  // With pretend hosts: `host_of_rank` holds one host id (>= 0) per rank; InvalidArgument
  // otherwise.
  InProcWorld(int size, std::vector<int> host_of_rank);
  InProcWorld(const InProcWorld&) = delete;
  InProcWorld& operator=(const InProcWorld&) = delete;

  int size() const { return size_; }
  const std::vector<int>& host_of_rank() const { return host_of_rank_; }

  // Simulates rank `rank` dying with `reason`: every other rank's pending and later requests whose
  // peer is `rank` fail with a NetworkError naming it, and `rank`'s own fail with `reason` (which
  // releases a test thread still running as that rank). Idempotent: the first reason sticks.
  void fail_rank(int rank, std::exception_ptr reason);

 private:
  friend class InProcTransport;
  struct Op;        // one posted isend or irecv; lives inside its request
  class OpRequest;  // the Request handed to the caller

  // A rank's matching: its posted receives, and the sends to it that no receive took yet.
  using Inbox = Matcher<Op*, Op*>;
  struct RankState {
    std::exception_ptr aborted;  // set by the rank's abort()
    std::exception_ptr died;     // set by fail_rank()
  };

  void submit(Op& op);
  void cancel(Op& op);
  bool test(Op& op);
  void wait(Op& op, Clock::time_point deadline);
  void abort(int rank, std::exception_ptr reason);

  // Requires mu_. Why `op` cannot start (its rank aborted or died, or its peer died), or null.
  std::exception_ptr refusal_locked(const Op& op) const;
  // Requires mu_. Copies or fails a matched pair, then completes both; `inbox` is the
  // receiver's (a pair of other calls fails the rest of the receiver's op: Matcher::refused).
  void transfer_locked(Inbox& inbox, Op& send, Op& recv);
  // Requires mu_. Fails and unregisters every queued op for which `error_for` returns an error.
  void fail_queued_locked(const std::function<std::exception_ptr(const Op&)>& error_for);
  // Requires mu_. Why an any-source receive of `rank` cannot wait: every other rank died (null
  // while one lives).
  std::exception_ptr no_sender_locked(int rank) const;

  const int size_;
  const std::vector<int> host_of_rank_;  // numbered as transport.h says
  // Guards everything below and every Op's outcome. Copies run under it too: that keeps cancel()
  // and abort() trivially safe (no op is ever half-copied when a lock holder looks), and copy
  // bandwidth is not what threads-as-ranks tests measure.
  std::mutex mu_;
  std::vector<Inbox> inboxes_;    // GUARDED_BY(mu_); by destination rank
  std::vector<RankState> ranks_;  // GUARDED_BY(mu_)
};

// One rank's endpoint in an InProcWorld. Create one per rank.
class InProcTransport final : public Transport {
 public:
  InProcTransport(std::shared_ptr<InProcWorld> world, int rank);

  int rank() const override { return rank_; }
  int size() const override { return world_->size(); }

  using Transport::irecv;
  using Transport::isend;
  std::unique_ptr<Request> isend(int peer, Tag tag, std::span<const std::byte> data,
                                 Call call) override;
  std::unique_ptr<Request> irecv(int peer, Tag tag, std::span<std::byte> data, Call call) override;
  std::unique_ptr<Request> irecv_any(Tag tag, std::span<std::byte> data) override;
  void abort(std::exception_ptr reason) override;
  std::vector<int> host_of_rank() const override { return world_->host_of_rank(); }

 private:
  const std::shared_ptr<InProcWorld> world_;
  const int rank_;
};

}  // namespace c10d::inline v1::transport
