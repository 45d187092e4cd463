// ShmTransport (shm_transport.h) over the layout of shm_layout.h.
#include "backends/gloo_like/shm_transport.h"

#include <fmt/format.h>
#include <sched.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <deque>
#include <fstream>
#include <limits>
#include <mutex>
#include <random>
#include <vector>

#include "backends/gloo_like/shm_layout.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "core/fault_point.h"
#include "core/host.h"
#include "core/parse.h"
#include "core/spin_wait.h"
#include "transport/matcher.h"
#include "transport/shared_memory.h"
#include "transport/unexpected_buffer.h"

namespace c10d::inline v1::gloo_like {

namespace {

using namespace shm;
using transport::Clock;
using transport::Tag;

constexpr std::size_t kDefaultRingBytes = std::size_t{1} << 20;
constexpr std::size_t kMinRingBytes = std::size_t{64} << 10;
constexpr std::size_t kMaxRingBytes = std::size_t{1} << 30;
// The segment names' kind (shared_memory.h: "/c10d-shm-<owner>-<nonce>").
constexpr std::string_view kSegmentKind = "c10d-shm";
// Bytes copied between publications of a ring position: the other side starts on a chunk as
// soon as it is in, so a large message's two copies overlap.
constexpr std::uint64_t kChunk = std::uint64_t{128} << 10;
// A waiter keeps polling this long after bytes last moved when it has a core of its own
// (yielding the core between polls after core::kHotSpin: see poll_until).
constexpr auto kHotWindow = std::chrono::milliseconds(1);
// The longest a waiter sleeps on its doorbell before looking at its peers' processes.
constexpr auto kSleepSlice = std::chrono::milliseconds(100);

using transport::ShmRing;

// Bumps `h`'s doorbell, and wakes its sleepers if it has any.
void ring_doorbell(SegmentHeader* h) { transport::ring_doorbell(h->doorbell, h->sleepers); }

struct Op {
  bool is_send = false;
  int self = 0;
  int peer = 0;  // transport::kAnySource for an any-source receive
  Tag tag = 0;
  const std::byte* send_data = nullptr;  // null once abandoned: the rest goes out unwritten
  std::byte* recv_data = nullptr;
  std::size_t bytes = 0;
  Clock::time_point posted_at = Clock::now();
  std::atomic<bool> done{false};
  std::exception_ptr error;     // written before `done`
  std::atomic<int> source{-1};  // a receive's sender, set under Impl::mu when it matched
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
  Unexpected(int from, std::uint64_t size) : peer(from), data(size) {}
  const int peer;
  transport::UnexpectedBuffer data;
  std::uint64_t got = 0;  // bytes in `data` so far
  // What it counts against the peer's limit (Impl::matcher's hold) while it is queued.
  std::uint64_t held() const { return data.allocated() + transport::kUnexpectedOverheadBytes; }
};

struct Peer {
  int rank = -1;
  pid_t pid = 0;
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
};

std::size_t ring_bytes_from(std::size_t requested) {
  if (requested == 0) {
    const std::size_t bytes = core::env_uint("C10D_SHM_RING_BYTES", kMinRingBytes, kMaxRingBytes)
                                  .value_or(kDefaultRingBytes);
    C10D_CHECK(std::has_single_bit(bytes),
               "C10D_SHM_RING_BYTES={}: the shared-memory ring size must be a power of two in "
               "[{}, {}]",
               bytes, kMinRingBytes, kMaxRingBytes);
    return bytes;
  }
  C10D_CHECK(
      requested >= kMinRingBytes && requested <= kMaxRingBytes && std::has_single_bit(requested),
      "ShmTransportOptions::ring_bytes {}: the shared-memory ring size must be a power of "
      "two in [{}, {}]",
      requested, kMinRingBytes, kMaxRingBytes);
  return requested;
}

// Bytes of a segment of `rings` rings of `ring_bytes`, or InvalidArgument should that not fit.
std::size_t segment_bytes(std::size_t rings, std::size_t ring_bytes) {
  const auto bytes =
      core::checked_mul_add(rings, kRingHeaderBytes + ring_bytes, kSegmentHeaderBytes);
  C10D_CHECK(bytes.has_value(),
             "a shared-memory segment of {} rings of {} bytes does not fit in {} bytes", rings,
             ring_bytes, std::numeric_limits<std::size_t>::max());
  return *bytes;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

std::string shm_host_key() {
  if (const char* v = std::getenv("C10D_SHM_HOST"); v != nullptr && *v != '\0') return v;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0) return "";  // no POSIX shared memory here
  return fmt::format("{}|{}|{}:{}", host, read_first_line("/proc/sys/kernel/random/boot_id"),
                     st.st_dev, st.st_ino);
}

bool shm_enabled_from_env() { return core::env_flag("C10D_SHM").value_or(true); }

struct ShmTransport::Impl {
  int rank = 0;
  std::string who;  // "rank 3 (shared memory)": what this rank's errors open with
  int world = 0;
  std::uint64_t ring_bytes = 0;
  std::uint64_t max_unexpected = transport::kDefaultMaxUnexpectedBytes;
  transport::SharedSegment own;
  SegmentHeader* own_header = nullptr;
  std::vector<int> peer_index;  // by rank: index into peers, or -1
  std::deque<Peer> peers;       // stable addresses

  mutable std::mutex mu;
  std::exception_ptr failure;  // GUARDED_BY(mu)
  // Posted receives and unexpected messages, by rank (only same-host ones send here);
  // GUARDED_BY(mu). A message stays queued while it arrives, until a receive takes it.
  transport::Matcher<std::shared_ptr<Op>, std::shared_ptr<Unexpected>> matcher;

  Peer& peer(int r) {
    return peers[static_cast<std::size_t>(peer_index[static_cast<std::size_t>(r)])];
  }

  // What this rank last heard from same-host peer `r` (transport.h: PeerActivity). Only reads.
  transport::PeerActivity heard_from(int r) const {
    std::lock_guard lock(mu);
    const Peer& p = peers[static_cast<std::size_t>(peer_index[static_cast<std::size_t>(r)])];
    transport::PeerActivity heard = p.heard;
    if (heard.known) heard.ago = Clock::now() - p.heard_at;
    return heard;
  }

  // ---- Writing ----

  // Under mu: writes the peer's queued sends while its ring has room. True when bytes moved.
  bool write_locked(Peer& p) {
    if (p.sends.empty()) return false;
    ShmRing::Writer w = p.out.writer();
    bool moved = false;
    while (!p.sends.empty()) {
      Op& op = *p.sends.front();
      const std::uint64_t total = kMessageHeaderBytes + padded(op.bytes);
      if (p.send_pos == 0) {
        if (w.room() < kMessageHeaderBytes) break;
        MessageHeader h;
        h.tag = op.tag;
        h.bytes = op.bytes;
        h.sequence = p.next_sequence++;
        w.write(std::as_bytes(std::span(&h, 1)));  // published with the payload's first chunk
        p.send_pos = kMessageHeaderBytes;
        moved = true;
      }
      while (p.send_pos < total) {
        const std::uint64_t room = w.room();
        if (room == 0) break;
        const std::uint64_t n = std::min({room, total - p.send_pos, kChunk});
        const std::uint64_t at = p.send_pos - kMessageHeaderBytes;  // in the padded payload
        std::uint64_t real = 0;
        if (op.send_data != nullptr && at < op.bytes) {
          real = std::min<std::uint64_t>(n, op.bytes - at);
          w.write({op.send_data + at, static_cast<std::size_t>(real)});
        }
        w.skip(n - real);  // padding, or what an abandoned send no longer has
        p.send_pos += n;
        w.publish();
        moved = true;
      }
      if (p.send_pos < total) break;  // the ring is full
      op.complete();
      p.sends.pop_front();
      p.send_pos = 0;
    }
    if (moved) {
      w.publish();
      ring_doorbell(p.header);
    }
    return moved;
  }

  // ---- Reading ----

  // Under mu: a message from `p` begins (its header checked). Matches it with the oldest posted
  // receive of its tag, else keeps it as unexpected: false when that broke the peer's limit
  // (the transport has failed).
  bool begin_message_locked(Peer& p, const MessageHeader& h) {
    p.reading = true;
    p.reading_bytes = h.bytes;
    p.reading_pos = 0;
    std::optional<std::shared_ptr<Op>> recv = matcher.match_claiming(
        p.rank, h.tag, [](const std::shared_ptr<Op>& lost) { lost->complete(); });
    if (!recv) {
      if (!hold_locked(p, transport::kUnexpectedOverheadBytes)) return false;
      auto u = std::make_shared<Unexpected>(p.rank, h.bytes);
      matcher.push_unexpected(p.rank, h.tag, u);
      p.reading_unexpected = std::move(u);
      return true;
    }
    std::shared_ptr<Op> op = std::move(*recv);
    op->source.store(p.rank, std::memory_order_relaxed);
    if (op->bytes != h.bytes) {
      op->complete(size_mismatch(*op, p.rank, h.bytes));  // the message is dropped
      return true;
    }
    p.reading_op = std::move(op);
    return true;
  }

  // Under mu: `bytes` more held for `p`'s unexpected messages; past the limit the transport
  // fails, naming the peer (false).
  bool hold_locked(Peer& p, std::uint64_t bytes) {
    if (auto refused = matcher.hold(p.rank, bytes, who)) {
      abort_locked(std::move(refused));
      return false;
    }
    return true;
  }

  // Under mu: copies the next `n` payload bytes of `r` (not consumed) into the arriving
  // unexpected message, from its byte `at` on, allocating its chunks as they fill. False when the
  // limit broke.
  bool copy_to_unexpected_locked(Peer& p, const ShmRing::Reader& r, std::uint64_t at,
                                 std::uint64_t n) {
    Unexpected& u = *p.reading_unexpected;
    std::uint64_t offset = 0;
    while (n > 0) {
      if (!hold_locked(p, u.data.allocation_at(at))) return false;
      const auto room = u.data.span_at(at);
      const std::uint64_t k = std::min<std::uint64_t>(n, room.size());
      r.peek(offset, room.first(static_cast<std::size_t>(k)));
      offset += k;
      at += k;
      n -= k;
      u.got = at;
    }
    return true;
  }

  std::exception_ptr size_mismatch(const Op& op, int sender, std::uint64_t sent) const {
    return C10D_ERROR(InvalidArgument,
                      "{}: the message from rank {} has {} bytes, the receive buffer {}",
                      op.describe(), sender, sent, op.bytes);
  }

  // Under mu: reads what has arrived from `p`. True when bytes moved.
  bool read_locked(Peer& p) {
    ShmRing::Reader r = p.in.reader();
    bool moved = false;
    while (r.available() != 0) {
      if (!p.reading) {
        if (r.available() < kMessageHeaderBytes) break;
        MessageHeader h;
        r.peek(0, std::as_writable_bytes(std::span(&h, 1)));
        if (const std::string bad = check_message_header(h, p.next_in_sequence); !bad.empty()) {
          abort_locked(C10D_ERROR(
              NetworkError, "rank {}: corrupt message header from rank {} in shared memory: {}",
              rank, p.rank, bad));
          return true;
        }
        ++p.next_in_sequence;
        r.skip(kMessageHeaderBytes);
        moved = true;
        p.heard = {true, {}, h.tag};
        p.heard_at = Clock::now();
        if (!begin_message_locked(p, h)) return true;
      }
      const std::uint64_t total = padded(p.reading_bytes);
      while (p.reading_pos < total && r.available() != 0) {
        const std::uint64_t n = std::min({r.available(), total - p.reading_pos, kChunk});
        const std::uint64_t at = p.reading_pos;
        if (at < p.reading_bytes) {
          const std::uint64_t real = std::min<std::uint64_t>(n, p.reading_bytes - at);
          if (p.reading_op) {
            r.peek(0, {p.reading_op->recv_data + at, static_cast<std::size_t>(real)});
          } else if (p.reading_unexpected && !copy_to_unexpected_locked(p, r, at, real)) {
            return true;
          }
        }
        r.skip(n);  // padding included
        p.reading_pos += n;
        r.publish();
        moved = true;
      }
      if (p.reading_pos < total) break;
      if (p.reading_op) p.reading_op->complete();
      p.reading_op.reset();
      p.reading_unexpected.reset();
      p.reading = false;
    }
    if (moved) {
      r.publish();
      ring_doorbell(p.header);  // its writer may be waiting for room
    }
    return moved;
  }

  // Under mu.
  bool progress_locked() {
    if (failure) return false;
    bool moved = false;
    for (Peer& p : peers) {
      moved |= write_locked(p);
      if (failure) break;
      moved |= read_locked(p);
      if (failure) break;
    }
    // A thread of this rank may sleep on a request this one completed.
    if (moved && own_header->sleepers.load(std::memory_order_seq_cst) != 0) {
      ring_doorbell(own_header);
    }
    return moved;
  }

  bool progress() {
    std::unique_lock lock(mu, std::try_to_lock);
    return lock.owns_lock() && progress_locked();
  }

  // ---- Posting ----

  // Under mu: false, with the request failed, once the transport has failed.
  bool admit_locked(Op& op) {
    if (failure) op.complete(failure);
    return !failure;
  }

  std::shared_ptr<Op> post_send(int peer_rank, Tag tag, std::span<const std::byte> data) {
    auto op = make_op(true, peer_rank, tag, data.size());
    op->send_data = data.data();
    std::lock_guard lock(mu);
    if (!admit_locked(*op)) return op;
    Peer& p = peer(peer_rank);
    p.sends.push_back(op);
    write_locked(p);
    return op;
  }

  // A receive from `peer_rank` (kAnySource: any same-host rank); `claim`: see Op::claim.
  std::shared_ptr<Op> post_recv(int peer_rank, Tag tag, std::span<std::byte> data,
                                std::shared_ptr<transport::SourceClaim> claim = nullptr) {
    auto op = make_op(false, peer_rank, tag, data.size());
    op->recv_data = data.data();
    op->claim = std::move(claim);
    std::lock_guard lock(mu);
    if (!admit_locked(*op)) return op;
    if (op->any_source() && peers.empty()) {
      op->complete(C10D_ERROR(
          NetworkError, "{}: this rank has no same-host peer that could send it", op->describe()));
      return op;
    }
    if (op->claim && op->claim->taken_by_other(op.get())) {
      op->complete();  // the receive completed on the other transport
      return op;
    }
    const auto found = matcher.find_unexpected(peer_rank, tag);
    if (!found) {
      matcher.post(peer_rank, tag, op);
      if (op->any_source()) {
        for (Peer& p : peers) read_locked(p);
      } else {
        read_locked(peer(peer_rank));
      }
      return op;
    }
    if (op->claim && !op->claim->take(op.get())) {
      op->complete();  // the other part took the claim just now; the message stays
      return op;
    }
    Peer& p = peer(found->peer);
    std::shared_ptr<Unexpected> u = matcher.take(*found);
    matcher.release(p.rank, u->held());
    op->source.store(p.rank, std::memory_order_relaxed);
    const bool arriving = p.reading_unexpected == u;
    if (u->data.size() != op->bytes) {
      if (arriving) p.reading_unexpected.reset();  // the rest is dropped as it comes
      op->complete(size_mismatch(*op, p.rank, u->data.size()));
      return op;
    }
    u->data.copy_to({op->recv_data, static_cast<std::size_t>(u->got)});
    if (arriving) {  // the rest goes straight into the receive's buffer
      p.reading_unexpected.reset();
      p.reading_op = op;
      read_locked(p);
    } else {
      op->complete();
    }
    return op;
  }

  std::shared_ptr<Op> make_op(bool is_send, int peer_rank, Tag tag, std::size_t bytes) const {
    C10D_CHECK((!is_send && peer_rank == transport::kAnySource) ||
                   (peer_rank >= 0 && peer_rank < world &&
                    peer_index[static_cast<std::size_t>(peer_rank)] >= 0),
               "rank {}: rank {} is not a same-host peer of this shared-memory transport", rank,
               peer_rank);
    auto op = std::make_shared<Op>();
    op->is_send = is_send;
    op->self = rank;
    op->peer = peer_rank;
    op->tag = tag;
    op->bytes = bytes;
    return op;
  }

  // A request dropped before it completed: its buffer may go away. A send partly in the ring
  // goes on with unwritten bytes (the stream must stay framed); a receive being read drops the
  // rest of its message.
  void cancel(const std::shared_ptr<Op>& op) {
    if (op->done.load(std::memory_order_acquire)) return;
    std::lock_guard lock(mu);
    if (op->done.load(std::memory_order_relaxed)) return;
    if (op->is_send) {
      Peer& p = peer(op->peer);
      if (!p.sends.empty() && p.sends.front() == op && p.send_pos > 0) {
        op->send_data = nullptr;
        return;
      }
      std::erase(p.sends, op);
      return;
    }
    // Matched and not done: its message is being read into it.
    if (const int from = op->source.load(std::memory_order_relaxed); from >= 0) {
      Peer& p = peer(from);
      if (p.reading_op == op) p.reading_op.reset();
      return;
    }
    matcher.cancel(op->peer, op);
  }

  // ---- Failure ----

  void abort_locked(std::exception_ptr reason) {
    if (failure) return;
    failure = std::move(reason);
    matcher.take_all_receives([&](const std::shared_ptr<Op>& op) { op->complete(failure); });
    for (Peer& p : peers) {
      for (auto& op : p.sends) op->complete(failure);
      if (p.reading_op) p.reading_op->complete(failure);
      p.sends.clear();
      p.reading_op.reset();
    }
    if (own_header != nullptr) ring_doorbell(own_header);
  }

  // A same-host peer whose process is gone, as an error; null when all are there.
  std::exception_ptr lost_peer() const {
    for (const Peer& p : peers) {
      if (::kill(p.pid, 0) != 0 && errno == ESRCH) {
        return C10D_ERROR(NetworkError, "rank {}: same-host peer rank {} (pid {}) is gone", rank,
                          p.rank, p.pid);
      }
    }
    return nullptr;
  }

  // Sleeps on this rank's doorbell until a peer rings it or `until`, unless progress is possible
  // right now or `done` holds.
  template <typename Done>
  void sleep(Done& done, Clock::time_point until) {
    const std::uint32_t bell = own_header->doorbell.load(std::memory_order_seq_cst);
    own_header->sleepers.fetch_add(1, std::memory_order_seq_cst);
    if (!progress() && !done()) {
      const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now());
      if (left.count() > 0) transport::futex_wait(own_header->doorbell, bell, left);
    }
    own_header->sleepers.fetch_sub(1, std::memory_order_seq_cst);
  }

  void wait(Op& op, Clock::time_point deadline) {
    if (!poll_until([&] { return op.done.load(std::memory_order_acquire); }, deadline)) {
      const auto now = Clock::now();
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(now - op.posted_at).count();
      if (op.any_source()) throw transport::any_source_timeout(op.describe(), op.tag, op.posted_at);
      const transport::PeerActivity heard = heard_from(op.peer);
      throw transport::PeerTimeout(
          core::with_location(__FILE__, __LINE__,
                              fmt::format("{} timed out: not done {} ms after posting; {}",
                                          op.describe(), ms, transport::heard_string(heard))),
          op.peer, heard);
    }
    if (op.error) std::rethrow_exception(op.error);
  }

  // Moves bytes, polling and then sleeping on the doorbell, until `done` holds (true) or the
  // deadline passes (false). A template, so that a wait's done() (an atomic load) is inlined into
  // every poll turn; ShmTransport::poll_until passes its std::function.
  template <typename Done>
  bool poll_until(Done&& done, Clock::time_point deadline) {
    // Where processes share cores a waiter yields between polls at once (as core::hot_spin).
    const bool hot = core::has_own_core();
    const auto hot_window =
        hot ? std::chrono::microseconds(kHotWindow) : std::chrono::microseconds(0);
    auto last_moved = Clock::now();
    auto next_liveness = last_moved + kSleepSlice;
    bool moved = false;
    for (unsigned polls = 1; !done(); ++polls) {
      moved |= progress();
      if (done()) break;
      if (polls % 16 != 0) continue;
      auto now = Clock::now();
      if (moved) last_moved = now;
      moved = false;
      if (now >= deadline) return false;
      const auto idle = now - last_moved;
      // Past the hot spin a poller yields between polls: the peer may be waiting to run on this
      // very core (another process took the other one, or the affinity says so), and a poller
      // that never yields holds it for a whole time slice. Two ranks pinned to one core took
      // 1.1 ms per 8-byte all_reduce that way.
      if (idle < core::hot_spin()) continue;
      if (idle < std::max<Clock::duration>(hot_window, core::spin_window())) {
        sched_yield();
        continue;
      }
      if (now >= next_liveness) {
        if (auto lost = lost_peer()) {
          std::lock_guard lock(mu);
          abort_locked(lost);
          continue;  // the abort failed what `done` waits for, or it waits for more
        }
        next_liveness = now + kSleepSlice;
      }
      sleep(done, std::min(deadline, next_liveness));
      last_moved = Clock::now();  // poll hot again once woken
    }
    return true;
  }

  // ---- Set-up ----

  // Set-up. Every wait goes through `watch`: a rank that fails its set-up fails the others' too.
  // core::fault_point marks each step where a process that dies leaves something different
  // behind (tests/fault/setup_leak_test.cc kills a rank at each):
  //   shm:before_create, shm:after_create, shm:after_publish, shm:after_map,
  //   shm:after_all_mapped.
  void setup(Store& store, backends::SetupWatch& watch, const ShmTransportOptions& options) {
    const auto deadline = Clock::now() + options.timeout;  // timeout checked: no overflow
    // Per set-up (its attempt number): keys an earlier group of this name left on this store
    // (a segment name long unlinked) are never read.
    const std::string prefix = fmt::format("{}/shm/{}/", options.group_name, watch.attempt());
    const auto key = [&](std::string_view what, int r) {
      return fmt::format("{}{}/{}", prefix, what, r);
    };
    const std::string mine = options.host_key.empty() ? shm_host_key() : options.host_key;
    store.set(key("host", rank), mine);
    std::vector<std::string> keys;
    for (int r = 0; r < world; ++r) keys.push_back(key("host", r));
    watch.wait(keys, deadline);
    const std::vector<Bytes> hosts = store.multi_get(keys);
    std::vector<int> local;  // same-host ranks, this one included, ascending
    for (int r = 0; r < world; ++r) {
      if (!mine.empty() && std::string(hosts[r].begin(), hosts[r].end()) == mine) {
        local.push_back(r);
      }
    }
    peer_index.assign(static_cast<std::size_t>(world), -1);
    matcher = decltype(matcher)(world, max_unexpected, options.arrivals);
    if (local.size() <= 1) return;

    const auto rings = static_cast<std::uint32_t>(local.size() - 1);
    const std::size_t bytes = segment_bytes(rings, ring_bytes);
    // Ring index of `from` in the segment of `to`: its place among `to`'s same-host peers.
    const auto ring_of = [&](int from, int to) {
      const auto at = std::find(local.begin(), local.end(), from) - local.begin();
      return static_cast<std::size_t>(at - (from > to ? 1 : 0));
    };
    const auto ring_at = [&](std::byte* base, std::size_t i) {
      return ShmRing::at(base + ring_offset(i, ring_bytes), ring_bytes);
    };

    // The segments that ranks killed before they unlinked theirs left here (earlier jobs, or
    // this host's other jobs), before this one takes room in /dev/shm.
    transport::reclaim_orphan_segments(kSegmentKind);
    core::fault_point("shm:before_create");
    std::random_device rd;
    const std::uint64_t nonce = (std::uint64_t{rd()} << 32) ^ rd();
    own = transport::SharedSegment::create(
        transport::owned_segment_name(kSegmentKind, fmt::format("{:016x}", nonce)), bytes);
    core::fault_point("shm:after_create");
    auto* h = new (own.data()) SegmentHeader{};
    h->magic = kSegmentMagic;
    h->version = kVersion;
    h->rank = rank;
    h->rings = rings;
    h->ring_bytes = ring_bytes;
    h->pid = ::getpid();
    for (std::size_t i = 0; i < rings; ++i) {
      ShmRing::create(own.data() + ring_offset(i, ring_bytes), ring_bytes);
    }
    own_header = h;
    store.set(key("segment", rank), own.name());
    core::fault_point("shm:after_publish");

    for (int q : local) {
      if (q == rank) continue;
      const Bytes name = watch.get(key("segment", q), deadline);
      Peer& p = peers.emplace_back();
      p.rank = q;
      p.segment = transport::SharedSegment::open(std::string(name.begin(), name.end()));
      // Every field read from the peer's segment is checked before it is used: its size first,
      // so that the header itself lies within the mapping.
      if (p.segment.size() < bytes) {
        C10D_THROW(InvalidArgument,
                   "rank {}: the shared memory {} of same-host rank {} holds {} bytes, not the {} "
                   "of {} rings of {} bytes (different c10d builds, or C10D_SHM_RING_BYTES "
                   "differs between ranks?)",
                   rank, p.segment.name(), q, p.segment.size(), bytes, rings, ring_bytes);
      }
      p.header = reinterpret_cast<SegmentHeader*>(p.segment.data());
      const SegmentHeader& ph = *p.header;
      if (ph.magic != kSegmentMagic || ph.version != kVersion || ph.rank != q ||
          ph.rings != rings || ph.ring_bytes != ring_bytes || ph.pid <= 0) {
        C10D_THROW(InvalidArgument,
                   "rank {}: the shared memory of same-host rank {} does not match this rank's: "
                   "magic {:#x} version {} rank {} rings {} ring bytes {} pid {} there, magic "
                   "{:#x} version {} rank {} rings {} ring bytes {} and a pid expected "
                   "(different c10d builds, or C10D_SHM_RING_BYTES differs between ranks?)",
                   rank, q, ph.magic, ph.version, ph.rank, ph.rings, ph.ring_bytes, ph.pid,
                   kSegmentMagic, kVersion, q, rings, ring_bytes);
      }
      p.pid = ph.pid;
      p.out = ring_at(p.segment.data(), ring_of(rank, q));
      p.in = ring_at(own.data(), ring_of(q, rank));
      peer_index[static_cast<std::size_t>(q)] = static_cast<int>(peers.size() - 1);
    }
    core::fault_point("shm:after_map");
    store.set(key("mapped", rank), "1");
    std::vector<std::string> mapped;
    for (int q : local) {
      if (q != rank) mapped.push_back(key("mapped", q));
    }
    watch.wait(mapped, deadline);
    core::fault_point("shm:after_all_mapped");
    own.unlink();  // every same-host peer holds its mapping now
  }
};

namespace {

class ShmRequest final : public transport::Request {
 public:
  ShmRequest(std::shared_ptr<ShmTransport::Impl> impl, std::shared_ptr<Op> op)
      : impl_(std::move(impl)), op_(std::move(op)) {}
  ~ShmRequest() override { impl_->cancel(op_); }
  bool test() override {
    if (!op_->done.load(std::memory_order_acquire)) impl_->progress();
    if (!op_->done.load(std::memory_order_acquire)) return false;
    if (op_->error) std::rethrow_exception(op_->error);
    return true;
  }
  void wait(Clock::time_point deadline) override { impl_->wait(*op_, deadline); }
  int source() const override { return op_->source.load(std::memory_order_acquire); }
  transport::PeerActivity heard() const override {
    return op_->any_source() ? transport::PeerActivity{} : impl_->heard_from(op_->peer);
  }

 private:
  std::shared_ptr<ShmTransport::Impl> impl_;
  std::shared_ptr<Op> op_;
};

}  // namespace

ShmTransport::ShmTransport(std::shared_ptr<Store> store, int rank, int world_size,
                           ShmTransportOptions options)
    : rank_(rank), world_size_(world_size), impl_(std::make_shared<Impl>()) {
  C10D_CHECK(store != nullptr, "ShmTransport rank {}: needs a store", rank);
  C10D_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
             "ShmTransport: rank {} is outside a world of size {}", rank, world_size);
  core::check_timeout(options.timeout, fmt::format("ShmTransport rank {}", rank));
  impl_->rank = rank;
  impl_->who = fmt::format("rank {} (shared memory)", rank);
  impl_->world = world_size;
  auto watch = options.setup_watch;
  if (!watch) watch = std::make_shared<backends::SetupWatch>(store, options.group_name, rank);
  try {
    impl_->ring_bytes = ring_bytes_from(options.ring_bytes);
    impl_->max_unexpected = transport::max_unexpected_bytes(options.max_unexpected_bytes);
    // A malformed C10D_SPIN_US or LOCAL_WORLD_SIZE fails here, not in a wait.
    core::spin_window();
    core::has_own_core();
    impl_->setup(*store, *watch, options);
  } catch (...) {
    watch->fail(std::current_exception());
  }
}

ShmTransport::~ShmTransport() {
  abort(C10D_ERROR(NetworkError, "rank {}: the shared-memory transport was destroyed", rank_));
}

bool ShmTransport::serves(int peer) const {
  return peer >= 0 && peer < world_size_ && impl_->peer_index[static_cast<std::size_t>(peer)] >= 0;
}

int ShmTransport::same_host_peers() const { return static_cast<int>(impl_->peers.size()); }

bool ShmTransport::has_pending() const {
  // Polled in a TCP waiter's loop (routed_transport.cc): a held mutex means someone moves bytes
  // now, so count it as pending rather than wait for it, as progress() does with try_lock.
  std::unique_lock lock(impl_->mu, std::try_to_lock);
  if (!lock.owns_lock()) return true;
  return impl_->matcher.receives() > 0 ||
         std::any_of(impl_->peers.begin(), impl_->peers.end(),
                     [](const Peer& p) { return !p.sends.empty() || p.reading_op != nullptr; });
}

bool ShmTransport::progress() { return impl_->progress(); }

bool ShmTransport::poll_until(const std::function<bool()>& done,
                              transport::Clock::time_point deadline) {
  C10D_CHECK(impl_->own_header != nullptr,
             "ShmTransport rank {}: poll_until needs a same-host peer (a doorbell to sleep on)",
             rank_);
  return impl_->poll_until(done, deadline);
}

void ShmTransport::wake() {
  if (impl_->own_header != nullptr) ring_doorbell(impl_->own_header);
}

std::optional<std::uint64_t> ShmTransport::earliest_unexpected(transport::Tag tag) const {
  std::lock_guard lock(impl_->mu);
  const auto found = impl_->matcher.find_unexpected(transport::kAnySource, tag);
  if (!found) return std::nullopt;
  return impl_->matcher.arrival(*found);
}

std::unique_ptr<transport::Request> ShmTransport::isend(int peer, transport::Tag tag,
                                                        std::span<const std::byte> data) {
  return std::make_unique<ShmRequest>(impl_, impl_->post_send(peer, tag, data));
}

std::unique_ptr<transport::Request> ShmTransport::irecv(int peer, transport::Tag tag,
                                                        std::span<std::byte> data) {
  return std::make_unique<ShmRequest>(impl_, impl_->post_recv(peer, tag, data));
}

std::unique_ptr<transport::Request> ShmTransport::irecv_any(transport::Tag tag,
                                                            std::span<std::byte> data) {
  return irecv_any(tag, data, nullptr);
}

std::unique_ptr<transport::Request> ShmTransport::irecv_any(
    transport::Tag tag, std::span<std::byte> data, std::shared_ptr<transport::SourceClaim> claim) {
  return std::make_unique<ShmRequest>(
      impl_, impl_->post_recv(transport::kAnySource, tag, data, std::move(claim)));
}

std::shared_ptr<transport::ArrivalClock> ShmTransport::arrivals() const {
  std::lock_guard lock(impl_->mu);
  return impl_->matcher.arrivals();
}

void ShmTransport::abort(std::exception_ptr reason) {
  std::lock_guard lock(impl_->mu);
  impl_->abort_locked(std::move(reason));
}

}  // namespace c10d::inline v1::gloo_like
