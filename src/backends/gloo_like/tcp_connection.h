// The TCP transport's state per op and per peer (tcp_transport_impl.h holds the transport's).
// Words: an *op* is one posted isend or irecv (owned by its request and by whichever queue holds
// it); an op is *in flight* once a thread is writing it or reading its payload; an *unexpected*
// entry is a message that arrived before its irecv.
//
// A peer's sockets, and their states. A peer has up to two sockets (Connection): read_fd, which
// the peer connected and writes its frames to, and write_fd, which this rank connected and
// writes to. Each exists from the moment its handshake succeeds until the transport is freed:
//
//   write side:  kNone --(first isend to the peer, or first irecv from it while the peer has
//                        not connected here)--> kConnecting --(handshake done)--> kOpen
//                kConnecting --(connect or handshake failed)--> kFailed (the peer's loss, below)
//                An eager transport (TCPTransportOptions::connect) opens every one at set-up.
//   read side:   read_fd -1 --(the peer connected and proved itself to the io thread's
//                acceptor)--> attached (set once, never changed)
//   either side: `dead` once the connection is lost (end of stream, a goodbye, an abort notice,
//                a bad frame, a failed connect): no more bytes are moved, queued ops fail.
//
// Frames go forward, from the connecting rank to the accepting one; the accepting rank writes
// nothing back after the handshake but, when its transport goes down, its last frame (a goodbye
// or an abort notice), which always fits since nothing else ever went that way. So a rank that
// only sends to a peer still learns that the peer finished or failed: while its read side is not
// attached the io thread watches write_fd for that frame (through a duplicate descriptor,
// reverse_fd, registered for input only, so that room to write never wakes it); once the peer's
// own connection is there its forward frames say the same.
//
// Who moves a socket's bytes, and when. Three kinds of thread touch them: the *poster* (in
// isend/irecv, TCPTransport::Impl::submit), a *waiter* (in TCPRequest::wait/test, polling or
// driving; tcp_wait.cc) and the *io thread* (Asio handlers and timers); connector threads
// (tcp_connect.cc) only make write sides and hand them over. Each flag below names its owner(s)
// and what guards it; `mu_` is TCPTransport::Impl::mu_, which also guards all matching state.
//
//   Read side of read_fd: one owner at a time, the holder of `read_owner` (try_drain), and only
//   once read_fd is attached (stored with release by the io thread, read with acquire by
//   everyone; a thread that finds -1 leaves it alone).
//   - read_owner: atomic, taken with exchange(true) by any thread and cleared by its holder: a
//     waiter reading its own message, or the io thread (read_fd readable, a park timer, a
//     receive posted for a parked message). Not a mutex: a thread that finds it taken leaves.
//   - drain_again: atomic, set by every thread before it tries read_owner; the holder clears it
//     before each drain and drains again if it was set when it let go, so readiness seen by a
//     thread that lost the race is never lost.
//   - the frame state (header ... ahead_end): the read_owner holder's alone, no lock.
//   - read_closed: atomic, set under mu_ once nothing more is to be read (end of stream, a
//     goodbye, an abort notice, a bad header, the peer past its limit), never cleared; read
//     without mu_ by pollers and the io thread, which then leave the socket alone.
//   - parked, parked_tag: written under mu_ by the read_owner holder (start_payload_locked) and
//     read under mu_ by the poster of a receive (submit_receive_locked), which then has the io
//     thread bring the message in; `parked` is atomic because an any-source poller reads it
//     without mu_ (poll_drain_any) to skip that socket.
//   - claimed: mu_. heard_at, heard_tag: atomic (relaxed), written by the read_owner holder and
//     read by a waiter that timed out, for its report only.
//
//   Write side of write_fd: one writer at a time, chosen under mu_, and only while write_side is
//   kOpen (sends posted before wait in `sends` for it).
//   - write_side, connect_began, sends, writing, failed_write: mu_. A thread that takes the send in
//   front sets `writing`
//     under mu_, writes outside it, and clears it under mu_: the io thread (write_next) or a
//     waiter (progress_sends). The poster writes a small send itself only on an idle connection
//     (!writing, `sends` empty), all under mu_, without setting `writing`: mu_ keeps the others
//     off meanwhile.
//   - TCPTransport::Impl::progressors: atomic count of polling waiters, read under mu_ wherever a
//     decision hangs on it. While it is above 0 waiters write the queues, submit does not wake
//     the io thread, and the io thread hands a send back when its socket fills (hand_back); the
//     last waiter to leave (leave_progress) hands queued sends to the io thread under mu_, so no
//     send is left to nobody.
//   - Op::in_flight: mu_; its buffer is read or written outside mu_, so failing and cancelling
//     leave the op to the thread that moves its bytes.
//
//   The io thread's watch (io thread only, no lock): read_reactor exists only while read_watched
//   (it waits for read_fd to be readable) and write_reactor only while write_waiting (it waits
//   for room to write the send in front); settle() drops them otherwise. polls_seen,
//   rewatch_interval, rewatch_pending: io thread only. pollers, polls, sleepers: atomic, counted
//   by waiters (TCPRequest::wait) and read by the io thread, which watches read_fd only while no
//   waiter polls it; the last poller to leave while a receive sleeps has it watched at once.
//
//   The reverse watch (tcp_connect.cc): reverse_fd, reverse_reactor and last_frame are the io
//   thread's alone; reverse_fd is closed by the io thread once read_fd is attached (no other
//   thread ever uses it).
//
//   `dead`: mu_. Sockets are shut down (kill_locked, close_all) and closed only by ~Connection,
//   when the transport is freed: a thread still reading or writing never meets a reused number.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/gloo_like/tcp_wire.h"
#include "store/asio.h"
#include "transport/matcher.h"
#include "transport/transport.h"
#include "transport/unexpected_buffer.h"

// clang-format off
#include <boost/asio/posix/stream_descriptor.hpp>
// clang-format on

namespace c10d::inline v1::gloo_like::tcp_detail {

// A reader asks the socket for up to this much when it needs a frame header (or the last bytes
// of a small payload), so that a small message's header and payload, and often the next
// frames, come in one recv (see TCPTransport::Impl::drain). Payload remainders this size and up
// are read straight into place.
inline constexpr std::size_t kReadAhead = 4 << 10;
// How often the io thread looks whether it should watch a socket that a waiter is polling:
// after kRewatchInterval, then doubling up to kRewatchMax while waiters keep polling it (a
// program whose thread runs its collectives itself polls nearly all the time; each look costs
// the io thread a wake-up on a shared core).
inline constexpr std::chrono::milliseconds kRewatchInterval{1};
inline constexpr std::chrono::milliseconds kRewatchMax{64};
// Op::source of a receive that has not matched (or lost its claim).
inline constexpr int kNoSource = -1;

struct Op {
  int self = 0;
  int peer = 0;  // transport::kAnySource for irecv_any
  transport::Tag tag = 0;
  transport::Call call = transport::kUnchecked;  // a send's, or what a receive expects
  bool is_send = false;
  std::span<const std::byte> send_data;
  std::span<std::byte> recv_data;
  std::array<std::byte, kFrameHeaderBytes> header{};  // a send's frame header
  std::size_t written = 0;                            // bytes of header + payload already written
  const transport::Clock::time_point posted_at = transport::Clock::now();
  bool in_flight = false;  // GUARDED_BY(Impl::mu_)
  std::atomic<bool> done{false};
  std::exception_ptr error;            // written under Impl::mu_ before `done`
  std::atomic<int> source{kNoSource};  // a receive's sender, set under Impl::mu_ when it matched
  std::condition_variable cv;          // waits on Impl::mu_
  // A part of an any-source receive posted on other transports too (routed_transport.h); null
  // for every other op. Taken before the op takes a message (transport/matcher.h).
  std::shared_ptr<transport::SourceClaim> claim;

  bool any_source() const { return peer == transport::kAnySource; }
  std::size_t bytes() const { return is_send ? send_data.size() : recv_data.size(); }
  std::string describe() const;
  // Requires Impl::mu_. A part that lost its claim completes without a message (and without an
  // error: the receive's outcome is the other part's).
  void complete_locked(std::exception_ptr e) {
    if (claim && !claim->take(this)) {
      e = nullptr;
      source.store(kNoSource, std::memory_order_relaxed);
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
  Unexpected(int from, std::uint64_t size, transport::Call sent)
      : peer(from), data(size), call(sent) {}
  const int peer;
  transport::UnexpectedBuffer data;
  const transport::Call call;  // its frame's
  // GUARDED_BY(Impl::mu_):
  bool complete = false;       // the payload is all here
  bool dropped = false;        // left the queue before it was complete: the rest is read and lost
  std::shared_ptr<Op> waiter;  // an irecv that took it while its payload was on the wire
  // What it counts against the peer's limit (Impl::matcher's hold), from when it is made until
  // its receive took it whole or it was dropped.
  std::uint64_t held() const { return data.allocated() + transport::kUnexpectedOverheadBytes; }
};

// One peer: its two sockets and what reads and writes them (the contract at the top).
// The states of a write side (the contract at the top).
enum class WriteSide { kNone, kConnecting, kOpen, kFailed };

struct Connection {
  explicit Connection(int peer_rank) : peer(peer_rank) {}
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  // Two sockets per peer, one per direction: read_fd is the one the peer connected and writes
  // to, write_fd the one this rank connected. One socket carrying both directions moved a
  // 16 MiB exchange about 20% slower on loopback (c10d-loopback-bench): both directions then
  // take the same socket's lock, and acknowledgements interleave with the data; with the
  // pipelined ring a 2-rank 16 MiB all_reduce took 4.5-5.1 ms against 5.6-6.9
  // (docs/benchmarks.md).
  // Shut down, never closed, before the transport goes (kill_locked); -1 until made. Taken out
  // of the io_context's epoll when they are attached (see read_reactor).
  const int peer;
  std::atomic<int> read_fd{-1};
  std::atomic<int> write_fd{-1};
  WriteSide write_side = WriteSide::kNone;       // GUARDED_BY(Impl::mu_)
  transport::Clock::time_point connect_began{};  // GUARDED_BY(Impl::mu_): for a timeout's report

  // ---- The reverse watch (tcp_connect.cc), io thread only. ----
  // A duplicate of write_fd, watched for the peer's last frame while read_fd is not attached.
  int reverse_fd = -1;
  std::optional<boost::asio::posix::stream_descriptor> reverse_reactor;
  std::vector<std::byte> last_frame;  // what has come of it

  // ---- The io thread's epoll registration (tcp_watch.cc). ----
  // Io thread only: read_fd (write_fd) registered with the io thread's epoll, only while the io
  // thread waits on it (read_watched; write_waiting; Impl::register_read and settle). Asio
  // registers a socket for input edge-triggered whether or not anything waits, so a registered
  // socket wakes the io thread at every message, and on a core the waiter was polling on: a
  // context switch per message (an 8-byte all_reduce of 2 ranks over loopback took 13.9 µs
  // against 7.4 without).
  std::optional<boost::asio::posix::stream_descriptor> read_reactor;
  std::optional<boost::asio::posix::stream_descriptor> write_reactor;
  bool write_waiting = false;  // io thread only: waits in epoll to write the op in front

  // ---- Write side (tcp_writer.cc), GUARDED_BY(Impl::mu_). ----
  std::deque<std::shared_ptr<Op>> sends;  // not yet written
  bool writing = false;
  // A send whose write failed: the read side tells why (an abort notice or a goodbye may still
  // be in the receive buffer), so the op fails when the connection is killed.
  std::shared_ptr<Op> failed_write;

  // ---- Read side (tcp_reader.cc, tcp_matching.cc). ----
  // The read side parks a large message whose irecv is not posted yet (see Impl::drain).
  // Written under mu_; an any-source poller reads `parked` without it (poll_drain_any).
  std::atomic<bool> parked{false};
  transport::Tag parked_tag = 0;
  // The unexpected entry from this peer that a receive took while it was arriving (its waiter):
  // out of the matcher's queue, and still being read (the read side's `entry`).
  std::shared_ptr<Unexpected> claimed;
  std::exception_ptr dead;  // GUARDED_BY(Impl::mu_): why the connection is gone
  // When the read side last took a frame header from the peer, and its tag: what a request that
  // times out waiting for this peer reports (transport::PeerActivity). 0: nothing yet.
  std::atomic<transport::Clock::rep> heard_at{0};
  std::atomic<transport::Tag> heard_tag{0};
  // Whoever holds read_owner reads read_fd: the io thread when it is readable, or a thread
  // waiting for a message from this peer.
  std::atomic<bool> read_owner{false};
  std::atomic<bool> drain_again{false};  // set by a thread that found read_owner taken
  std::atomic<bool> read_closed{false};  // end of stream or error seen; nothing more to read

  // ---- Who polls, and whether the io thread watches (tcp_wait.cc, tcp_watch.cc). ----
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
  bool read_watched = false;     // io thread only: an async_wait for readability is pending
  std::chrono::milliseconds rewatch_interval = kRewatchInterval;  // io thread only
  bool rewatch_pending = false;  // io thread only: a rewatch_later timer runs (one at a time)

  // The frame state, owned by the read_owner holder:
  std::array<std::byte, kFrameHeaderBytes> header{};
  std::size_t header_got = 0;
  bool in_payload = false;
  transport::Tag frame_tag = 0;
  std::uint64_t frame_length = 0;
  transport::Call frame_call = transport::kUnchecked;
  std::uint64_t payload_got = 0;
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
  transport::Clock::time_point park_deadline{};
  // Bytes read from the socket but not consumed yet: [ahead_begin, ahead_end) of `ahead`, made
  // when read_fd is attached.
  std::unique_ptr<std::byte[]> ahead;
  std::size_t ahead_begin = 0;
  std::size_t ahead_end = 0;
};

}  // namespace c10d::inline v1::gloo_like::tcp_detail
