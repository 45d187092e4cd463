// ShmTransport: the Transport of transport.h between the ranks of one host, through POSIX shared
// memory. The TCP backend sends to its same-host peers this way (routed_transport.h picks the
// channel per peer) and keeps TCP for the other hosts: over loopback, TCP moves about 3 GB/s per
// direction and wakes a sleeping reader in tens of µs, while a ring in shared memory costs two
// memcpys and a poll of one cache line.
//
// Set-up (in the constructor, every rank of the group takes part; bounded by options.timeout):
// each rank publishes its host key (shm_host_key) in the store under
// "<group_name>/shm/<N>/host/<rank>" (N: the set-up's attempt number, setup_watch.h, so that keys
// an earlier group of this name left are never read); the ranks whose keys equal this rank's are
// its same-host peers (host_map.h; host_of_rank() reports the whole map). A rank with such peers
// creates its segment of incoming rings, publishes its name, maps each same-host peer's segment
// (checking its size, then magic, version, rank, ring count, ring size and pid, and naming both
// sides' values on a mismatch), says so in the store, and unlinks its own name once every same-host
// peer has mapped it, so nothing is left in /dev/shm after set-up. A rank killed before that cannot
// unlink: its segment's name says which process owned it (transport/shared_memory.h), and every
// set-up on the host first reclaims the segments of processes that are gone, so a crashed job's
// leftovers never fill /dev/shm. A rank whose set-up fails (a bad C10D_SHM_RING_BYTES, no room in
// /dev/shm) records why in the store, and the others' waits fail within a fraction of a second
// naming it (setup_watch.h).
//
// Segment "/c10d-shm-<pid namespace>-<pid>-<start time>-<random>", one per rank, mode 0600
// (host byte order, little-endian; the structs and the check of a message header are in
// shm_layout.h):
//
//   offset 0   SegmentHeader (4096 bytes)
//              +0  u32 magic "C1SM"   +4  u32 version (5)   +8  i32 rank   +12 u32 rings
//              +16 u64 ring bytes (a power of two)          +24 i32 pid
//              +32 u64 probe address  +40 u64 probe value: where a peer reads this process at
//                   set-up to learn whether it can copy single-copy messages out of it (0: none)
//              +64  atomic u32 doorbell (own cache line): bumped by every rank that wrote into
//                   one of this rank's rings or freed room in a ring this rank writes; futex word
//              +128 atomic u32 sleepers: threads of this rank asleep on the doorbell
//              +192 atomic u32 closed: set as this rank closes its transport in order
//              +256 atomic u64 posted tag, +264 atomic u64 posted call: the last collective this
//                   rank posted a request of (transport.h: Calls), for the peers' shared-slot
//                   rounds (shm_slots.cc)
//   4096 + i * (128 + ring bytes)   ring i: the bytes from the i-th other same-host rank (in
//              ascending rank order) to this one; written only by that rank, read only by this;
//              a transport/shm_ring.h ring:
//              +0  atomic u64 head: bytes consumed (the reader's cache line)
//              +64 atomic u64 tail: bytes produced (the writer's)
//              +72 atomic u32 writer waiting: always 0 here (a reader rings the doorbell anyway)
//              +80 atomic u64 writer word: the single-copy messages below this sequence number
//                  are taken back (shm_cma.cc)
//              +128 data, wrapping at the ring size
//
// A ring is a byte stream of messages in send order: a 64-byte MessageHeader (u32 magic "C1SH",
// u32 version, u64 tag, u64 payload bytes, u64 sequence number per pair, u64 call (transport.h:
// Calls), u64 address, u64 acked, i32 pid, u16 kind, u16 status) and then the payload, padded to 64
// bytes so that every header starts a cache line. A message may be larger than its ring: the writer
// copies it in chunks as room appears and the reader copies it out as it arrives, each publishing
// its position per chunk (kChunk), so both copies overlap.
//
// Single-copy (shm_cma.cc): a message of single_copy_min_bytes or more to a peer that can read
// this process (set-up probes each direction with process_vm_readv; C10D_SHM_CMA=0 turns it off)
// is only a header in the ring, of kind kSingleCopy, naming the sender's pid and buffer; the
// receiver copies the bytes straight from there into its receive's buffer, a chunk per progress
// turn, and answers with a kAck header in its own ring, on which the send completes.
//
// Matching is transport.h's, by transport/matcher.h (any-source receives, from any same-host peer,
// included); a receive that meets a message of another call fails with a CallMismatch
// (transport.h: Calls), before sizes are compared. A message whose receive is not posted yet is
// copied out of the ring into a buffer of its own (so that it never blocks the messages behind it),
// in chunks allocated as its bytes come out (never at the size its header claims:
// transport/unexpected_buffer.h), and from there when the receive is posted; if the receive comes
// while the message is still arriving, the rest goes straight into its buffer. A single-copy
// message whose receive is not posted waits as its header alone for 20 ms, then is copied into such
// a buffer too. What one peer's unexpected messages hold is bounded (max_unexpected_bytes): a peer
// past it fails the transport with a NetworkError naming it, the bytes and the limit. A send
// completes once its last byte is in the ring (single-copy: once the receiver copied it); a receive
// once its last byte is in the caller's buffer.
//
// Progress and threads: no thread of its own. Whoever posts, tests or waits moves the bytes of
// every pair of this rank (one mutex, taken with try_lock by waiters). A waiter polls while
// bytes moved within the last kHotWindow (1 ms) when the host has a core per local process
// (core/host.h), else yielding between polls until core::spin_window(); then it sleeps on
// its segment's doorbell (a futex), which every peer that writes to it or frees room for it
// rings (a system call only when someone sleeps).
//
// Failure: abort(reason) fails every pending and later request and wakes this rank's sleepers.
// The channel cannot see a peer that dies by itself, and the same-host ranks have no TCP
// connection between them: a sleeping waiter checks every 100 ms (the transport's clock) that
// each same-host peer's process still exists, unless the peer closed its transport in order
// (`closed`); the TCP transport passes on the failures it sees, its own and those other ranks
// recorded in the store (TCPTransportOptions::on_abort, pending_elsewhere). A message header
// with the wrong magic, version, sequence number or kind, claiming more than 2^40 bytes, or a
// single-copy header this pair did not agree on (or naming another pid, or an empty or wrapping
// span), aborts the transport with a NetworkError naming the peer; a single-copy span that cannot
// be read fails its receive, naming the peer, the span and the errno. A request that times out
// throws transport::PeerTimeout with when this rank last read a message header from the peer and
// its tag.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "backends/common/setup_watch.h"
#include "c10d/store.h"
#include "c10d/types.h"
#include "transport/matcher.h"
#include "transport/transport.h"

namespace c10d::inline v1::gloo_like {

struct ShmTransportOptions {
  std::string group_name = "default";
  Milliseconds timeout = kDefaultTimeout;  // bounds the set-up through the store
  // Per ordered pair of same-host ranks; a power of two from 64 KiB to 1 GiB. 0:
  // C10D_SHM_RING_BYTES (the same bounds), else 1 MiB (8 ranks on a host then hold 56 MiB of
  // /dev/shm).
  std::size_t ring_bytes = 0;
  // The most the messages of one peer whose receive is not posted yet may hold (their bytes plus
  // 128 per message); past it the transport fails. 0: C10D_MAX_UNEXPECTED_BYTES, else 1 GiB.
  std::uint64_t max_unexpected_bytes = 0;
  // Where the set-up's waits look for another rank's set-up failure, and where this rank records
  // its own (setup_watch.h). Null: the transport makes its own.
  std::shared_ptr<backends::SetupWatch> setup_watch;
  // This rank's host key, compared with the other ranks' to find same-host peers. Empty:
  // shm_host_key() (tests give threads of one process keys of their own, as separate hosts).
  std::string host_key;
  // The arrival stamps (transport/matcher.h) this transport shares with the TCP transport of the
  // same rank under a RoutedTransport (routed_transport.h compares them); null: its own.
  std::shared_ptr<transport::ArrivalClock> arrivals;
  // Messages of single_copy_min_bytes and more to a peer that can read this process go
  // single-copy: the receiver copies them straight out of the sender's buffer with
  // process_vm_readv, and the send completes once it did (shm_cma.cc). nullopt: C10D_SHM_CMA,
  // else on. A pair whose set-up probe fails (permissions, seccomp) uses the ring.
  std::optional<bool> single_copy;
  std::size_t single_copy_min_bytes = 0;  // 0: kDefaultSingleCopyMinBytes
};

// The size from which messages go single-copy by default: above the algorithms' 1 MiB pipeline
// segments, which a ring moves faster than process_vm_readv pins 4 KiB pages (docs/benchmarks.md).
inline constexpr std::size_t kDefaultSingleCopyMinBytes = std::size_t{2} << 20;

// This host's identity for finding same-host peers: C10D_SHM_HOST when set (tests use it to make
// one machine look like several), else the host name, the kernel's boot id and the device and
// inode of /dev/shm (so containers with their own /dev/shm count as different hosts).
std::string shm_host_key();
// This kernel's boot id (/proc/sys/kernel/random/boot_id; empty where it cannot be read).
const std::string& boot_id();
// The boot id in a key shm_host_key() made; empty for a key of another shape (C10D_SHM_HOST's,
// or none).
std::string_view boot_id_of_host_key(std::string_view key);

// Whether the TCP backend sends to same-host peers through shared memory: C10D_SHM, default on
// ("0", "false", "no" or "off" turn it off and send everything over TCP; anything but a boolean
// is an InvalidArgument naming it).
bool shm_enabled_from_env();

class ShmTransport final : public transport::Transport {
 public:
  ShmTransport(std::shared_ptr<Store> store, int rank, int world_size,
               ShmTransportOptions options = {});
  ~ShmTransport() override;
  ShmTransport(const ShmTransport&) = delete;
  ShmTransport& operator=(const ShmTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return world_size_; }
  // Whether `peer` is another rank of this host: only those can be sent to or received from.
  bool serves(int peer) const;
  int same_host_peers() const;
  // The group's host map from the host keys the set-up exchanged (host_map.h): serves(peer)
  // exactly when the peer's host is this rank's.
  std::vector<int> host_of_rank() const override;
  // Every rank's slots (transport::SharedSlots, shm_slots.cc), when every rank of the transport
  // is on this host; else null.
  transport::SharedSlots* shared_slots() override;
  // Whether messages of single_copy_min_bytes and more to `peer` go single-copy (set-up's probe
  // found that it can read this process).
  bool single_copy_to(int peer) const;
  // Whether a request of this transport is still pending (routed_transport.h polls this
  // transport while it waits on the other one, so that no pair stalls behind a full ring).
  bool has_pending() const;
  // Moves whatever bytes can move now; true when some did.
  bool progress();
  // Moves bytes as a waiter does, polling and then sleeping on this rank's doorbell, until
  // done() holds (true) or `deadline` (false). done() is called often, from this thread. Only
  // with same-host peers (same_host_peers() > 0): without, there is no doorbell to sleep on.
  bool poll_until(const std::function<bool()>& done, transport::Clock::time_point deadline);
  // Rings this rank's doorbell: a thread in poll_until looks at done() again (for a done() that
  // another transport's thread makes true). Lock-free; may be called under any lock.
  void wake();
  // Whether a same-host peer has not closed its transport yet (and so may still send). A peer
  // that closes rings this rank's doorbell. Lock-free; cheap enough for a poll_until's done().
  bool peers_open() const;

  using transport::Transport::irecv;
  using transport::Transport::isend;
  std::unique_ptr<transport::Request> isend(int peer, transport::Tag tag,
                                            std::span<const std::byte> data,
                                            transport::Call call) override;
  std::unique_ptr<transport::Request> irecv(int peer, transport::Tag tag, std::span<std::byte> data,
                                            transport::Call call) override;
  // From any same-host peer.
  std::unique_ptr<transport::Request> irecv_any(transport::Tag tag,
                                                std::span<std::byte> data) override;
  // A part of an any-source receive that another transport takes part in too, sharing `claim`
  // (routed_transport.h; transport/matcher.h: SourceClaim).
  std::unique_ptr<transport::Request> irecv_any(transport::Tag tag, std::span<std::byte> data,
                                                std::shared_ptr<transport::SourceClaim> claim);
  // The arrival stamp (transport/matcher.h) of the message an any-source receive with `tag`
  // would take now; nullopt when none waits.
  std::optional<std::uint64_t> earliest_unexpected(transport::Tag tag) const;
  // ShmTransportOptions::arrivals.
  std::shared_ptr<transport::ArrivalClock> arrivals() const;
  void abort(std::exception_ptr reason) override;
  // Closes in order, once (the destructor calls it too): writes the acknowledgements this rank
  // owes while its peers make room (up to 5 s: a sender waits for them), sets the segment's
  // closed flag (peers take this rank's end for a finish, and fail sends to it that nothing
  // answered), and fails whatever is still pending. A RoutedTransport closes this side before
  // its TCP side, whose close would abort it.
  void close();

  struct Impl;

 private:
  const int rank_;
  const int world_size_;
  std::shared_ptr<Impl> impl_;
};

}  // namespace c10d::inline v1::gloo_like
