// TCPTransport: setup with blocking sockets polled against the deadline, then an io thread and
// the waiting threads moving the bytes (see Impl's read and write sides). Words: an *op* is one
// posted isend or irecv (owned by its request and by whichever queue holds it); an op is *in
// flight* once a thread is writing it or reading its payload; an *unexpected* entry is a
// message that arrived before its irecv. All matching state sits under Impl::mu_; a socket's
// read side belongs to whoever holds its read_owner flag and its write side to whoever set
// `writing`; its epoll registration (Connection::reactor) to the io thread alone.
#include "backends/gloo_like/tcp_transport.h"

#include <netdb.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "backends/gloo_like/tcp_handshake.h"
#include "core/check.h"
#include "core/host.h"
#include "core/logging.h"
#include "core/parse.h"
#include "core/spin_wait.h"
#include "store/asio.h"
#include "transport/matcher.h"
#include "transport/stall_record.h"
#include "transport/unexpected_buffer.h"

// clang-format off
#include <boost/asio/posix/stream_descriptor.hpp>
// clang-format on

namespace c10d::inline v1::gloo_like {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using transport::Clock;
using transport::Tag;

namespace {

// Sends up to this size are written by the posting thread when the connection is idle.
constexpr std::size_t kDirectWriteBytes = 64 << 10;
// What a polling thread writes of one send per call before it reads again.
constexpr std::size_t kProgressWriteBytes = 512 << 10;
// A waiter for a message up to kLongPollBytes polls kLongPollScale times the usual spin window
// (core/spin_wait.h) before it sleeps: it waits mostly for its peer to reach the same step, which
// on shared cores is often later than 50 µs, and a sleeping waiter costs a wake-up per message.
// A waiter for a larger message polls the usual window (spinning longer made a 16 MiB all_reduce
// slower: 18.8 against 16.7 ms with a 1 ms window), then drives the transfer itself, sleeping in
// poll(2) on its sockets (Impl::drive_until): 16 MiB all_reduce of 2 ranks at 2.05-2.08 GB/s
// busbw against 1.48-1.76 when the io thread moved the bytes and woke the waiter.
constexpr std::size_t kLongPollBytes = 64 << 10;
constexpr int kLongPollScale = 20;  // 1 ms by default
// How long a waiter driving a large transfer itself sleeps in poll(2) at most before it looks
// whether its op completed some other way (Impl::drive_until).
constexpr std::chrono::milliseconds kDriveSlice{1};
// Within kDriveSpin of starting to drive or of a socket it polls becoming ready, a waiter that
// has a core of its own (core/host.h) looks again without sleeping: a transfer under way delivers a
// chunk every few µs, and sleeping in poll(2) costs a wake-up per chunk (perf: a 1 MiB all_reduce
// of 2 ranks spent 28% of its time switching tasks). Where processes outnumber cores it sleeps as
// before: its spinning would take the core from the rank it waits for (docs/benchmarks.md).
constexpr std::chrono::milliseconds kDriveSpin{1};
// Messages from this size up wait in the socket for their irecv (see Impl::drain).
constexpr std::uint64_t kParkBytes = 64 << 10;
constexpr std::chrono::milliseconds kParkGrace{20};
// A reader asks the socket for up to this much when it needs a frame header (or the last bytes
// of a small payload), so that a small message's header and payload, and often the next
// frames, come in one recv (see Impl::drain). Payload remainders this size and up are read
// straight into place.
constexpr std::size_t kReadAhead = 4 << 10;
static_assert(kParkBytes > kReadAhead, "a parked message's payload must reach into the socket");
// A payload nobody will read (a receive's size did not match) is read through a buffer this size
// and dropped; an abort notice's payload lands there too.
constexpr std::size_t kSinkBytes = 64 << 10;
static_assert(kSinkBytes >= 4 + kMaxAbortMessageBytes, "an abort notice fits the sink");
// How often the io thread looks whether it should watch a socket that a waiter is polling:
// after kRewatchInterval, then doubling up to kRewatchMax while waiters keep polling it (a
// program whose thread runs its collectives itself polls nearly all the time; each look costs
// the io thread a wake-up on a shared core).
constexpr std::chrono::milliseconds kRewatchInterval{1};
constexpr std::chrono::milliseconds kRewatchMax{64};
// How long a failing transport waits for the store to answer (Impl::store_reachable).
constexpr std::chrono::milliseconds kFailureStoreTimeout{500};

// A rank of a group of `world_size` keeps 2(world_size - 1) sockets open. Raises the soft limit
// on open files (RLIMIT_NOFILE) toward the hard one when they and some headroom for the program
// would not fit; fails naming both limits when even the hard one is too low, instead of a bare
// "Too many open files" midway through the setup.
void ensure_descriptors(int rank, int world_size) {
  const auto sockets = 2 * static_cast<rlim_t>(world_size - 1);
  constexpr rlim_t kHeadroom = 256;
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < sockets + kHeadroom) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY
                          ? sockets + kHeadroom
                          : std::min(limit.rlim_max, sockets + kHeadroom);
    if (raised.rlim_cur > limit.rlim_cur && ::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    }
  }
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < sockets + kHeadroom / 4) {
    C10D_THROW(NetworkError,
               "rank {}: a TCP group of {} ranks needs {} sockets per rank (two per peer), but "
               "this process may open only {} files (RLIMIT_NOFILE soft limit; hard limit {}); "
               "raise it (ulimit -n)",
               rank, world_size, sockets, limit.rlim_cur,
               limit.rlim_max == RLIM_INFINITY ? std::string("unlimited")
                                               : std::to_string(limit.rlim_max));
  }
}

// The message of an exception, for an error that wraps it.
std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

// Whom a failing rank's abort notice names (AbortNotice::lost_rank and stalled): a peer that is
// gone, one that made no progress, or no one (-1).
struct Blame {
  int rank = -1;
  bool stalled = false;
};

}  // namespace

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0) return "";
  std::string result;
  for (addrinfo* a = found; a != nullptr && result.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char text[NI_MAXHOST] = {};
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text, sizeof(text), nullptr, 0,
                      NI_NUMERICHOST) == 0) {
      result = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return result;
}

struct Op {
  int self = 0;
  int peer = 0;  // transport::kAnySource for irecv_any
  Tag tag = 0;
  bool is_send = false;
  std::span<const std::byte> send_data;
  std::span<std::byte> recv_data;
  std::array<std::byte, 16> header{};  // a send's frame header
  std::size_t written = 0;             // bytes of header + payload already written
  const Clock::time_point posted_at = Clock::now();
  bool in_flight = false;  // GUARDED_BY(Impl::mu_)
  std::atomic<bool> done{false};
  std::exception_ptr error;     // written under Impl::mu_ before `done`
  std::atomic<int> source{-1};  // a receive's sender, set under Impl::mu_ when it matched
  std::condition_variable cv;   // waits on Impl::mu_
  // A part of an any-source receive posted on other transports too (routed_transport.h); null
  // for every other op. Taken before the op takes a message (transport/matcher.h).
  std::shared_ptr<transport::SourceClaim> claim;

  bool any_source() const { return peer == transport::kAnySource; }
  std::size_t bytes() const { return is_send ? send_data.size() : recv_data.size(); }
  std::string describe() const {
    if (any_source()) return transport::any_source_description(self, tag, bytes());
    return fmt::format("rank {} {} rank {} ({}, {} bytes)", self,
                       is_send ? "isend to" : "irecv from", peer, transport::tag_string(tag),
                       bytes());
  }
  // A part that lost its claim completes without a message (and without an error: the receive's
  // outcome is the other part's).
  void complete_locked(std::exception_ptr e) {
    if (claim && !claim->take(this)) {
      e = nullptr;
      source.store(-1, std::memory_order_relaxed);
    }
    in_flight = false;
    error = std::move(e);
    done.store(true, std::memory_order_release);
    cv.notify_all();
    if (claim) claim->completed();
  }
};

// A message that arrived before its irecv. Its chunks are allocated, under Impl::mu_, by the
// read side as the payload arrives (Impl::next_window), and read once it is complete.
struct Unexpected {
  Unexpected(int from, std::uint64_t size) : peer(from), data(size) {}
  const int peer;
  transport::UnexpectedBuffer data;
  // GUARDED_BY(Impl::mu_):
  bool complete = false;       // the payload is all here
  bool dropped = false;        // left the queue before it was complete: the rest is read and lost
  std::shared_ptr<Op> waiter;  // an irecv that took it while its payload was on the wire
  // What it counts against the peer's limit (Impl::matcher's hold), from when it is made until
  // its receive took it whole or it was dropped.
  std::uint64_t held() const { return data.allocated() + transport::kUnexpectedOverheadBytes; }
};

struct Connection {
  // Takes the sockets out of the io_context's epoll (see `reactor`).
  Connection(tcp::socket in, tcp::socket out) : fd(in.release()), wfd(out.release()) {}
  ~Connection() {
    if (reactor) reactor->release();
    if (wreactor) wreactor->release();
    ::close(fd);
    ::close(wfd);
  }
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  // Two sockets per peer, one per direction: `fd` is the one the peer connected and writes to,
  // read by whoever owns the read side (read_owner); `wfd` the one this rank connected, written
  // by whoever owns the write side (`writing`). One socket carrying both directions moved a
  // 16 MiB exchange about 20% slower on loopback (c10d-loopback-bench): both directions then
  // take the same socket's lock, and acknowledgements interleave with the data; with the
  // pipelined ring a 2-rank 16 MiB all_reduce took 4.5-5.1 ms against 5.6-6.9
  // (docs/benchmarks.md).
  // Shut down, never closed, before the transport goes (kill_locked).
  const int fd;
  const int wfd;
  // Io thread only: `fd` (`wfd`) registered with the io thread's epoll, only while the io thread
  // waits on it (`watched`; `write_waiting`; Impl::reactor and settle). Asio registers a socket for
  // input edge-triggered whether or not anything waits, so a registered socket wakes the io
  // thread at every message, and on a core the waiter was polling on: a context switch per
  // message (an 8-byte all_reduce of 2 ranks over loopback took 13.9 µs against 7.4 without).
  std::optional<asio::posix::stream_descriptor> reactor;
  std::optional<asio::posix::stream_descriptor> wreactor;
  bool write_waiting = false;  // io thread only: waits in epoll to write the op in front
  // GUARDED_BY(Impl::mu_):
  std::deque<std::shared_ptr<Op>> sends;  // not yet written
  bool writing = false;
  // A send whose write failed: the read side tells why (an abort notice or a goodbye may still
  // be in the receive buffer), so the op fails when the connection is killed.
  std::shared_ptr<Op> failed_write;
  // The read side parks a large message whose irecv is not posted yet (see Impl::drain).
  // Written under mu_; an any-source poller reads `parked` without it (poll_drain_any).
  std::atomic<bool> parked{false};
  Tag parked_tag = 0;
  // The unexpected entry from this peer that a receive took while it was arriving (its waiter):
  // out of the matcher's queue, and still being read (the read side's `entry`).
  std::shared_ptr<Unexpected> claimed;
  std::exception_ptr dead;  // why the connection is gone
  // When the read side last took a frame header from the peer, and its tag: what a request that
  // times out waiting for this peer reports (transport::PeerActivity). 0: nothing yet.
  std::atomic<Clock::rep> heard_at{0};
  std::atomic<Tag> heard_tag{0};

  // ---- Read side (Impl::try_drain). Whoever holds read_owner reads the socket: the io thread
  // when it is readable, or a thread waiting for a message from this peer. ----
  std::atomic<bool> read_owner{false};
  std::atomic<bool> drain_again{false};  // set by a thread that found read_owner taken
  std::atomic<bool> read_closed{false};  // end of stream or error seen; nothing more to read
  // Threads polling this connection in Request::wait, and how many waits have polled it. While
  // any polls, or one did since the io thread last looked, the io thread does not watch the
  // socket (its wake-ups would only take the core from the poller; measured in
  // docs/benchmarks.md) and looks again after rewatch_interval. A thread that runs its
  // collectives itself polls for each message, and between two of them nobody polls: watching
  // then would wake the io thread for the next message (an 8-byte all_reduce of 2 ranks pinned
  // to a core each: 10.8 µs against 6.7).
  std::atomic<int> pollers{0};
  std::atomic<int> sleepers{0};  // receives waiting on their condition variable
  std::atomic<std::uint32_t> polls{0};
  std::uint32_t polls_seen = 0;  // io thread only: `polls` at its last look
  bool watched = false;          // io thread only: an async_wait for readability is pending
  std::chrono::milliseconds rewatch_interval = kRewatchInterval;  // io thread only
  bool rewatch_pending = false;  // io thread only: a rewatch_later timer runs (one at a time)
  // Owned by the read_owner holder:
  std::array<std::byte, 16> header{};
  std::size_t header_got = 0;
  bool in_payload = false;
  Tag tag = 0;
  std::uint64_t len = 0;
  std::uint64_t got = 0;
  // Where the payload's next bytes go: `into` holds payload bytes from offset `into_at` on (the
  // whole receive buffer; a chunk of the unexpected entry; or the sink).
  std::span<std::byte> into;
  std::uint64_t into_at = 0;
  std::shared_ptr<Op> target;         // the irecv being filled
  std::shared_ptr<Unexpected> entry;  // or the unexpected entry
  bool abort_body = false;            // or an abort notice's payload (in `sink`)
  // kSinkBytes, made at first use: abort notices, and payloads that are dropped (neither
  // `target` nor `entry`).
  std::unique_ptr<std::byte[]> sink;
  Clock::time_point park_deadline{};
  // Bytes read from the socket but not consumed yet: [ahead_begin, ahead_end) of `ahead`.
  std::unique_ptr<std::byte[]> ahead = std::make_unique_for_overwrite<std::byte[]>(kReadAhead);
  std::size_t ahead_begin = 0;
  std::size_t ahead_end = 0;
};

struct TCPTransport::Impl : std::enable_shared_from_this<Impl> {
  int rank = 0;
  std::string who;  // "rank 3": what this rank's errors open with
  bool fail_all_on_peer_loss = false;
  // The most a peer's unexpected messages may hold (TCPTransportOptions::max_unexpected_bytes).
  std::uint64_t max_unexpected = transport::kDefaultMaxUnexpectedBytes;
  std::function<void(std::exception_ptr)> on_abort;  // TCPTransportOptions::on_abort
  // After setup, used only when the group fails: the first rank to fail records why under
  // failure_key (publish_failure), and a rank that sees a connection end without a word looks
  // there (published_failure) before it blames the peer.
  std::shared_ptr<Store> store;
  std::string failure_key;
  std::string own_key;                  // this rank's address key, set at setup
  std::string stall_prefix;             // "<group>/stall/<setup attempt>/": find_stalled's keys
  std::atomic<bool> store_gone{false};  // the store did not answer once; not asked again
  asio::io_context io;
  std::vector<std::unique_ptr<Connection>> conns;  // by peer rank; null for self
  std::thread thread;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> guard;  // io thread
  std::mutex mu_;
  std::exception_ptr aborted;  // GUARDED_BY(mu_)
  // Posted receives and unexpected entries, by peer (transport/matcher.h); GUARDED_BY(mu_). An
  // entry stays in its queue while it arrives (the read side fills it outside mu_, chunk by
  // chunk), until a receive takes it.
  transport::Matcher<std::shared_ptr<Op>, std::shared_ptr<Unexpected>> matcher;
  // Threads polling in Request::wait. While there are any, they write queued sends themselves
  // (progress_sends) and the io thread is not asked to: a send and a receive then progress on
  // one thread, as in an MPI progress loop, instead of two threads taking turns on a core.
  std::atomic<int> progressors{0};
  // Waiters driving a transfer poll without sleeping while bytes keep coming (kDriveSpin).
  const bool hot_drive = core::has_own_core();

  // Why `op` cannot start. A receive from a dead peer may still match a message it sent; an
  // any-source receive is refused later (submit_receive_locked: no_sender_locked).
  std::exception_ptr refusal_locked(const Op& op) {
    if (aborted) return aborted;
    if (op.any_source()) return nullptr;
    const Connection& c = *conns[static_cast<std::size_t>(op.peer)];
    if (!c.dead) return nullptr;
    if (!op.is_send && matcher.find_unexpected(op.peer, op.tag)) return nullptr;
    return c.dead;
  }

  // Requires mu_. Why an any-source receive cannot wait: no peer is left that could send (every
  // connection is gone; the last one's error says why). Null while one is up.
  std::exception_ptr no_sender_locked() const {
    std::exception_ptr last;
    for (const auto& c : conns) {
      if (!c) continue;
      if (!c->dead) return nullptr;
      last = c->dead;
    }
    return C10D_ERROR(NetworkError,
                      "rank {}: an any-source receive cannot complete: the connection to every "
                      "peer is gone (the last: {})",
                      rank, last ? what_of(last) : std::string("this rank has no peers"));
  }

  // Fails the queued ops of `c` (peer `peer`). Messages that arrived whole stay receivable unless
  // `drop_all`: a peer that sent and then closed its end has still sent them. Any-source
  // receives fail only when no peer is left (fail_any_source_locked).
  void fail_queued_locked(Connection& c, int peer, const std::exception_ptr& e, bool drop_all) {
    if (c.failed_write) {
      c.failed_write->complete_locked(e);
      c.failed_write.reset();
    }
    // A send a poller is writing (progress_sends) stays: the poller still reads its buffer, and
    // completes it when its write returns.
    std::erase_if(c.sends, [&](const std::shared_ptr<Op>& op) {
      if (op->in_flight) return false;
      op->complete_locked(e);
      return true;
    });
    matcher.take_receives(peer, [&](const std::shared_ptr<Op>& op) { op->complete_locked(e); });
    if (c.claimed) {
      if (!c.claimed->waiter->done) c.claimed->waiter->complete_locked(e);
      release_locked(*c.claimed);
      c.claimed.reset();
    }
    matcher.erase_unexpected_if(peer, [&](const std::shared_ptr<Unexpected>& u) {
      const bool drop = drop_all || !u->complete;
      if (drop) release_locked(*u);
      return drop;
    });
  }

  // Requires mu_. Fails the queued any-source receives with `e`, or, when `e` is null, with
  // no_sender_locked once no peer is left (a part of a composite receive gives up instead).
  void fail_any_source_locked(std::exception_ptr e = nullptr) {
    if (!matcher.any_source_posted()) return;
    const bool aborting = e != nullptr;
    if (!e) e = no_sender_locked();
    if (!e) return;
    matcher.take_receives(transport::kAnySource, [&](const std::shared_ptr<Op>& op) {
      if (aborting) {
        op->complete_locked(e);
      } else {
        refuse_any_source_locked(*op, e);
      }
    });
  }

  // Requires mu_. An any-source receive that no peer is left to send to fails with `none`; a
  // part of a composite receive gives up instead (transport/matcher.h: SourceClaim), and stays
  // pending, in no queue, until its request goes.
  static void refuse_any_source_locked(Op& op, std::exception_ptr none) {
    if (op.claim) {
      op.claim->give_up(std::move(none));
      op.claim->completed();
    } else {
      op.complete_locked(std::move(none));
    }
  }

  // Requires mu_. `bytes` more held for `peer`'s unexpected messages; past the limit the
  // transport aborts, naming the peer, and this returns false.
  bool hold_locked(Connection& c, int peer, std::uint64_t bytes) {
    if (auto refused = matcher.hold(peer, bytes, who)) {
      c.read_closed.store(true);
      abort_locked(std::move(refused));
      return false;
    }
    return true;
  }

  // Requires mu_. `u` no longer counts against its peer's limit (it left its queue, or its
  // receive took it whole), and if it is still arriving the read side drops the rest of it
  // (next_window).
  void release_locked(Unexpected& u) {
    matcher.release(u.peer, u.held());
    if (!u.complete) u.dropped = true;
  }

  // Requires mu_; io thread. Marks the connection to `peer` dead with `why` (or, when null, a
  // loss caused by `ec`), closes it and fails its queued ops. `fatal` (a loss or an abort frame,
  // not a goodbye) aborts the whole transport when fail_all_on_peer_loss is set. `blame` is
  // whom this rank's abort notice will name, passed on from the notice or record that explained
  // the loss (none: `peer` itself, gone).
  void kill_locked(int peer, const error_code& ec, std::exception_ptr why = nullptr,
                   bool fatal = true, std::optional<Blame> blame = std::nullopt) {
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    // Shut down, never closed before the transport goes: another thread may be reading the fd,
    // and a closed fd number can be reused.
    ::shutdown(c.fd, SHUT_RDWR);
    ::shutdown(c.wfd, SHUT_RDWR);
    if (!c.dead) {
      c.dead = why ? std::move(why)
                   : C10D_ERROR(NetworkError, "rank {}: connection to peer rank {} lost: {}", rank,
                                peer, ec.message());
      if (fatal && fail_all_on_peer_loss && !aborted) {
        const Blame named = blame.value_or(Blame{peer, false});
        abort_locked(c.dead, named.rank, /*orderly=*/false, named.stalled);
        return;
      }
    }
    fail_queued_locked(c, peer, aborted ? aborted : c.dead, aborted != nullptr);
    fail_any_source_locked(aborted);
  }

  // Requires mu_; io thread. A write to `peer` failed: stop writing, let the read loop find the
  // cause within a second, and kill the connection with `ec` if it has not by then.
  void defer_write_failure_locked(int peer, std::shared_ptr<Op> op, const error_code& ec) {
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    c.failed_write = std::move(op);
    ::shutdown(c.wfd, SHUT_WR);
    auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::seconds(1));
    timer->async_wait([self = shared_from_this(), timer, peer, ec](error_code) {
      std::lock_guard lock(self->mu_);
      self->kill_locked(peer, ec);
    });
  }

  // What a rank that hears `notice` from `peer` reports, after its own "rank R: ".
  static std::string describe_failure(const AbortNotice& notice, int peer) {
    const std::string cause = notice.lost_rank < 0 ? fmt::format("peer rank {} aborted", peer)
                              : notice.stalled
                                  ? fmt::format("peer rank {} made no progress", notice.lost_rank)
                                  : fmt::format("peer rank {} is gone", notice.lost_rank);
    return fmt::format("{} (rank {} reports: {})", cause, peer, notice.message);
  }

  // Io thread, outside mu_, before any connection closes: records why this rank fails, unless
  // another rank recorded its cause first. A connection in the middle of a frame cannot carry
  // the abort notice, so the peer on its other end reads the cause here (published_failure).
  // Best effort: a store that cannot be reached leaves the peers to report a plain loss.
  void publish_failure(const AbortNotice& notice) {
    const std::string value =
        encode_failure_record({notice.lost_rank, describe_failure(notice, rank), notice.stalled});
    const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(value.data()),
                                              value.size());
    if (!store_reachable()) return;
    try {
      store->compare_set(failure_key, {}, bytes);
    } catch (const std::exception& e) {
      C10D_LOG_WARN("rank {}: could not record the failure in the store: {}", rank, e.what());
    }
  }

  // Whether the store answers within kFailureStoreTimeout: a bounded wait for a key this rank
  // set at setup. The store's own calls reconnect until the store's timeout (minutes) when the
  // server is gone (it may have lived in a rank that died), which must not hold up a failing
  // transport; after one miss the store is not asked again.
  bool store_reachable() {
    if (store_gone.load()) return false;
    try {
      store->wait(std::span<const std::string>(&own_key, 1), kFailureStoreTimeout);
      return true;
    } catch (const std::exception& e) {
      C10D_LOG_DEBUG("rank {}: the store does not answer: {}", rank, e.what());
      store_gone.store(true);
      return false;
    }
  }

  // The cause another rank published (encode_failure_record): the error to report and whom
  // it blames, or none. Not under mu_: a store round trip, only when a connection has ended. A
  // record that is not one (anyone who can write the store can write it) is logged, naming the
  // key, and ignored: the peer is then reported gone.
  std::pair<std::exception_ptr, Blame> published_failure(int peer) {
    if (!store_reachable()) return {nullptr, {}};
    try {
      const std::string key = failure_key;
      if (!store->check(std::span<const std::string>(&key, 1))) return {nullptr, {}};
      const Bytes v = store->get(failure_key);
      const std::string text(v.begin(), v.end());
      const std::optional<AbortNotice> record = decode_failure_record(text);
      if (!record) {
        C10D_LOG_WARN(
            "rank {}: the failure record in the store ('{}') is not \"<rank>\\n<message>\" "
            "({} bytes); ignored",
            rank, failure_key, text.size());
        return {nullptr, {}};
      }
      const AbortNotice heard = heard_abort_notice(*record, rank, static_cast<int>(conns.size()));
      return {C10D_ERROR(NetworkError, "rank {}: connection to peer rank {} closed; {}", rank, peer,
                         heard.message),
              Blame{heard.lost_rank, heard.stalled}};
    } catch (const std::exception& e) {
      C10D_LOG_DEBUG("rank {}: no failure cause from the store: {}", rank, e.what());
      return {nullptr, {}};
    }
  }

  transport::PeerActivity heard_from(int peer) const {
    const Connection& c = *conns[static_cast<std::size_t>(peer)];
    const Clock::rep at = c.heard_at.load(std::memory_order_relaxed);
    if (at == 0) return {};
    return {true, Clock::now() - Clock::time_point(Clock::duration(at)),
            c.heard_tag.load(std::memory_order_relaxed)};
  }

  // Transport::find_stalled over the store: this rank's record under stall_prefix + rank is
  // "<awaited>\n<doing>"; the chain is followed from `peer` until a rank without a record (the
  // stalled one) or a rank met before (a cycle). The outcome is also appended to the job's
  // stall records (transport/stall_record.h), for the launcher. Best effort: a store that does
  // not answer leaves `peer` as the suspect.
  transport::StallReport find_stalled(int peer, std::string_view doing,
                                      std::chrono::milliseconds window) {
    transport::StallReport report{peer, {}};
    if (stall_prefix.empty() || !store_reachable()) return report;
    const auto key = [&](int r) { return stall_prefix + std::to_string(r); };
    int at = peer;
    try {
      store->set(key(rank), fmt::format("{}\n{}", peer, doing));
      const auto until = Clock::now() + window;
      std::vector<char> seen(conns.size(), 0);
      seen[static_cast<std::size_t>(rank)] = 1;
      for (;;) {
        if (at < 0 || at >= static_cast<int>(conns.size()) || seen[static_cast<std::size_t>(at)]) {
          report.suspect = -1;  // they wait for each other
          break;
        }
        seen[static_cast<std::size_t>(at)] = 1;
        report.suspect = at;
        const std::string k = key(at);
        const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
        try {
          store->wait(std::span<const std::string>(&k, 1),
                      std::max(left, std::chrono::milliseconds(1)));
        } catch (const TimeoutError&) {
          break;  // `at` waits for no one known: the stalled rank
        }
        const Bytes v = store->get(k);
        const std::string text(v.begin(), v.end());
        const auto nl = text.find('\n');
        const auto awaits = core::parse_int(std::string_view(text).substr(0, nl), 0,
                                            static_cast<std::int64_t>(conns.size()) - 1);
        if (!awaits.value) {
          // Not a record find_stalled writes: `at` waits, for whom is not known.
          C10D_LOG_WARN(
              "rank {}: the stall record '{}' names no rank of the group: {}; the chain "
              "ends at rank {}",
              rank, k, awaits.error, at);
          break;
        }
        report.chain.push_back(
            {at, static_cast<int>(*awaits.value),
             nl == std::string::npos
                 ? std::string()
                 : transport::stall_doing(std::string_view(text).substr(nl + 1))});
        at = static_cast<int>(*awaits.value);
      }
    } catch (const std::exception& e) {
      C10D_LOG_DEBUG("rank {}: following the ranks' waits in the store stopped: {}", rank,
                     e.what());
    }
    try {
      const std::string line =
          transport::encode_stall_record({rank, peer, report.suspect, std::string(doing)});
      store->append(transport::kStallRecordsKey,
                    std::span<const std::uint8_t>(
                        reinterpret_cast<const std::uint8_t*>(line.data()), line.size()));
    } catch (const std::exception& e) {
      C10D_LOG_DEBUG("rank {}: could not record the stall for the launcher: {}", rank, e.what());
    }
    return report;
  }

  // Io thread, as a transport goes down: `frame` (a goodbye or an abort notice, tcp_wire.h) on
  // every connection that is idle, then close. A connection mid-write just closes; its peer then
  // sees a loss.
  void send_last_frame_and_close(const std::vector<std::byte>& frame) {
    {
      std::lock_guard lock(mu_);
      for (auto& c : conns) {
        if (!c || c->writing || c->dead) continue;
        // One attempt: a frame the socket does not take whole arrives cut, as a loss.
        [[maybe_unused]] const ssize_t n =
            ::send(c->wfd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
      }
      close_all();  // under mu_: a thread writing directly (submit) never sees a closed fd
    }
  }

  // The io thread's loop. It does not poll: the threads that wait for messages poll their own
  // sockets (see drain), and an io thread polling beside them only takes their cores (measured in
  // docs/benchmarks.md). No handler should throw; one that does fails the transport, and the
  // loop goes on (Asio allows run() again after a handler threw) to send the last frames and
  // close, so nothing escapes the thread.
  void run() {
    for (;;) {
      try {
        io.run();
        return;
      } catch (...) {
        fail_on_exception(std::current_exception(), "the io thread");
      }
    }
  }

  // An exception escaped `where` (a handler of the io thread, or a read): abort the transport
  // with a NetworkError that carries it.
  void fail_on_exception(const std::exception_ptr& e, const std::string& where) {
    const std::string what = what_of(e);
    C10D_LOG_ERROR("rank {}: {} of the TCP transport failed: {}", rank, where, what);
    std::lock_guard lock(mu_);
    abort_locked(
        C10D_ERROR(NetworkError, "rank {}: {} of the TCP transport failed: {}", rank, where, what));
  }

  void close_all() {  // under mu_; see kill_locked for why nothing is closed
    for (auto& c : conns) {
      if (!c) continue;
      ::shutdown(c->fd, SHUT_RDWR);
      ::shutdown(c->wfd, SHUT_RDWR);
    }
  }

  // Io thread: `c`'s socket registered with the io thread's epoll (see Connection::reactor).
  asio::posix::stream_descriptor* reactor(Connection& c, error_code& ec, bool write = false) {
    auto& r = write ? c.wreactor : c.reactor;
    if (!r) {
      r.emplace(io);
      r->assign(write ? c.wfd : c.fd, ec);
      if (ec) {
        r.reset();  // not open: does not close the fd
        return nullptr;
      }
    }
    return &*r;
  }

  // Io thread: takes `c`'s socket out of epoll once the io thread waits on it for nothing.
  static void settle(Connection& c) {
    if (c.reactor && !c.watched) {
      c.reactor->release();
      c.reactor.reset();
    }
    if (c.wreactor && !c.write_waiting) {
      c.wreactor->release();
      c.wreactor.reset();
    }
  }

  void write_next(int peer) {  // io thread
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    std::shared_ptr<Op> op;
    {
      std::lock_guard lock(mu_);
      // A waiter polls now: it writes the queue itself (progress_sends); the last to leave
      // hands it back here (leave_progress).
      if (c.writing || c.sends.empty() || progressors.load() > 0) return;
      op = c.sends.front();
      c.sends.pop_front();
      op->in_flight = true;
      c.writing = true;
    }
    write_on(peer, std::move(op));
  }

  // Io thread, owning `peer`'s write side (`writing`): writes what the socket takes of `op`'s
  // frame, waits in epoll for room and goes on, then completes `op` and starts the next send.
  void write_on(int peer, std::shared_ptr<Op> op) {
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    int err = 0;
    error_code ec;
    if (!write_some(c, *op, std::numeric_limits<std::size_t>::max(), &err) && err == 0) {
      if (hand_back(c, op)) return;
      if (auto* r = reactor(c, ec, /*write=*/true)) {
        c.write_waiting = true;
        r->async_wait(asio::posix::descriptor_base::wait_write,
                      [self = shared_from_this(), peer, op](error_code wait_ec) {
                        self->conns[static_cast<std::size_t>(peer)]->write_waiting = false;
                        if (wait_ec) {
                          self->end_write(peer, op, wait_ec);
                        } else {
                          self->write_on(peer, op);
                        }
                      });
        return;
      }
    } else if (err != 0) {
      ec = error_code(err, boost::system::system_category());
    }
    end_write(peer, op, ec);
  }

  // Io thread, owning `c`'s write side with `op` written in part and the socket full: when a
  // waiter polls now, puts `op` back in front of the queue for it (progress_sends) and lets go
  // of the write side, instead of waking in epoll for every chunk the socket takes. A send
  // posted before its waiter started polling (a collective posts, then waits) went to this
  // thread: all_to_all of 64 MiB, 4 ranks on 2 cores, 38.5 ms against 45.0 (docs/benchmarks.md).
  // Under mu_: a poller that leaves (leave_progress) then finds `op` queued.
  bool hand_back(Connection& c, std::shared_ptr<Op>& op) {
    std::lock_guard lock(mu_);
    if (progressors.load() == 0 || c.dead || aborted) return false;
    op->in_flight = false;
    c.sends.push_front(std::move(op));
    c.writing = false;
    settle(c);
    return true;
  }

  // Io thread: `op`'s write ended, written whole or failed with `ec`.
  void end_write(int peer, const std::shared_ptr<Op>& op, const error_code& ec) {
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    {
      std::lock_guard lock(mu_);
      c.writing = false;
      if (ec && !c.dead && !aborted) {
        defer_write_failure_locked(peer, op, ec);
      } else if (ec) {
        kill_locked(peer, ec);
        op->complete_locked(aborted ? aborted : c.dead);
      } else {
        op->complete_locked(nullptr);
      }
    }
    if (!ec) write_next(peer);
    // After the next send started: one that waits for room keeps the epoll registration instead
    // of dropping and making it again for every queued send.
    settle(c);
  }

  // ---- Read side ----
  //
  // A connection's bytes are read by whichever thread holds its read_owner flag, in drain():
  // the io thread when epoll says the socket is readable, or a thread waiting in
  // TCPRequest::wait/test for a message from this peer, which then reads its message itself
  // instead of waiting for the io thread to wake (a wake-up costs more than a small message's
  // whole trip). drain() reads without blocking until the socket is empty, so a thread that
  // finds the flag taken only sets drain_again, and the holder drains once more before it lets
  // go: no readiness is ever lost between two threads.
  //
  // Parking: a message of kParkBytes or more whose irecv is not posted yet is left in the
  // socket (the sender is flow-controlled meanwhile) until the irecv comes or kParkGrace
  // passes, so it is read straight into the receiver's buffer: buffering it would cost an
  // allocation, page faults and a copy, several times the transfer itself. After the grace it
  // is buffered anyway, since the receiver may wait for a later message on this connection
  // first (another tag).
  //
  // Unexpected entries: a message buffered before its irecv gets chunks of up to 1 MiB as its
  // bytes arrive (next_window; transport/unexpected_buffer.h), never the length its header
  // claims, and every chunk, plus kUnexpectedOverheadBytes per message, counts against the
  // peer's limit (hold_locked) until the entry leaves its queue (release_locked).

  void try_drain(int peer) {
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    c.drain_again.store(true);
    if (c.read_owner.exchange(true)) return;  // the holder will see drain_again
    for (;;) {
      c.drain_again.store(false);
      try {
        drain(c, peer);
      } catch (...) {  // nothing in drain should throw; if it does, no thread unwinds from here
        c.read_closed.store(true);
        fail_on_exception(std::current_exception(), fmt::format("reading from peer rank {}", peer));
        std::lock_guard lock(mu_);
        if (c.target) c.target->complete_locked(aborted);  // in flight: in no queue abort fails
        c.target.reset();
      }
      c.read_owner.store(false);
      if (!c.drain_again.load() || c.read_owner.exchange(true)) return;
    }
  }

  // A polling waiter's drain: poll(2) first, which looks at the socket without taking its lock.
  // recv takes it even on an empty socket, and a waiter spinning on recv makes the kernel,
  // delivering the peer's bytes into that socket, spin for the lock (measured in
  // docs/benchmarks.md).
  void poll_drain(int peer) {
    pollfd p{conns[static_cast<std::size_t>(peer)]->fd, POLLIN, 0};
    if (::poll(&p, 1, 0) == 0) return;  // empty: drain would find nothing either
    try_drain(peer);
  }

  // A polling waiter of an any-source receive: one poll(2) over the sockets that may still
  // bring it a message, then a drain of the readable ones only, instead of a system call per
  // peer per turn. Left out: a socket whose stream ended (read_closed), and one whose message in
  // front is parked: that message is for another receive (the any-source one would have taken
  // it), and it comes in when that receive is posted (submit_receive_locked) or its grace ends
  // (a timer of the io thread), so polling it would only find it ready at every turn and its
  // drain take mu_ for nothing. `fds` and `peers`: the caller's, reused across turns.
  void poll_drain_any(std::vector<pollfd>& fds, std::vector<int>& peers) {
    fds.clear();
    peers.clear();
    for (std::size_t p = 0; p < conns.size(); ++p) {
      const Connection* c = conns[p].get();
      if (c == nullptr || c->read_closed.load() || c->parked.load(std::memory_order_relaxed)) {
        continue;
      }
      fds.push_back({c->fd, POLLIN, 0});
      peers.push_back(static_cast<int>(p));
    }
    if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
    for (std::size_t i = 0; i < fds.size(); ++i) {
      if (fds[i].revents != 0) try_drain(peers[i]);
    }
  }

  // Io thread: wait for the socket to become readable, drain, and wait again; unless a thread
  // is polling the socket or polled it since the last look (polled_since_look), in which case
  // look again later (rewatch_later).
  void watch(int peer) {
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    if (c.watched) return;
    if (c.read_closed.load()) {
      settle(c);
      return;
    }
    error_code ec;
    auto* r = reactor(c, ec);
    if (r == nullptr) {
      std::lock_guard lock(mu_);
      kill_locked(peer, ec);
      return;
    }
    c.watched = true;
    c.polls_seen = c.polls.load();
    r->async_wait(asio::posix::descriptor_base::wait_read,
                  [self = shared_from_this(), peer](error_code wait_ec) {
                    Connection& conn = *self->conns[static_cast<std::size_t>(peer)];
                    conn.watched = false;
                    if (wait_ec == asio::error::operation_aborted) return;
                    if (polled_since_look(conn)) {
                      settle(conn);
                      self->rewatch_later(peer);
                      return;
                    }
                    conn.rewatch_interval = kRewatchInterval;
                    self->watch_and_drain(peer);
                  });
  }

  // Io thread: watches `peer`'s socket (again) and reads what is there: bytes that came since the
  // last drain raised no edge the new watch could see.
  void watch_and_drain(int peer) {
    watch(peer);
    try_drain(peer);
  }

  // Io thread: the last poller of `peer` left while a receive sleeps until its message comes
  // (the poller's own, or another thread's). Watch the socket now (and look at it: bytes may
  // have come since the last poll), counting the polls before as seen: else a watch already
  // armed would take the sleeper's message for a poller's and leave it until the next look, up
  // to kRewatchMax later.
  void watch_for_sleeper(int peer) {
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    c.polls_seen = c.polls.load();
    c.rewatch_interval = kRewatchInterval;
    watch_and_drain(peer);
  }

  // A thread sleeps outside this transport until an any-source receive completes
  // (TCPTransport::AnySourceSleep): it counts as a sleeper on every connection, as TCPRequest::wait
  // counts a receive, and the io thread watches every socket that no waiter polls now (a poller
  // that leaves sees the sleeper and has it watched then).
  void enter_sleep_any() {
    for (std::size_t p = 0; p < conns.size(); ++p) {
      Connection* c = conns[p].get();
      if (c == nullptr) continue;
      c->sleepers.fetch_add(1);
      if (c->pollers.load() == 0 && !c->read_closed.load()) {
        asio::post(io, [self = shared_from_this(), peer = static_cast<int>(p)] {
          self->watch_for_sleeper(peer);
        });
      }
    }
  }
  void leave_sleep_any() {
    for (const auto& c : conns) {
      if (c) c->sleepers.fetch_sub(1);
    }
  }

  // Io thread, looking at `c`: whether a waiter polls it, or did since the last look; records
  // this look.
  static bool polled_since_look(Connection& c) {
    const std::uint32_t polls = c.polls.load();
    const bool polled = c.pollers.load() > 0 || polls != c.polls_seen;
    c.polls_seen = polls;
    return polled;
  }

  void rewatch_later(int peer) {  // io thread
    Connection& conn = *conns[static_cast<std::size_t>(peer)];
    if (conn.rewatch_pending) return;
    conn.rewatch_pending = true;
    auto timer = std::make_shared<asio::steady_timer>(io, conn.rewatch_interval);
    conn.rewatch_interval = std::min(2 * conn.rewatch_interval, kRewatchMax);
    timer->async_wait([self = shared_from_this(), timer, peer](error_code) {
      Connection& c = *self->conns[static_cast<std::size_t>(peer)];
      c.rewatch_pending = false;
      if (polled_since_look(c)) {
        self->rewatch_later(peer);
        return;
      }
      self->watch_and_drain(peer);
    });
  }

  // Holder of c.read_owner. Reads, without blocking, until the socket is empty, the message in
  // front is parked, or the stream ended. Bytes are taken from c.ahead first; the socket is read
  // into c.ahead (kReadAhead at a time) for headers and small payloads, and straight into place
  // for larger payloads. So it returns only when it needs bytes the socket does not have yet
  // (or parked, or ended): what c.ahead holds then is part of the frame in front, and a poller
  // that finds the socket empty (poll_drain) misses nothing. A read that returns less than it
  // asked for emptied the socket (TCP hands over all it has), so drain returns at the next need
  // for bytes instead of asking again for an EAGAIN: bytes that come later raise a new
  // readiness edge for the io thread, and pollers poll. One recv per small message, as Open MPI
  // does, against three before (header, payload, EAGAIN). A payload goes into c.into, which for
  // a posted irecv is its whole buffer; an unexpected message gets its next chunk, and a dropped
  // one the sink again, only when bytes for it are here (next_window).
  void drain(Connection& c, int peer) {
    bool empty = false;  // the last read found the socket emptied
    while (!c.read_closed.load()) {
      if (!c.in_payload) {
        if (c.header_got < c.header.size()) {
          if (c.ahead_begin == c.ahead_end && !read_ahead(c, peer, empty)) return;
          c.header_got +=
              take_ahead(c, c.header.data() + c.header_got, c.header.size() - c.header_got);
          if (c.header_got < c.header.size()) continue;
          if (!read_frame_header(c, peer)) return;
          if (c.in_payload) continue;  // an abort notice's payload
          c.heard_tag.store(c.tag, std::memory_order_relaxed);
          c.heard_at.store(Clock::now().time_since_epoch().count(), std::memory_order_relaxed);
        }
        std::lock_guard lock(mu_);
        if (!start_payload_locked(c, peer)) return;  // parked, or over the limit
      }
      if (c.got < c.len) {
        std::uint64_t used = c.got - c.into_at;
        if (used == c.into.size()) {
          if (c.ahead_begin == c.ahead_end && empty) return;  // no bytes for a new window yet
          if (!next_window(c, peer)) return;
          used = 0;
        }
        std::byte* to = c.into.data() + used;
        const std::uint64_t room = std::min<std::uint64_t>(c.len - c.got, c.into.size() - used);
        if (c.ahead_begin < c.ahead_end) {
          c.got += take_ahead(c, to,
                              static_cast<std::size_t>(std::min<std::uint64_t>(room, kReadAhead)));
        } else if (room >= kReadAhead) {
          if (empty) return;
          const ssize_t n = ::recv(c.fd, to, static_cast<std::size_t>(room), MSG_DONTWAIT);
          if (n <= 0) {
            if (!read_failed(c, peer, n)) return;
            continue;
          }
          c.got += static_cast<std::uint64_t>(n);
          empty = static_cast<std::uint64_t>(n) < room;
        } else if (!read_ahead(c, peer, empty)) {
          return;
        }
        if (c.got < c.len) continue;
      }
      finish_payload(c, peer);
    }
  }

  // Holder of c.read_owner, with c.into full and more of the payload to come: where the next
  // bytes go. An unexpected entry gets its next chunk (counted against the peer's limit: false
  // when that aborted the transport); one dropped meanwhile (release_locked), or a payload
  // nobody takes, goes through the sink.
  bool next_window(Connection& c, int peer) {
    c.into_at = c.got;
    if (c.entry) {
      std::lock_guard lock(mu_);
      if (!c.entry->dropped) {
        if (!hold_locked(c, peer, c.entry->data.allocation_at(c.got))) return false;
        c.into = c.entry->data.span_at(c.got);
        return true;
      }
      c.entry->data.release();
      c.entry.reset();
    }
    c.into = sink(c);
    return true;
  }

  static std::span<std::byte> sink(Connection& c) {
    if (!c.sink) c.sink = std::make_unique_for_overwrite<std::byte[]>(kSinkBytes);
    return {c.sink.get(), kSinkBytes};
  }

  // Holder of c.read_owner: moves up to `want` bytes from c.ahead to `to`; returns how many.
  static std::size_t take_ahead(Connection& c, std::byte* to, std::size_t want) {
    const std::size_t k = std::min(want, c.ahead_end - c.ahead_begin);
    std::memcpy(to, c.ahead.get() + c.ahead_begin, k);
    c.ahead_begin += k;
    return k;
  }

  // Holder of c.read_owner, with c.ahead consumed: refills it from the socket. False when the
  // socket is (or was found) empty or the stream ended (read_closed is then set).
  bool read_ahead(Connection& c, int peer, bool& empty) {
    while (!empty) {
      const ssize_t n = ::recv(c.fd, c.ahead.get(), kReadAhead, MSG_DONTWAIT);
      if (n > 0) {
        c.ahead_begin = 0;
        c.ahead_end = static_cast<std::size_t>(n);
        empty = c.ahead_end < kReadAhead;
        return true;
      }
      if (!read_failed(c, peer, n) || c.read_closed.load()) return false;
    }
    return false;
  }

  // recv returned n <= 0: false when the socket is merely empty (come back later), true when
  // the caller should loop (EINTR, or the stream ended and read_closed is now set).
  bool read_failed(Connection& c, int peer, ssize_t n) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return false;
    if (n < 0 && errno == EINTR) return true;
    const error_code ec =
        n == 0 ? error_code(asio::error::eof) : error_code(errno, boost::system::system_category());
    // A peer that aborted while writing to us could not frame an abort notice; it published the
    // cause first, then closed (publish_failure).
    auto [why, blame] = published_failure(peer);
    std::lock_guard lock(mu_);
    c.read_closed.store(true);
    const bool explained = why != nullptr;
    kill_locked(peer, ec, std::move(why), /*fatal=*/true,
                explained ? std::optional<Blame>(blame) : std::nullopt);
    if (c.target) c.target->complete_locked(aborted ? aborted : c.dead);
    c.target.reset();
    return true;
  }

  // Holder of c.read_owner: a header just arrived. Decodes it (decode_frame_header), ends the
  // stream at a goodbye or a fault, and starts an abort notice's payload (true: go on reading;
  // false: the stream is over).
  bool read_frame_header(Connection& c, int peer) {
    FrameHeader h;
    const FrameFault fault = decode_frame_header(c.header, h);
    c.tag = h.tag;
    c.len = h.length;
    if (fault != FrameFault::kNone) {
      std::lock_guard lock(mu_);
      c.read_closed.store(true);
      kill_locked(peer, {},
                  C10D_ERROR(NetworkError,
                             "rank {}: peer rank {} sent a frame header that is not of this "
                             "protocol: {}",
                             rank, peer, describe_frame_fault(fault, h)));
      return false;
    }
    if (h.kind == FrameKind::kGoodbye) {
      std::lock_guard lock(mu_);
      c.read_closed.store(true);
      kill_locked(peer, {},
                  C10D_ERROR(NetworkError,
                             "rank {}: peer rank {} closed its transport (it "
                             "finished or destroyed its group)",
                             rank, peer),
                  /*fatal=*/false);
      return false;
    }
    if (h.kind == FrameKind::kAbort) {
      c.into = sink(c);
      c.into_at = 0;
      c.got = 0;
      c.abort_body = true;
      c.in_payload = true;
    }
    return true;
  }

  // Requires mu_. Chooses where the payload of the message in front goes: its irecv, an
  // unexpected entry, the sink (a receive whose size differs), or nowhere yet (parked: false;
  // also false when the entry broke the peer's limit and the transport aborted).
  bool start_payload_locked(Connection& c, int peer) {
    c.got = 0;
    c.into_at = 0;
    c.into = {};  // a dropped payload, or an entry's first chunk: next_window
    std::optional<std::shared_ptr<Op>> recv = matcher.match_claiming(
        peer, c.tag, [](const std::shared_ptr<Op>& lost) { lost->complete_locked(nullptr); });
    if (recv) {
      c.target = std::move(*recv);
      c.target->source.store(peer, std::memory_order_relaxed);
      if (c.target->recv_data.size() != c.len) {
        c.target->complete_locked(
            C10D_ERROR(InvalidArgument,
                       "{}: size mismatch: the receive buffer has {} bytes but the message "
                       "from peer rank {} has {} bytes",
                       c.target->describe(), c.target->recv_data.size(), peer, c.len));
        c.target.reset();
      } else {
        c.target->in_flight = true;
        c.into = c.target->recv_data;
      }
    } else {
      const auto now = Clock::now();
      if (c.len >= kParkBytes && !c.dead && !aborted) {
        if (!c.parked) {
          c.parked = true;
          c.parked_tag = c.tag;
          c.park_deadline = now + kParkGrace;
          asio::post(io, [self = shared_from_this(), peer] {
            auto timer = std::make_shared<asio::steady_timer>(self->io, kParkGrace);
            timer->async_wait([self, timer, peer](error_code) { self->try_drain(peer); });
          });
          return false;
        }
        if (now < c.park_deadline) return false;
      }
      if (!hold_locked(c, peer, transport::kUnexpectedOverheadBytes)) return false;
      c.entry = std::make_shared<Unexpected>(peer, c.len);
      matcher.push_unexpected(peer, c.tag, c.entry);
      // A small payload is most likely in c.ahead already: its one chunk now, under this lock.
      if (c.len > 0 && c.len <= kReadAhead) {
        if (!hold_locked(c, peer, c.len)) return false;
        c.into = c.entry->data.span_at(0);
      }
    }
    c.parked = false;
    c.in_payload = true;
    return true;
  }

  // The payload in front is all here: complete its irecv, or offer the buffered message.
  void finish_payload(Connection& c, int peer) {
    std::lock_guard lock(mu_);
    c.in_payload = false;
    c.header_got = 0;
    if (c.abort_body) {
      c.abort_body = false;
      c.read_closed.store(true);
      // Blaming a rank outside the group, or this one, is a peer's garbage: blame no one. A rank
      // of the group that made no progress (sent as -2 - rank, decoded with `stalled`) stands,
      // and this rank's own notice says so too.
      const AbortNotice notice =
          heard_abort_notice(decode_abort_notice({c.sink.get(), static_cast<std::size_t>(c.len)}),
                             rank, static_cast<int>(conns.size()));
      kill_locked(peer, {},
                  C10D_ERROR(NetworkError, "rank {}: {}", rank, describe_failure(notice, peer)),
                  /*fatal=*/true, Blame{notice.lost_rank, notice.stalled});
      return;
    }
    if (c.target) {
      c.target->complete_locked(nullptr);
      c.target.reset();
      return;
    }
    if (!c.entry) return;  // dropped
    std::shared_ptr<Unexpected> entry = std::move(c.entry);
    entry->complete = true;
    // Dropped (a failure, a size mismatch), or still queued for a receive to come.
    if (entry->dropped || !entry->waiter) return;
    // Taken while on the wire: hand over.
    entry->data.copy_to(entry->waiter->recv_data);
    entry->waiter->complete_locked(nullptr);
    release_locked(*entry);
    c.claimed.reset();
  }

  void submit(const std::shared_ptr<Op>& op) {
    std::unique_lock lock(mu_);
    if (auto refusal = refusal_locked(*op)) {
      op->complete_locked(std::move(refusal));
      return;
    }
    if (op->is_send) {
      Connection& c = *conns[static_cast<std::size_t>(op->peer)];
      // A small send on an idle connection is written here, on the caller's thread: handing it
      // to the io thread would cost a wake-up, longer than the write. Under mu_, so the io
      // thread cannot close the socket meanwhile; the write never blocks.
      if (!c.writing && c.sends.empty() && !c.dead && op->bytes() <= kDirectWriteBytes &&
          write_some(c, *op, kDirectWriteBytes)) {
        op->complete_locked(nullptr);
        return;
      }
      c.sends.push_back(op);
      // A thread polling in Request::wait writes it (progress_sends); with none, the io thread.
      // Read under mu_: a poller that leaves checks the queues under mu_ after it has counted
      // itself out, so the send is never left to nobody.
      if (progressors.load() > 0) return;
      lock.unlock();
      asio::post(io, [self = shared_from_this(), peer = op->peer] { self->write_next(peer); });
      return;
    }
    submit_receive_locked(op);
  }

  // Requires mu_: a receive, not refused, is posted. It takes the unexpected entry the matcher
  // finds for it (an any-source one after its claim), else waits in the matcher's queue.
  void submit_receive_locked(const std::shared_ptr<Op>& op) {
    if (op->claim && op->claim->taken_by_other(op.get())) {
      op->complete_locked(nullptr);  // the receive completed on another transport
      return;
    }
    const auto found = matcher.find_unexpected(op->peer, op->tag);
    if (!found) {
      if (op->any_source()) {
        if (auto none = no_sender_locked()) {
          refuse_any_source_locked(*op, std::move(none));
          return;
        }
        matcher.post(op->peer, op->tag, op);
        // A message for it parked in a socket (see drain) comes in now.
        for (std::size_t p = 0; p < conns.size(); ++p) {
          if (conns[p] && conns[p]->parked && conns[p]->parked_tag == op->tag) {
            asio::post(io, [self = shared_from_this(), peer = static_cast<int>(p)] {
              self->try_drain(peer);
            });
          }
        }
        return;
      }
      Connection& c = *conns[static_cast<std::size_t>(op->peer)];
      if (c.dead) {
        op->complete_locked(c.dead);
        return;
      }
      matcher.post(op->peer, op->tag, op);
      if (c.parked && c.parked_tag == op->tag) {
        asio::post(io, [self = shared_from_this(), peer = op->peer] { self->try_drain(peer); });
      }
      return;
    }
    if (op->claim && !op->claim->take(op.get())) {
      op->complete_locked(nullptr);  // the other part took the claim just now; the entry stays
      return;
    }
    const int peer = found->peer;
    Connection& c = *conns[static_cast<std::size_t>(peer)];
    const std::shared_ptr<Unexpected> u = matcher.take(*found);
    op->source.store(peer, std::memory_order_relaxed);
    if (u->data.size() != op->recv_data.size()) {
      // The message is dropped, the rest of it unread if it is still arriving.
      op->complete_locked(
          C10D_ERROR(InvalidArgument,
                     "{}: size mismatch: the receive buffer has {} bytes but the message from "
                     "peer rank {} has {} bytes",
                     op->describe(), op->recv_data.size(), peer, u->data.size()));
    } else if (!u->complete) {
      u->waiter = op;  // finish_payload hands it over
      op->in_flight = true;
      c.claimed = u;
      return;
    } else {
      u->data.copy_to(op->recv_data);
      op->complete_locked(nullptr);
    }
    release_locked(*u);
  }

  // Writes as much of `op`'s frame, up to `cap` bytes of payload, as the socket takes without
  // blocking; true when all of it has gone. The caller owns the connection's write side (mu_
  // held, or `writing` set). A failure other than a full socket sets `*error` to its errno when
  // given; pollers leave it to the io thread to meet again and report.
  static bool write_some(Connection& c, Op& op, std::size_t cap, int* error = nullptr) {
    const std::size_t head = op.header.size();
    const std::size_t total = head + op.send_data.size();
    const std::size_t skip = op.written;
    iovec iov[2];
    int n_iov = 0;
    if (skip < head) iov[n_iov++] = {op.header.data() + skip, head - skip};
    const std::size_t from = skip > head ? skip - head : 0;
    if (from < op.send_data.size()) {
      iov[n_iov++] = {const_cast<std::byte*>(op.send_data.data()) + from,
                      std::min(op.send_data.size() - from, cap)};
    }
    if (n_iov == 0) return true;
    msghdr msg{};
    msg.msg_iov = iov;
    msg.msg_iovlen = static_cast<std::size_t>(n_iov);
    const ssize_t n = ::sendmsg(c.wfd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n > 0) op.written += static_cast<std::size_t>(n);
    if (n < 0 && error != nullptr && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
      *error = errno;
    }
    return op.written == total;
  }

  // A polling thread: writes what the sockets take of every idle connection's queued sends,
  // at most kProgressWriteBytes per call and connection, so that reads interleave. The
  // connection is marked `writing` meanwhile, so neither the io thread nor another poller
  // writes it too; the fd is never closed while the transport lives (kill_locked).
  void progress_sends() {
    for (std::size_t p = 0; p < conns.size(); ++p) {
      Connection* c = conns[p].get();
      if (c == nullptr) continue;
      std::shared_ptr<Op> op;
      {
        std::lock_guard lock(mu_);
        if (c->writing || c->sends.empty() || c->dead || aborted) continue;
        op = c->sends.front();
        op->in_flight = true;
        c->writing = true;
      }
      const bool all = write_some(*c, *op, kProgressWriteBytes);
      std::lock_guard lock(mu_);
      c->writing = false;
      // The op is still the queue's front: fail_queued_locked leaves an in-flight send alone.
      if (all) {
        c->sends.pop_front();
        op->complete_locked(nullptr);
      } else if (aborted || c->dead) {  // failed meanwhile: this send will never go
        c->sends.pop_front();
        op->complete_locked(aborted ? aborted : c->dead);
      } else {
        op->in_flight = false;
      }
    }
  }

  // A waiter for a large message after its spin window (TCPRequest::wait): it goes on moving
  // the bytes itself, sleeping in poll(2) on exactly the sockets it needs: its peer's for a
  // receive (unless the message in front there is parked for another receive), and every
  // connection with queued sends that nobody is writing. Readiness wakes this thread directly,
  // instead of the io thread (epoll), which then completes the op and wakes this thread through
  // the op's condition variable: two wake-ups per segment on cores both ranks keep busy. The
  // poll lasts at most kDriveSlice, so a completion by another thread (or a failure) is seen
  // soon. The caller counts as a progressor and, for a receive, as a poller of the connection,
  // so the io thread stays away meanwhile. True once `op` is done; false at the deadline.
  bool drive_until(const Op& op, Clock::time_point deadline) {
    std::vector<pollfd> fds;
    auto last_ready = Clock::now();
    for (;;) {
      if (op.done.load(std::memory_order_acquire)) return true;
      progress_sends();
      for_each_source(op, [&](int peer) { try_drain(peer); });
      if (op.done.load(std::memory_order_acquire)) return true;
      const auto now = Clock::now();
      if (now >= deadline) return false;
      fds.clear();
      {
        std::lock_guard lock(mu_);
        // Aborted: abort_locked fails the op, which the next turn sees; meanwhile just sleep.
        for (std::size_t p = 0; p < conns.size() && !aborted; ++p) {
          Connection* c = conns[p].get();
          if (c == nullptr || c->dead) continue;
          if (reads_from(op, static_cast<int>(p)) && !c->parked) {
            fds.push_back({c->fd, POLLIN, 0});
          }
          if (!c->writing && !c->sends.empty()) fds.push_back({c->wfd, POLLOUT, 0});
        }
      }
      const bool hot = hot_drive && now - last_ready < kDriveSpin;
      const auto slice = std::min<Clock::duration>(deadline - now, kDriveSlice);
      const int ms =
          hot ? 0 : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(slice).count());
      if (::poll(fds.data(), fds.size(), ms) > 0) last_ready = Clock::now();
    }
  }

  // Whether `op` waits for bytes from `peer`: a receive from it, or an any-source receive.
  static bool reads_from(const Op& op, int peer) {
    return !op.is_send && (op.peer == peer || op.any_source());
  }
  // fn(peer) for each peer whose socket `op` waits to read (reads_from).
  template <typename Fn>
  void for_each_source(const Op& op, Fn&& fn) {
    if (op.is_send) return;
    if (!op.any_source()) {
      fn(op.peer);
      return;
    }
    for (std::size_t p = 0; p < conns.size(); ++p) {
      if (conns[p]) fn(static_cast<int>(p));
    }
  }

  // A poller counts itself out; the last one hands queued sends to the io thread.
  void leave_progress() {
    if (progressors.fetch_sub(1) != 1) return;
    std::lock_guard lock(mu_);
    for (std::size_t p = 0; p < conns.size(); ++p) {
      Connection* c = conns[p].get();
      if (c == nullptr || c->writing || c->sends.empty()) continue;
      asio::post(
          io, [self = shared_from_this(), peer = static_cast<int>(p)] { self->write_next(peer); });
    }
  }

  void cancel(const std::shared_ptr<Op>& op) {
    std::unique_lock lock(mu_);
    if (op->done) return;
    if (op->in_flight) {  // a writer (io thread or poller) holds its buffer: wait for the end
      op->cv.wait(lock, [&] { return op->done.load(); });
      return;
    }
    if (op->is_send) {
      std::erase(conns[static_cast<std::size_t>(op->peer)]->sends, op);
    } else {
      matcher.cancel(op->peer, op);
    }
  }

  void abort(std::exception_ptr reason, bool orderly = false) {
    // An op that timed out names the rank it found stalled (PeerTimeout): the notice passes that
    // on, so the others blame it rather than this rank, which only gave up waiting.
    int stalled = -1;
    try {
      if (reason) std::rethrow_exception(reason);
    } catch (const transport::PeerTimeout& t) {
      stalled = t.peer();
    } catch (...) {
    }
    std::lock_guard lock(mu_);
    abort_locked(std::move(reason), orderly ? -1 : stalled, orderly, stalled >= 0);
  }

  // Fails everything with `reason` and closes every connection after a last frame: a goodbye
  // when `orderly`, else an abort notice naming `lost_rank` (the peer whose loss caused this, or
  // the one that made no progress when `stalled`, or -1) so that the other ranks learn the first
  // cause rather than this rank's reaction to it.
  void abort_locked(std::exception_ptr reason, int lost_rank = -1, bool orderly = false,
                    bool stalled = false) {
    if (aborted) return;
    aborted = std::move(reason);
    if (on_abort) {
      // A callback that throws must not leave the abort half done (or unwind the io thread).
      try {
        on_abort(aborted);
      } catch (...) {
        C10D_LOG_ERROR("rank {}: TCPTransportOptions::on_abort threw: {}", rank,
                       what_of(std::current_exception()));
      }
    }
    for (std::size_t p = 0; p < conns.size(); ++p) {
      if (conns[p]) fail_queued_locked(*conns[p], static_cast<int>(p), aborted, true);
    }
    fail_any_source_locked(aborted);
    std::vector<std::byte> frame;
    std::optional<AbortNotice> notice;
    if (orderly) {
      const auto goodbye = encode_frame_header(kGoodbyeTag, 0);
      frame.assign(goodbye.begin(), goodbye.end());
    } else {
      notice = AbortNotice{lost_rank, what_of(aborted), stalled};
      frame = encode_abort_notice(*notice);
    }
    asio::post(io, [self = shared_from_this(), frame = std::move(frame), notice] {
      if (notice) self->publish_failure(*notice);
      self->send_last_frame_and_close(frame);
    });
  }
};

namespace {

class TCPRequest final : public transport::Request {
 public:
  TCPRequest(std::shared_ptr<TCPTransport::Impl> impl, std::shared_ptr<Op> op)
      : impl_(std::move(impl)), op_(std::move(op)) {}
  ~TCPRequest() override { impl_->cancel(op_); }
  bool test() override {
    if (!op_->done.load(std::memory_order_acquire)) {
      if (op_->any_source()) {
        impl_->poll_drain_any(fds_, fd_peers_);
      } else if (!op_->is_send) {
        impl_->try_drain(op_->peer);
      }
    }
    if (!op_->done.load(std::memory_order_acquire)) return false;
    if (op_->error) std::rethrow_exception(op_->error);
    return true;
  }
  int source() const override { return op_->source.load(std::memory_order_acquire); }
  transport::PeerActivity heard() const override {
    return op_->any_source() ? transport::PeerActivity{} : impl_->heard_from(op_->peer);
  }
  void wait(Clock::time_point deadline) override {
    // Poll first: write queued sends and read the sockets of the peers it waits for ourselves
    // (see drain and progress_sends). Before sleeping, make sure the io thread watches them
    // again.
    TCPTransport::Impl& state = *impl_;
    state.progressors.fetch_add(1);
    state.for_each_source(*op_, [&](int peer) {
      Connection& c = *state.conns[static_cast<std::size_t>(peer)];
      c.pollers.fetch_add(1);
      c.polls.fetch_add(1, std::memory_order_relaxed);
    });
    bool done = core::spin_until(
        [&] {
          if (op_->done.load(std::memory_order_acquire)) return true;
          state.progress_sends();
          if (op_->any_source()) {
            state.poll_drain_any(fds_, fd_peers_);
          } else if (!op_->is_send) {
            state.poll_drain(op_->peer);
          }
          return op_->done.load(std::memory_order_acquire);
        },
        deadline,
        op_->bytes() <= kLongPollBytes ? kLongPollScale * core::spin_window()
                                       : core::spin_window());
    if (!done && op_->bytes() > kLongPollBytes) done = state.drive_until(*op_, deadline);
    // A receive about to sleep counts itself before it stops polling, so that the last poller
    // to leave, whose own op may be done, has the io thread watch for it.
    const bool sleeps = !op_->is_send && !done;
    state.for_each_source(*op_, [&](int peer) {
      Connection& c = *state.conns[static_cast<std::size_t>(peer)];
      if (sleeps) c.sleepers.fetch_add(1);
      if (c.pollers.fetch_sub(1) == 1 && c.sleepers.load() > 0) {
        asio::post(state.io, [impl = impl_, peer] { impl->watch_for_sleeper(peer); });
      }
    });
    state.leave_progress();
    std::unique_lock lock(state.mu_);
    const bool completed = op_->cv.wait_until(lock, deadline, [&] { return op_->done.load(); });
    if (sleeps) {
      state.for_each_source(*op_, [&](int peer) {
        state.conns[static_cast<std::size_t>(peer)]->sleepers.fetch_sub(1);
      });
    }
    if (!completed) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - op_->posted_at)
              .count();
      if (op_->any_source()) {
        throw transport::any_source_timeout(op_->describe(), op_->tag, op_->posted_at);
      }
      const transport::PeerActivity heard = state.heard_from(op_->peer);
      throw transport::PeerTimeout(
          core::with_location(__FILE__, __LINE__,
                              fmt::format("{} timed out: not done {} ms after posting; {}",
                                          op_->describe(), ms, transport::heard_string(heard))),
          op_->peer, heard);
    }
    lock.unlock();
    if (op_->error) std::rethrow_exception(op_->error);
  }

 private:
  std::shared_ptr<TCPTransport::Impl> impl_;
  std::shared_ptr<Op> op_;
  // An any-source receive's poll(2) set (Impl::poll_drain_any), kept across turns.
  std::vector<pollfd> fds_;
  std::vector<int> fd_peers_;
};

}  // namespace

TCPTransport::TCPTransport(std::shared_ptr<Store> store, int rank, int world_size,
                           std::string group_name, TCPTransportOptions options)
    : rank_(rank), world_size_(world_size), impl_(std::make_shared<Impl>()) {
  C10D_CHECK(store != nullptr, "TCPTransport rank {}: needs a store", rank);
  C10D_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
             "TCPTransport: rank {} is outside a world of size {}", rank, world_size);
  impl_->rank = rank;
  impl_->who = fmt::format("rank {}", rank);
  impl_->fail_all_on_peer_loss = options.fail_all_on_peer_loss;
  impl_->on_abort = std::move(options.on_abort);
  impl_->max_unexpected = transport::max_unexpected_bytes(options.max_unexpected_bytes);
  impl_->store = store;
  impl_->failure_key = fmt::format("{}/failure", group_name);
  impl_->own_key = fmt::format("{}/addr/{}", group_name, rank);
  auto watch = options.setup_watch;
  if (!watch) watch = std::make_shared<backends::SetupWatch>(store, group_name, rank);
  impl_->stall_prefix = fmt::format("{}/stall/{}/", group_name, watch->attempt());
  try {
    // Before a deadline is computed from it: a timeout past kMaxTimeout would wrap it.
    core::check_timeout(options.timeout, fmt::format("TCPTransport rank {}", rank));
    set_up(store.get(), group_name, options, Clock::now() + options.timeout, *watch);
  } catch (...) {
    watch->fail(std::current_exception());  // records why, for the other ranks' set-up waits
  }
}

void TCPTransport::set_up(Store* store, const std::string& group_name,
                          const TCPTransportOptions& options, Clock::time_point deadline,
                          backends::SetupWatch& watch) {
  const int rank = rank_;
  const int world_size = world_size_;
  auto& io = impl_->io;

  // Before anything is published: a rank that cannot hold its sockets fails at once (and
  // records why, for its peers).
  ensure_descriptors(rank, world_size);
  // After the check above, which bounds the world size by the descriptors it needs.
  impl_->conns.resize(static_cast<std::size_t>(world_size));
  impl_->matcher = decltype(impl_->matcher)(world_size, impl_->max_unexpected, options.arrivals);
  C10D_CHECK(group_name.size() <= kMaxGroupBytes,
             "TCPTransport rank {}: group name of {} bytes exceeds the limit of {}", rank,
             group_name.size(), kMaxGroupBytes);
  const SetupContext setup{Identity{static_cast<std::uint32_t>(world_size),
                                    static_cast<std::uint32_t>(rank), group_name},
                           transport_key(*store, options.token, rank), deadline, options.timeout,
                           &watch};
  error_code host_ec;
  const auto host_address = asio::ip::make_address(options.host, host_ec);
  C10D_CHECK(!host_ec, "TCPTransport rank {}: cannot listen on \"{}\": not an IP address ({})",
             rank, options.host, host_ec.message());
  const tcp::endpoint listen_at(host_address, 0);
  // Socket buffers are left to the kernel's autotuning (net.ipv4.tcp_wmem and tcp_rmem), which
  // grows each connection's buffers to what its path needs. A fixed 8 MiB (SO_SNDBUF and
  // SO_RCVBUF, which turn autotuning off) measured slower on loopback (all_to_all of 64 MiB over
  // 4 ranks: 37.5 against 34.5 ms; docs/benchmarks.md), and on a real network would cap a path
  // whose bandwidth-delay product is larger.
  tcp::acceptor acceptor(io);
  error_code listen_ec;
  acceptor.open(listen_at.protocol(), listen_ec);
  if (!listen_ec) acceptor.bind(listen_at, listen_ec);
  if (!listen_ec) acceptor.listen(asio::socket_base::max_listen_connections, listen_ec);
  if (!listen_ec) acceptor.non_blocking(true, listen_ec);
  if (listen_ec) {
    C10D_THROW(NetworkError, "rank {}: cannot listen on {}: {}", rank, options.host,
               listen_ec.message());
  }
  // A cause left by an earlier group of this name must not explain this one's failures. Every
  // other rank connects to rank 0 first, so none can publish before this.
  if (rank == 0) store->delete_key(impl_->failure_key);
  store->set(impl_->own_key, fmt::format("{}:{}", options.host, acceptor.local_endpoint().port()));

  // Two connections per pair of ranks, one per direction: each rank connects to every peer and
  // writes only there, and reads on the connection the peer made (Connection). It connects to
  // the lower ranks, accepts every peer, then connects to the higher ranks. A rank answers
  // handshakes only while it accepts, and in this order no two ranks wait for each other's
  // answer: rank 0 accepts at once, every rank reaches its accepting once the lower ones do, and
  // leaves it once the lower ones, done accepting, have connected to it.
  std::vector<std::optional<tcp::socket>> outs(static_cast<std::size_t>(world_size));
  for (int peer = 0; peer < rank; ++peer) {
    outs[peer].emplace(connect_to_peer(io, *store, setup, peer));
  }
  // Every peer connects here and proves itself; strangers never take a rank's place.
  std::vector<std::optional<tcp::socket>> ins = accept_peers(acceptor, setup);
  // No one connects to this rank after setup: a connection made later finds nothing listening.
  acceptor.close();
  for (int peer = rank + 1; peer < world_size; ++peer) {
    outs[peer].emplace(connect_to_peer(io, *store, setup, peer));
  }
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer == rank) continue;
    const auto p = static_cast<std::size_t>(peer);
    impl_->conns[p] = std::make_unique<Connection>(std::move(*ins[p]), std::move(*outs[p]));
    impl_->watch(peer);
  }
  // Bytes that arrived during setup raised their readiness edge before anyone waited for it.
  asio::post(impl_->io, [impl = impl_.get(), world_size] {
    for (int peer = 0; peer < world_size; ++peer) {
      if (peer != impl->rank) impl->try_drain(peer);
    }
  });
  impl_->guard.emplace(asio::make_work_guard(io));
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

TCPTransport::~TCPTransport() {
  // Not aborted before: an orderly close, announced with a goodbye.
  impl_->abort(C10D_ERROR(NetworkError, "rank {}: the TCP transport was destroyed", rank_),
               /*orderly=*/true);
  // After close_all the read loops and writes end with errors; then, without the guard, run()
  // returns.
  asio::post(impl_->io, [impl = impl_.get()] { impl->guard.reset(); });
  impl_->thread.join();
}

std::unique_ptr<transport::Request> TCPTransport::isend(int peer, Tag tag,
                                                        std::span<const std::byte> data) {
  C10D_CHECK(peer >= 0 && peer < world_size_ && peer != rank_,
             "rank {} isend ({}): bad peer {} in a world of size {}", rank_,
             transport::tag_string(tag), peer, world_size_);
  auto op = std::make_shared<Op>();
  op->self = rank_;
  op->peer = peer;
  op->tag = tag;
  op->is_send = true;
  op->send_data = data;
  op->header = encode_frame_header(tag, data.size());
  impl_->submit(op);
  return std::make_unique<TCPRequest>(impl_, std::move(op));
}

std::unique_ptr<transport::Request> TCPTransport::irecv(int peer, Tag tag,
                                                        std::span<std::byte> data) {
  C10D_CHECK(peer >= 0 && peer < world_size_ && peer != rank_,
             "rank {} irecv ({}): bad peer {} in a world of size {}", rank_,
             transport::tag_string(tag), peer, world_size_);
  auto op = std::make_shared<Op>();
  op->self = rank_;
  op->peer = peer;
  op->tag = tag;
  op->recv_data = data;
  impl_->submit(op);
  return std::make_unique<TCPRequest>(impl_, std::move(op));
}

std::unique_ptr<transport::Request> TCPTransport::irecv_any(Tag tag, std::span<std::byte> data) {
  return irecv_any(tag, data, nullptr);
}

std::unique_ptr<transport::Request> TCPTransport::irecv_any(
    Tag tag, std::span<std::byte> data, std::shared_ptr<transport::SourceClaim> claim) {
  auto op = std::make_shared<Op>();
  op->self = rank_;
  op->peer = transport::kAnySource;
  op->tag = tag;
  op->recv_data = data;
  op->claim = std::move(claim);
  impl_->submit(op);
  return std::make_unique<TCPRequest>(impl_, std::move(op));
}

TCPTransport::AnySourceSleep::AnySourceSleep(TCPTransport& tcp) : impl_(tcp.impl_) {
  impl_->enter_sleep_any();
}

TCPTransport::AnySourceSleep::~AnySourceSleep() { impl_->leave_sleep_any(); }

std::optional<std::uint64_t> TCPTransport::earliest_unexpected(Tag tag) const {
  std::lock_guard lock(impl_->mu_);
  const auto found = impl_->matcher.find_unexpected(transport::kAnySource, tag);
  if (!found) return std::nullopt;
  return impl_->matcher.arrival(*found);
}

std::shared_ptr<transport::ArrivalClock> TCPTransport::arrivals() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->matcher.arrivals();
}

transport::StallReport TCPTransport::find_stalled(int peer, std::string_view doing,
                                                  std::chrono::milliseconds window) {
  return impl_->find_stalled(peer, doing, window);
}

void TCPTransport::abort(std::exception_ptr reason) {
  if (!reason) {
    reason = C10D_ERROR(NetworkError, "rank {} aborted its transport", rank_);
  }
  impl_->abort(std::move(reason));
}

}  // namespace c10d::inline v1::gloo_like
