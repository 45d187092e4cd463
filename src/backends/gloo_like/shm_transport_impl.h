// ShmTransport's shared state, ShmTransport::Impl, and the parts of the transport that work on
// it, one file each (as the TCP transport's, tcp_transport_impl.h):
//   shm_transport.cc   the public class and its requests: posting, cancelling, abort
//   shm_setup.cc       this host's identity, the ring size, creating and mapping the segments
//   shm_rings.cc       the send and receive rings: writing queued sends, reading messages into
//                      their receives or unexpected buffers, progress
//   shm_wait.cc        waiters: polling, sleeping on the doorbell, peers' liveness, timeouts
//   shm_cma.cc         single-copy messages: the set-up's probe, descriptors, copying straight
//                      out of the sender's memory, acknowledgements
//   shm_slots.cc       shared slots (transport::SharedSlots): small collectives' bytes, published
//                      in this rank's segment and read in the peers'
// The segment and message layouts are in shm_layout.h. Requests hold Impl by shared_ptr, and so
// may outlive the ShmTransport that made them.
#pragma once

#include <fmt/format.h>
#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "backends/gloo_like/shm_layout.h"
#include "backends/gloo_like/shm_transport.h"
#include "core/fd.h"
#include "transport/matcher.h"
#include "transport/shared_memory.h"
#include "transport/unexpected_buffer.h"

namespace c10d::inline v1::gloo_like {

// The parts' .cc files say `using namespace shm_detail;`: these names, and shm_layout.h's.
namespace shm_detail {

using namespace shm;
using transport::Clock;
using transport::ShmRing;
using transport::Tag;

// How long a single-copy message waits for its receive before it is copied into a buffer
// (shm_cma.cc); a waiter sleeps no longer while one waits.
inline constexpr auto kParkGrace = std::chrono::milliseconds(20);
// The longest a closing transport waits for room in its rings for the acknowledgements it owes
// (shm_cma.cc: flush_acks). A peer that waits for one reads its ring within microseconds; one
// that does not wait yet learns at its next look that its send was not answered.
inline constexpr auto kCloseFlush = std::chrono::seconds(5);

// Bumps `h`'s doorbell, and wakes its sleepers if it has any.
inline void ring_doorbell(SegmentHeader* h) { transport::ring_doorbell(h->doorbell, h->sleepers); }

struct Op {
  bool is_send = false;
  int self = 0;
  int peer = 0;  // transport::kAnySource for an any-source receive
  Tag tag = 0;
  transport::Call call = transport::kUnchecked;  // a send's, or what a receive expects
  const std::byte* send_data = nullptr;          // null once abandoned: the rest goes out unwritten
  std::byte* recv_data = nullptr;
  std::size_t bytes = 0;
  Clock::time_point posted_at = Clock::now();
  std::atomic<bool> done{false};
  std::exception_ptr error;     // written before `done`
  std::atomic<int> source{-1};  // a receive's sender, set under Impl::mu when it matched
  // A send that went single-copy: complete once the receiver acknowledged its copy (shm_cma.cc);
  // `sequence` is its descriptor's.
  bool single_copy = false;
  std::uint64_t sequence = 0;
  // A part of an any-source receive posted on the TCP transport too (routed_transport.h); null
  // for every other op. Taken before the op takes a message (transport/matcher.h).
  std::shared_ptr<transport::SourceClaim> claim;

  bool any_source() const { return peer == transport::kAnySource; }
  std::string describe() const {
    if (any_source()) return transport::any_source_description(self, tag, bytes, "shared memory");
    return fmt::format("rank {} {} rank {} ({}, {} bytes, shared memory)", self,
                       is_send ? "isend to" : "irecv from", peer, transport::tag_string(tag),
                       bytes);
  }
  // Under Impl::mu. A part that lost its claim completes without a message (and without an
  // error: the receive's outcome is the other part's).
  void complete(std::exception_ptr e = nullptr) {
    if (claim && !claim->take(this)) {
      e = nullptr;
      source.store(-1, std::memory_order_relaxed);
    }
    error = std::move(e);
    done.store(true, std::memory_order_release);
    if (claim) claim->completed();
  }
};

// A message that arrived before its receive was posted; its chunks are allocated as its bytes
// come out of the ring.
struct Unexpected {
  Unexpected(int from, std::uint64_t size, transport::Call sent)
      : peer(from), data(size), call(sent) {}
  const int peer;
  transport::UnexpectedBuffer data;
  const transport::Call call;  // its header's
  std::uint64_t got = 0;       // bytes in `data` so far
  // What it counts against the peer's limit (Impl::matcher's hold) while it is queued.
  std::uint64_t held() const { return data.allocated() + transport::kUnexpectedOverheadBytes; }

  // A single-copy message (shm_cma.cc): kParked while its bytes are all in the sender's memory
  // at `address` (a receive that takes it copies them straight into its buffer), kPulling while
  // they are copied into `data` (no receive came within the grace); kNone once they all are, or
  // for a message of the ring. `error`: its copy failed; the receive that takes it fails so.
  enum class Copy { kNone, kParked, kPulling } copy = Copy::kNone;
  std::uint64_t sequence = 0;
  std::uint64_t address = 0;
  Tag tag = 0;
  Clock::time_point arrived{};
  std::exception_ptr error;
};

// A single-copy message being copied out of its sender's memory, into the receive `op`, or into
// `unexpected`'s buffer while no receive has taken it; with neither (its receive went away, or
// its size did not match) the rest is dropped.
struct Pull {
  Tag tag = 0;
  std::uint64_t sequence = 0;
  std::uint64_t address = 0;
  std::uint64_t bytes = 0;
  std::uint64_t done = 0;  // bytes copied
  std::shared_ptr<Op> op;
  std::shared_ptr<Unexpected> unexpected;
};

// An acknowledgement owed to the sender of a single-copy message.
struct Ack {
  std::uint64_t sequence = 0;
  Tag tag = 0;
  std::uint32_t status = 0;  // 0, or the errno of the copy that failed
};

struct Peer {
  int rank = -1;
  pid_t pid = 0;
  // The peer's process as a pidfd, readable once it has ended (a zombie too: Impl::lost_peer);
  // none where the kernel has no pidfd_open, and then kill(pid, 0) is asked.
  core::Fd pidfd;
  transport::SharedSegment segment;  // the peer's, holding the ring this rank writes
  SegmentHeader* header = nullptr;   // of that segment
  ShmRing out;                       // this rank -> peer, in the peer's segment
  ShmRing in;                        // peer -> this rank, in this rank's segment
  std::uint64_t next_sequence = 0;

  std::deque<std::shared_ptr<Op>> sends;  // the front one is being written
  std::uint64_t send_pos = 0;             // of the front message, header included
  std::uint64_t next_in_sequence = 0;     // the sequence number of the next message from the peer

  // The message being read: into `reading_op`, into `reading_unexpected`, or dropped.
  bool reading = false;
  std::uint64_t reading_bytes = 0;
  std::uint64_t reading_pos = 0;  // payload bytes consumed, padding included
  std::shared_ptr<Op> reading_op;
  std::shared_ptr<Unexpected> reading_unexpected;
  // When the last message header from the peer was read, and its tag (under mu): what a request
  // that times out waiting for this peer reports.
  transport::PeerActivity heard;
  Clock::time_point heard_at{};

  // Single-copy messages (shm_cma.cc), decided per direction at set-up.
  bool cma_out = false;  // sends of Impl::cma_min_bytes and more go single-copy to the peer
  bool cma_in = false;   // the peer may send single-copy messages (this rank can read it)
  std::deque<std::shared_ptr<Op>> cma_sent;        // sent single-copy, awaiting their acks
  std::deque<Pull> pulls;                          // being copied from the peer, oldest first
  std::deque<std::shared_ptr<Unexpected>> parked;  // single-copy, without a receive yet
  std::deque<Ack> acks;                            // owed to the peer, written before its next
                                                   // message

  std::byte* slots = nullptr;  // the peer's slots, in its segment (read only)
};

}  // namespace shm_detail

struct ShmTransport::Impl {
  using Op = shm_detail::Op;
  using Peer = shm_detail::Peer;
  using Unexpected = shm_detail::Unexpected;
  using Pull = shm_detail::Pull;
  using MessageHeader = shm::MessageHeader;
  using SegmentHeader = shm::SegmentHeader;
  using Clock = transport::Clock;
  using ShmRing = transport::ShmRing;
  using Tag = transport::Tag;

  int rank = 0;
  std::string who;  // "rank 3 (shared memory)": what this rank's errors open with
  int world = 0;
  std::uint64_t ring_bytes = 0;
  std::uint64_t max_unexpected = transport::kDefaultMaxUnexpectedBytes;
  transport::SharedSegment own;
  SegmentHeader* own_header = nullptr;
  std::vector<int> peer_index;    // by rank: index into peers, or -1
  std::vector<int> host_of_rank;  // the group's host map (host_map.h), set up once
  std::deque<Peer> peers;         // stable addresses

  // Single-copy messages (shm_cma.cc): whether this rank takes part, and from what size.
  bool cma_enabled = false;
  std::uint64_t cma_min_bytes = 0;
  std::uint64_t cma_probe_word = 0;  // what peers read at set-up (SegmentHeader::cma_probe_*)
  // Whether single-copy messages wait for their receive (Peer::parked), under mu; read without it
  // by a waiter about to sleep, which then sleeps no longer than their grace.
  std::atomic<int> parked{0};

  // When a sleeping waiter next looks whether the same-host peers' processes exist (Clock
  // ticks; any waiter, relaxed: a look more or less is harmless).
  std::atomic<Clock::rep> next_liveness_check{0};

  std::atomic<bool> closing{false};  // close() began
  mutable std::mutex mu;
  std::exception_ptr failure;       // GUARDED_BY(mu)
  std::atomic<bool> failed{false};  // failure is set: for pollers that take no lock
  // Posted receives and unexpected messages, by rank (only same-host ones send here);
  // GUARDED_BY(mu). A message stays queued while it arrives, until a receive takes it.
  transport::Matcher<std::shared_ptr<Op>, std::shared_ptr<Unexpected>> matcher;

  Peer& peer(int r) {
    return peers[static_cast<std::size_t>(peer_index[static_cast<std::size_t>(r)])];
  }

  // ---- Writing and reading the rings (shm_rings.cc) ----
  bool write_locked(Peer& p);
  bool begin_message_locked(Peer& p, const MessageHeader& h);
  void check_arrived_locked(const Peer& p, const MessageHeader& h);
  bool hold_locked(Peer& p, std::uint64_t bytes);
  bool copy_to_unexpected_locked(Peer& p, const ShmRing::Reader& r, std::uint64_t at,
                                 std::uint64_t n);
  bool refuse_locked(const std::shared_ptr<Op>& op, int sender, transport::Call call,
                     std::uint64_t bytes);
  bool read_locked(Peer& p);
  bool progress_locked();
  bool progress();

  // ---- Single-copy messages (shm_cma.cc) ----
  void setup_single_copy(const ShmTransportOptions& options, SegmentHeader& own_h);
  void probe_single_copy(Peer& p);
  std::string single_copy_sources() const;
  void learn_single_copy(Peer& p, std::string_view theirs);
  bool write_single_copy_locked(Peer& p, ShmRing::Writer& w, Op& op);
  bool write_acks_locked(Peer& p, ShmRing::Writer& w);
  bool take_ack_locked(Peer& p, const MessageHeader& h);
  bool begin_single_copy_locked(Peer& p, const MessageHeader& h);
  void pull_into_locked(Peer& p, const std::shared_ptr<Unexpected>& u, std::shared_ptr<Op> op);
  void drop_single_copy_locked(Peer& p, const Unexpected& u);
  void finish_pull_locked(Peer& p, Pull& pull, int err);
  bool pull_locked(Peer& p);
  void revoke_locked(Peer& p, std::uint64_t below);
  bool single_copy_pending_locked() const;
  void flush_acks(Clock::time_point deadline);
  bool end_sends_to_closed_locked();
  void end_sends_if_closed(int peer_rank);

  // ---- Shared slots (shm_slots.cc) ----
  // Set up when every rank of the transport is on this host.
  struct Slots final : transport::SharedSlots {
    explicit Slots(Impl& i) : impl(i) {}
    std::size_t max_bytes() const override { return shm::kSlotBytes; }
    void gather(Tag tag, std::uint64_t check, std::span<const std::byte> mine,
                Clock::time_point deadline) override;
    std::span<const std::byte> part(int r) const override;

    Impl& impl;
    std::byte* own = nullptr;  // this rank's slots, in its segment
    // The peers (Impl::peers, whose deque indexing showed in every round's profile) and their
    // slots by rank (null: this rank); set once, at set-up.
    std::vector<Peer*> peers;
    std::vector<std::byte*> slots_of;
    std::uint64_t round = 0;  // rounds this rank published
    // This rank's bytes of its last round, and their size, kept here too: its slot's line is
    // most often gone to the peers that read it, and reading it back cost a miss per round.
    std::array<std::byte, shm::kSlotBytes> mine_copy{};
    std::uint64_t mine_bytes = 0;
    std::atomic<bool> busy{false};  // a gather runs (one thread at a time)
    // When the last round completed (every peer had published it; the coarse clock: a precise
    // read costs as much as the rest of a small round) and its tag, for heard_from.
    std::atomic<Clock::rep> heard_at{0};
    std::atomic<Tag> heard_tag{0};
  };
  std::unique_ptr<Slots> slots;

  // ---- Posting, cancelling and failure (shm_transport.cc) ----
  bool admit_locked(Op& op);
  std::shared_ptr<Op> post_send(int peer_rank, Tag tag, std::span<const std::byte> data,
                                transport::Call call);
  std::shared_ptr<Op> post_recv(int peer_rank, Tag tag, std::span<std::byte> data,
                                transport::Call call,
                                std::shared_ptr<transport::SourceClaim> claim = nullptr);
  std::shared_ptr<Op> make_op(bool is_send, int peer_rank, Tag tag, transport::Call call,
                              std::size_t bytes) const;
  void announce_locked(const Op& op);
  Tag posted_tag = 0;  // GUARDED_BY(mu): what announce_locked last wrote
  void cancel(const std::shared_ptr<Op>& op);
  void abort_locked(std::exception_ptr reason);

  // ---- Waiting (shm_wait.cc) ----
  transport::PeerActivity heard_from(int r) const;
  std::exception_ptr lost_peer() const;
  template <typename Done>
  void sleep(Done& done, Clock::time_point until);
  void wait(Op& op, Clock::time_point deadline);
  template <typename Done>
  bool poll_until(Done&& done, Clock::time_point deadline, bool move_bytes = true);
  // The same, for the parts in other files. Without `move_bytes` the polls only ask `done`
  // (a shared-slot round waits for no ring; whoever waits on one moves its bytes).
  bool poll_until(const std::function<bool()>& done, Clock::time_point deadline,
                  bool move_bytes = true);

  // ---- Set-up (shm_setup.cc) ----
  void setup(Store& store, backends::SetupWatch& watch, const ShmTransportOptions& options);
};

}  // namespace c10d::inline v1::gloo_like
