// IciTransport::Chip: the state of one chip of the fabric, shared by its IciTransport, the
// requests it hands out and its router thread (ici_transport.h says what each does). Internal to
// src/backends/tpu_ici.
//
// Words used here:
//  - op: one isend or irecv, shared by its request and the queues that refer to it.
//  - incoming: a message arriving for this chip, from its first packet on. It is bound to the
//    posted receive the matcher gives it (transport/matcher.h: of its source and tag, or an
//    any-source one of its tag) when one exists, and its packets land in that receive's buffer;
//    otherwise it waits as the matcher's unexpected message, in a buffer of its own that grows by
//    chunks as packets arrive (counted by the matcher's hold for its source), for the receive
//    that will take it.
//  - transit packet: a packet for another chip, copied out of an incoming ring and queued on the
//    link its route takes next.
// Methods named *_locked require `mu`.
#pragma once

#include <fmt/format.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "backends/tpu_ici/fabric_layout.h"
#include "backends/tpu_ici/ici_transport.h"
#include "backends/tpu_ici/link_model.h"
#include "backends/tpu_ici/shm_segment.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "transport/matcher.h"
#include "transport/unexpected_buffer.h"

namespace c10d::inline v1::tpu_ici {
namespace fabric {

using transport::Clock;
using transport::Tag;

using core::what_of;

template <typename E>
inline std::exception_ptr error(const std::string& message) {
  return std::make_exception_ptr(E(message));
}

inline void ring_doorbell(ChipHeader* h) { transport::ring_doorbell(h->doorbell, h->sleeping); }

struct Incoming;

struct Op {
  bool is_send = false;
  int self = 0;
  int peer = 0;  // transport::kAnySource for an any-source receive
  Tag tag = 0;
  transport::Call call = transport::kUnchecked;  // a send's, or what a receive expects
  std::span<const std::byte> send;
  std::span<std::byte> recv;
  Clock::time_point posted = Clock::now();
  std::atomic<bool> done{false};
  std::exception_ptr error;     // written before `done`, under Chip::mu
  std::atomic<int> source{-1};  // a receive's sender, set under Chip::mu when it matched
  double vtime = 0;             // virtual completion
  // Sends: the route, the message sequence, the times on the first link, bytes written.
  std::vector<Hop> route;
  std::uint64_t seq = 0;
  MessageTimes times;
  std::size_t written = 0;
  bool cancelled = false;
  Incoming* bound = nullptr;  // receives: the message landing in this buffer

  bool any_source() const { return peer == transport::kAnySource; }
  std::size_t bytes() const { return is_send ? send.size() : recv.size(); }
  std::string describe() const {
    if (any_source()) return transport::any_source_description(self, tag, bytes());
    return fmt::format("rank {} {} rank {} ({}, {} bytes)", self,
                       is_send ? "isend to" : "irecv from", peer, transport::tag_string(tag),
                       bytes());
  }
};

struct Incoming {
  int src = 0;
  Tag tag = 0;
  transport::Call call = transport::kUnchecked;
  std::uint64_t bytes = 0;
  double tail = 0;
  std::uint64_t received = 0;
  std::shared_ptr<Op> recv;
  transport::UnexpectedBuffer buffer;  // while unexpected
  bool buffered = false;               // unexpected: counts in the matcher's hold for `src`
  bool discard = false;
  std::uint64_t held() const { return buffer.allocated() + transport::kUnexpectedOverheadBytes; }
};

struct Transit {
  PacketHeader header;
  std::vector<std::byte> payload;
};

struct OutItem {
  std::shared_ptr<Op> send;          // this chip's own message
  std::shared_ptr<Transit> transit;  // or a packet passing through
};

using MessageKey = std::pair<int, std::uint64_t>;  // (source, sequence)

}  // namespace fabric

struct IciTransport::Chip {
  using Op = fabric::Op;
  using Incoming = fabric::Incoming;
  using OutItem = fabric::OutItem;
  using MessageKey = fabric::MessageKey;

  Chip(std::shared_ptr<Store> s, int r, Torus t, FabricOptions o)
      : rank(r),
        who(fmt::format("ICI rank {}", r)),
        torus(std::move(t)),
        options(std::move(o)),
        store(std::move(s)) {}

  // ---- Immutable after set-up ----
  const int rank;
  const std::string who;  // "ICI rank 3": what this chip's errors open with
  const Torus torus;
  const FabricOptions options;
  std::shared_ptr<Store> store;
  std::string prefix;  // store keys of this fabric
  SharedSegment own;
  std::map<int, SharedSegment> neighbours;  // by rank
  ChipHeader* header = nullptr;
  std::vector<ShmRing> in;                  // per hop: this chip's incoming rings
  std::vector<ShmRing> out;                 // per hop: the next chip's ring (invalid: no link)
  std::vector<ChipHeader*> out_header;      // per hop: the chip it leads to
  std::vector<ChipHeader*> in_header;       // per hop: the chip that writes in[hop]
  std::vector<ChipHeader*> neighbour_list;  // distinct neighbours

  // ---- Shared state ----
  mutable std::mutex mu;
  std::condition_variable cv;  // an op completed; waits on mu
  double now = 0;              // GUARDED_BY(mu)
  // The clocks of the lanes of the stage whose lane tags came last (ici_transport.h);
  // GUARDED_BY(mu).
  transport::Tag lane_stage = 0;
  bool lane_stage_seen = false;
  std::array<double, transport::kMaxLanes> lane_now{};
  std::vector<LinkClock> links;  // GUARDED_BY(mu); per hop
  // Posted receives and unexpected incoming messages, by source; GUARDED_BY(mu).
  transport::Matcher<std::shared_ptr<Op>, std::shared_ptr<Incoming>> matcher;
  std::map<MessageKey, std::shared_ptr<Incoming>> arriving;  // GUARDED_BY(mu)
  std::map<MessageKey, MessageTimes> forwarding;             // GUARDED_BY(mu)
  std::vector<std::deque<OutItem>> queues;                   // GUARDED_BY(mu); per hop
  std::vector<std::uint64_t> transit_bytes;  // GUARDED_BY(mu); per hop: transit packets queued
  std::vector<std::uint64_t> next_seq;       // GUARDED_BY(mu); per peer
  // GUARDED_BY(mu); per source: when the first packet of a message from it was last delivered
  // here, and its tag (time_point{}: none yet). What a request that times out waiting for it
  // reports.
  std::vector<std::pair<transport::Clock::time_point, transport::Tag>> heard;
  std::exception_ptr aborted;  // GUARDED_BY(mu)
  std::atomic<bool> stop{false};
  std::thread router;

  int hops() const { return 2 * torus.ndims(); }
  // The clock a message tagged `tag` is posted at and moves: now, or its lane's.
  double& clock_locked(transport::Tag tag);

  // ---- Completion and failure ----
  void complete_locked(const std::shared_ptr<Op>& op, std::exception_ptr e, double vtime);
  // Fails everything pending; unless `notify` is false (a chip closing after the others left),
  // posts the notice and wakes the neighbours. The first reason wins.
  void abort_locked(std::exception_ptr reason, int origin, bool notify = true);

  // ---- Delivery ----
  void bind_locked(const std::shared_ptr<Incoming>& msg, const std::shared_ptr<Op>& op);
  // A packet for this chip; `copy(from, out)` copies out.size() bytes of its payload, from byte
  // `from`, to `out`. Fails the chip (aborted is then set) when the packet is not the next of
  // its message or breaks the limit of its source.
  void deliver_locked(const PacketHeader& h,
                      const std::function<void(std::size_t, std::span<std::byte>)>& copy);
  // `bytes` more held for the unexpected messages of `src`; false when that failed the chip.
  bool hold_locked(int src, std::uint64_t bytes);
  void release_locked(Incoming& msg);

  // ---- Router ----
  void fabric_failure(const std::string& what);
  bool drain_locked(int k);
  void forward_locked(const PacketHeader& h, const ShmRing& ring);
  bool write_locked(int hop);
  bool check_neighbours_locked(bool check_pids);
  bool incoming_ready() const;
  void router_loop();
  void router_main();  // router_loop, turning an exception into the chip's failure

  // ---- Set-up and shutdown ----
  void set_up();
  void shut_down();
};

}  // namespace c10d::inline v1::tpu_ici
