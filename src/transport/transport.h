// Transport: the seam between collective algorithms and the wires that carry their bytes.
//
// An algorithm sees ranks and byte spans, never sockets: it posts tagged isend/irecv requests to
// peers and waits on them. Backends implement this over TCP (src/backends/gloo_like), over the
// simulated torus (src/backends/tpu_ici), or between threads of one process (inproc_transport.h,
// for tests).
//
// Matching: a receive from peer P with tag T takes the oldest unmatched send from P to this rank
// with tag T (messages between a pair with one tag never overtake each other, as in MPI). The
// receive buffer's size must equal the send's; a mismatch fails the receive with an
// InvalidArgument that names the peer, the tag and both sizes (and the send too, where the
// transport still can: in-process it does, over TCP the send has completed when it was written).
//
// Calls: every message of a collective carries the call it belongs to, a 64-bit word the process
// group packs (backends/common/fingerprint.h: pack_call: op, dtype, reduce op and element count),
// and each of the collective's receives expects that call. A receive that matches a message of
// another call fails with a CallMismatch naming both calls and the sender, before sizes are
// compared: ranks that called different collectives under one sequence number, or the same one
// with other sizes, fail there instead of returning what they received or naming only sizes.
// kUnchecked (0) on either side matches any call: point-to-point messages, control messages and
// irecv_any carry it. The check is one 64-bit compare when a receive and a message meet; a message
// waits unexpected with its call.
//
// Any source: irecv_any(tag, data) takes the next message with `tag` from whichever peer sends
// it (MPI_ANY_SOURCE). A message from P with tag T goes to the earliest posted receive that
// accepts it, a receive from P or an any-source receive alike, so the order above holds whoever
// receives; an any-source receive posted while messages for it wait takes the one that arrived
// first (transport/matcher.h has the rules, kept once for every transport). Once it completed,
// its request's source() names the sender. Sizes are checked as for irecv, naming the sender.
// It fails when this rank's transport aborts, or, where a transport tells peers that are gone
// (TCP, in-process), once no peer is left that could still send; a peer lost while others remain
// does not fail it (the others may be the senders), which only its deadline bounds then. Its
// PeerTimeout names the tag and says that no rank sent, with peer() -1.
//
// Buffers: neither side copies on posting. A send's span must stay valid and unchanged, and a
// receive's span untouched, until the request completes (or the transport is aborted).
//
// Errors and deadlines: wait() takes an absolute deadline and throws PeerTimeout (a
// TimeoutError) naming the peer, the direction, the tag and the bytes, and what this rank last
// heard from that peer where the transport keeps track; a peer that is gone (or an abort())
// fails every pending and later request with the NetworkError the backend raised, naming that
// peer. Nothing blocks without a deadline.
//
// Stalls: a process group whose op timed out asks find_stalled() which rank it was waiting for
// in the end (the peer it waited on may itself be waiting for another). A transport whose ranks
// share a store follows that chain there; the others name the peer waited on.
//
// Hosts: host_of_rank() says which ranks share a host (the process group runs the hierarchical
// collectives over it, algorithms/hier_pattern.h, and orders its rings host by host). Every rank
// of a group reports the same map: one entry per rank, hosts numbered 0, 1, ... in the order of
// their lowest rank. A transport that learns it says so (the TCP backend, from the host keys its
// set-up exchanges through the store: the ranks it joins through shared memory are exactly the
// ranks of one host); one that does not know says every rank is a host of its own.
//
// Thread-safety: isend/irecv/abort may be called from any thread; one Request is waited on by
// one thread at a time.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/errors.h"

namespace c10d::inline v1::transport {

using Clock = std::chrono::steady_clock;

// A message tag. Collectives use make_tag(group, sequence) so concurrent ops and subgroups
// never mix their bytes; point-to-point user tags live in their own space (user_tag).
using Tag = std::uint64_t;

// The peer of an any-source receive (irecv_any), where a rank is expected.
inline constexpr int kAnySource = -1;

inline constexpr Tag kUserTagBit = Tag{1} << 63;

// Group ids take the top 23 bits below the user bit, then 4 bits of lane and 4 of stage (below),
// sequence numbers the low 32 (they wrap, harmlessly: only ops in flight together must differ).
inline constexpr Tag kSequenceMask = (Tag{1} << 32) - 1;
constexpr Tag make_tag(std::uint32_t group, std::uint64_t sequence) {
  return (static_cast<Tag>(group & 0x7fffff) << 40) | (sequence & kSequenceMask);
}
// A collective that runs in stages of independent streams of messages (lanes: the ICI backend's
// plans) gives every lane of every stage a tag of its own, so two lanes' messages between the
// same two ranks never take each other's receives. Lane l (0 <= l < kMaxLanes) of stage s
// (0 <= s < kMaxStages) of the op tagged `tag` carries l + 1 in bits 36-39 and s in bits 32-35;
// tag_lane gives l back (-1 for a tag of no lane, entry_tag's included), lane_stage_tag the tag
// shared by the lanes of that stage, and lane_op_tag the op's own tag.
inline constexpr int kMaxLanes = 14;
inline constexpr int kMaxStages = 16;
constexpr Tag lane_tag(Tag tag, int stage, int lane) {
  return (tag & ~(Tag{0xff} << 32)) | (static_cast<Tag>(lane + 1) << 36) |
         (static_cast<Tag>(stage) << 32);
}
constexpr int tag_lane(Tag tag) {
  const int lane = static_cast<int>((tag >> 36) & 0xf) - 1;
  return lane < kMaxLanes ? lane : -1;  // entry_tag (below) is no lane
}
constexpr Tag lane_stage_tag(Tag tag) { return tag & ~(Tag{0xf} << 36); }
constexpr Tag lane_op_tag(Tag tag) { return tag & ~(Tag{0xff} << 32); }
// The entry check of a rooted collective (algorithms/entry_check.h) sends under the lane field's
// last value, which no lane takes (kMaxLanes stops below it): lane_op_tag gives the op's tag
// back, so the call notes (call_notes.h) take its messages for the op's.
constexpr Tag entry_tag(Tag tag) { return lane_op_tag(tag) | (Tag{0xf} << 36); }
constexpr bool is_entry_tag(Tag tag) { return ((tag >> 32) & 0xff) == 0xf0; }
constexpr Tag user_tag(std::uint32_t group, std::uint32_t tag) {
  return kUserTagBit | (static_cast<Tag>(group & 0x7fffff) << 40) | tag;
}
// Group ids stay below kMaxGroups; the bit above them marks a group's control messages (the
// DETAIL fingerprint exchange), so they never match the op they check.
inline constexpr std::uint32_t kMaxGroups = 1u << 22;
constexpr Tag control_tag(std::uint32_t group, std::uint64_t sequence) {
  return make_tag(group | kMaxGroups, sequence);
}

std::string tag_string(Tag tag);  // "group 3 seq 17" or "group 3 user tag 5"

// What a rank last heard from a peer: when the last frame (message header) from it arrived and
// its tag.
struct PeerActivity {
  bool known = false;  // false: nothing heard since the transport was set up
  Clock::duration ago{};
  Tag tag = 0;
};
// "last heard from it 4.9 s ago: a frame of group 0 seq 11", or "nothing heard from it since
// set-up". `frame` names the frame's op (e.g. "all_reduce #11"); empty: tag_string.
std::string heard_string(const PeerActivity& heard, std::string_view frame = {});

// The TimeoutError of a request that waited for `peer` past its deadline, and of a process
// group's op that timed out, naming the rank it found stalled in the end (peer -1: none, the
// ranks wait for each other).
class PeerTimeout : public TimeoutError {
 public:
  PeerTimeout(const std::string& what, int peer, PeerActivity heard = {})
      : TimeoutError(what), peer_(peer), heard_(heard) {}
  int peer() const { return peer_; }
  const PeerActivity& heard() const { return heard_; }

 private:
  int peer_;
  PeerActivity heard_;
};

// How an any-source receive names itself in errors: "rank 0 irecv from any rank (group 0 user
// tag 3, 8 bytes)", or with `via` ("shared memory") after the bytes.
std::string any_source_description(int rank, Tag tag, std::size_t bytes, std::string_view via = {});
// The PeerTimeout (peer() kAnySource) of the any-source receive `what` (as above), posted at
// `posted_at`, for which no rank sent a message before its deadline; `where` (" on the ICI
// fabric") says where it waited.
PeerTimeout any_source_timeout(std::string_view what, Tag tag, Clock::time_point posted_at,
                               std::string_view where = {});

// What find_stalled learned: the ranks that wait, each for the next, from the peer this rank
// waited for on, and the rank at the end of that chain.
struct StallReport {
  struct Hop {
    int rank = -1;
    int awaits = -1;    // the rank `rank` waits for
    std::string doing;  // its op, e.g. "all_reduce #12"
  };
  int suspect = -1;  // the rank that waits for no one known: the stalled one; -1: a cycle
  std::vector<Hop> chain;
  // The store did not answer, or failed on the way, so the chain could not be followed to its
  // end: `suspect` is only the last rank known to be waited on (on a host cut off from the
  // network the store is out of reach too; the store's host may be gone).
  bool store_silent = false;
};

class Request {
 public:
  virtual ~Request() = default;
  // True once the request completed; rethrows its error. Never blocks.
  virtual bool test() = 0;
  // Blocks until completion; throws the request's error, or TimeoutError at the deadline (the
  // request stays pending and may still be waited on).
  virtual void wait(Clock::time_point deadline) = 0;
  // For a receive that completed with a message: the rank that sent it (for irecv, its peer).
  // -1 before that, for a send, and for a part of an any-source receive that another part
  // completed (transport/matcher.h: SourceClaim).
  virtual int source() const { return -1; }
  // What this rank last heard from the request's peer, as its PeerTimeout says (known false:
  // nothing yet, an any-source receive, or a transport that keeps no track). Only reads: it moves
  // no bytes and changes nothing, so a caller may ask it of a pending request at any time.
  virtual PeerActivity heard() const { return {}; }
};

// Memory every rank of a transport reads (ShmTransport's, when the whole group shares a host):
// a small collective publishes each rank's bytes there and reads everyone's, with no message
// and no matching (algorithms/slot_all_reduce.h). Rounds are numbered by the calls: every rank
// must make the same calls, from one thread at a time.
class SharedSlots {
 public:
  virtual ~SharedSlots() = default;
  // The most bytes a rank publishes in one round.
  virtual std::size_t max_bytes() const = 0;
  // Publishes `mine` (at most max_bytes()) as this rank's part of the next round, for the op
  // `tag`, and waits until every rank published that round. `check` says what the op is (its
  // kind, dtype and count, say): a rank whose tag, check or size differ from this rank's fails
  // the round with a SlotMismatch naming it. PeerTimeout naming a rank that has not published
  // past `deadline`; the transport's failure once it is aborted.
  virtual void gather(Tag tag, std::uint64_t check, std::span<const std::byte> mine,
                      Clock::time_point deadline) = 0;
  // Rank `r`'s bytes of this rank's last round; valid until its next gather.
  virtual std::span<const std::byte> part(int r) const = 0;
  // Makes the caller the slots' one user (the group that owns the transport; not its
  // subgroups, which share it): true once, false after.
  bool claim() { return !claimed_.exchange(true, std::memory_order_acq_rel); }

 private:
  std::atomic<bool> claimed_{false};
};

// What every message of an op carries (Calls above); kUnchecked matches any.
using Call = std::uint64_t;
inline constexpr Call kUnchecked = 0;
// Whether a receive expecting `expected` may take a message of `sent`.
constexpr bool calls_agree(Call expected, Call sent) {
  return expected == sent || expected == kUnchecked || sent == kUnchecked;
}

// A receive of rank `self` with `tag` met a message from `peer` of another call (Calls above):
// this rank runs `expected` under the tag, the peer `received`. `outgoing`: the other way round,
// this rank's send met the peer's receive (the in-process transport, where a send completes only
// with its receive; over a wire the sender has moved on and learns of it from the receiver). Ranks
// as the transport numbers them (a subgroup's view: its parent's, as its timeouts name them).
class CallMismatch : public InvalidArgument {
 public:
  CallMismatch(const std::string& what, int self_rank, int peer_rank, Tag op_tag, Call mine,
               Call theirs, bool sent = false)
      : InvalidArgument(what),
        self(self_rank),
        peer(peer_rank),
        tag(op_tag),
        expected(mine),
        received(theirs),
        outgoing(sent) {}
  int self;
  int peer;
  Tag tag;
  Call expected;
  Call received;
  bool outgoing;
};
// The CallMismatch of `request` (how it names itself: "rank 3 irecv from rank 2 (group 0 seq 5,
// 4096 bytes)"), whose call `mine` met rank `peer`'s `theirs`.
std::exception_ptr call_mismatch(std::string_view request, int self, int peer, Tag tag, Call mine,
                                 Call theirs, bool outgoing = false);
// Whether a receive of call `mine` and `buffer` bytes can take a message of call `theirs` and
// `bytes` bytes (receive_refusal says why not).
constexpr bool receive_fits(Call mine, Call theirs, std::uint64_t buffer, std::uint64_t bytes) {
  return calls_agree(mine, theirs) && buffer == bytes;
}
// Why the receive `request` of rank `self` (call `mine`, `buffer` bytes) cannot take the message
// of rank `sender` under `tag` (call `theirs`, `bytes` bytes): another call (checked first), or
// another size (an InvalidArgument naming both); null when it can (receive_fits). Every
// transport's matching asks it (Matcher::refuse), and drops the message when it refuses.
std::exception_ptr receive_refusal(std::string_view request, int self, int sender, Tag tag,
                                   Call mine, Call theirs, std::uint64_t buffer,
                                   std::uint64_t bytes);

// A round of SharedSlots whose ranks did not publish the same op: `peer` published `tag` with
// `check` and `bytes` where this rank expected its own.
class SlotMismatch : public InvalidArgument {
 public:
  SlotMismatch(const std::string& what, int from, Tag their_tag, std::uint64_t their_check,
               std::uint64_t their_bytes)
      : InvalidArgument(what), peer(from), tag(their_tag), check(their_check), bytes(their_bytes) {}
  int peer;
  Tag tag;
  std::uint64_t check;
  std::uint64_t bytes;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // A message of the collective whose call is `call` (Calls above), and a receive of one.
  virtual std::unique_ptr<Request> isend(int peer, Tag tag, std::span<const std::byte> data,
                                         Call call) = 0;
  virtual std::unique_ptr<Request> irecv(int peer, Tag tag, std::span<std::byte> data,
                                         Call call) = 0;
  // The same, unchecked (kUnchecked): point-to-point and control messages. A transport says
  // `using Transport::isend; using Transport::irecv;` so that its own type offers these too.
  std::unique_ptr<Request> isend(int peer, Tag tag, std::span<const std::byte> data) {
    return isend(peer, tag, data, kUnchecked);
  }
  std::unique_ptr<Request> irecv(int peer, Tag tag, std::span<std::byte> data) {
    return irecv(peer, tag, data, kUnchecked);
  }
  // A receive of the next message with `tag` from any peer (see Any source above).
  virtual std::unique_ptr<Request> irecv_any(Tag tag, std::span<std::byte> data) = 0;

  // Fails every pending and later request of this rank with `reason`, and releases every
  // waiter. Idempotent: the first reason sticks.
  virtual void abort(std::exception_ptr reason) = 0;

  // The host of each rank (Hosts above). Default: every rank a host of its own.
  virtual std::vector<int> host_of_rank() const;

  // Memory every rank of this transport reads (SharedSlots above), or null (the default).
  virtual SharedSlots* shared_slots() { return nullptr; }

  // This rank's `doing` (e.g. "all_reduce #12") timed out waiting for `peer`: records that where
  // the other ranks can read it and follows their records (peer waits for Q, Q for R...) to the
  // rank that waits for no one, waiting up to `window` for ranks that time out a little later.
  // Blocks up to about `window`. Default: `peer`, with no chain.
  virtual StallReport find_stalled(int peer, std::string_view doing,
                                   std::chrono::milliseconds window) {
    (void)doing;
    (void)window;
    return {peer, {}};
  }
};

// Host ids renumbered 0, 1, ... in the order of their first appearance (Hosts above); any ids
// >= 0 in. InvalidArgument for a negative one.
std::vector<int> number_hosts(const std::vector<int>& ids);
// Every rank of `size` a host of its own: 0, 1, ..., size-1.
std::vector<int> one_host_each(int size);

// Waits for every request in order, each against the same deadline.
void wait_all(std::span<const std::unique_ptr<Request>> requests, Clock::time_point deadline);

}  // namespace c10d::inline v1::transport
