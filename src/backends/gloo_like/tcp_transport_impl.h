// TCPTransport's shared state, TCPTransport::Impl, and the parts of the transport that work on
// it, one file each (as gloo splits its transport into device, context, listener, pair, buffer):
//   tcp_transport.cc   the public class: argument checks, posting, abort
//   tcp_setup.cc       listen, publish the address, the eager mesh; the io thread
//   tcp_connect.cc     connections on first use: connector threads, the reverse watch
//   tcp_accept.cc      the io thread's listener: handshakes answered as their bytes come
//   tcp_connection.h   one peer's state (Connection), its sockets' states, who moves their bytes
//   tcp_reader.cc      frames off a peer's socket: headers, into-place reads, the read-ahead
//   tcp_matching.cc    where a message goes: its receive, an unexpected entry, or parked
//   tcp_writer.cc      queued sends, gather writes, hand-over between poster, waiter, io thread
//   tcp_wait.cc        Request::wait/test: polling, drive_until, sleeping
//   tcp_watch.cc       the io thread's watch on the sockets nobody polls
//   tcp_failure.cc     abort, abort notices, goodbye, peer loss
//   tcp_records.cc     the failure and stall records in the store
// Requests hold Impl by shared_ptr, and so may outlive the TCPTransport that made them.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "backends/gloo_like/tcp_connection.h"
#include "backends/gloo_like/tcp_handshake.h"
#include "backends/gloo_like/tcp_transport.h"
#include "backends/gloo_like/tcp_wire.h"
#include "core/check.h"
#include "store/asio.h"
#include "transport/matcher.h"
#include "transport/transport.h"

struct pollfd;

namespace c10d::inline v1::gloo_like {

// Names every part of the transport uses (the files listed above).
namespace asio = boost::asio;
using boost::system::error_code;
using tcp_detail::Connection;
using transport::Clock;

namespace tcp_detail {

// Whom a failing rank's abort notice names (AbortNotice::lost_rank and stalled).
struct Blame {
  int rank = kNoLostRank;  // no one
  bool stalled = false;    // `rank` made no progress (else it is gone)

  static Blame gone(int peer) { return {peer, false}; }
  static Blame made_no_progress(int peer) { return {peer, true}; }
};

// The last frame a transport going down sends on each idle connection (tcp_wire.h).
enum class LastFrame {
  kAbortNotice,  // it failed: the notice names the first cause (Blame)
  kGoodbye,      // an orderly close: its peers keep their other connections
};

// How a peer's connection ended. A failure (the stream broke, an abort notice, a frame of no
// protocol) aborts the whole transport under fail_all_on_peer_loss; a goodbye never does.
enum class PeerEnd { kFailure, kGoodbye };

// What TCPTransport::Impl::kill_locked records: why the connection to a peer is gone.
struct PeerLoss {
  std::exception_ptr why;        // null: a loss caused by `ec`
  boost::system::error_code ec;  // the socket error, when `why` is null
  PeerEnd end = PeerEnd::kFailure;
  std::optional<Blame> blame;  // whom this rank's abort notice names; none: the peer, gone
};

// When a peer's queued ops fail, what becomes of its messages that arrived whole: kept, since a
// peer that sent and then closed its end has still sent them, or dropped (an abort).
enum class ArrivedMessages { kKeep, kDrop };

// The message of an exception, for an error that wraps it.
using core::what_of;

// A connection the io thread accepted whose handshake is under way (tcp_accept.cc), until it
// proves itself, fails, or its time is up (`expiry`).
struct PendingAccept {
  PendingAccept(PendingHandshake h, boost::asio::io_context& io)
      : handshake(std::move(h)), expiry(io) {}
  PendingHandshake handshake;
  boost::asio::steady_timer expiry;
  bool gone = false;  // left the list: its handlers do nothing more
};

// A lazy transport's listener after set-up (tcp_accept.cc): io thread only.
struct Accepting {
  Accepting(boost::asio::ip::tcp::acceptor a, SetupContext c)
      : acceptor(std::move(a)), ctx(std::move(c)), log(ctx.self.rank, "while accepting peers") {}
  boost::asio::ip::tcp::acceptor acceptor;  // nonblocking
  SetupContext ctx;  // this rank and the key; no deadline (each pending one has its own)
  RefusalLog log;
  std::list<std::shared_ptr<PendingAccept>> pending;  // at most kMaxPendingHandshakes
  int joined = 0;                                     // peers whose read side is attached
};

}  // namespace tcp_detail

struct TCPTransport::Impl : std::enable_shared_from_this<Impl> {
  using Op = tcp_detail::Op;
  using Unexpected = tcp_detail::Unexpected;
  using Connection = tcp_detail::Connection;
  using Blame = tcp_detail::Blame;
  using PeerLoss = tcp_detail::PeerLoss;
  using ArrivedMessages = tcp_detail::ArrivedMessages;
  using LastFrame = tcp_detail::LastFrame;
  using error_code = boost::system::error_code;

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
  boost::asio::io_context io;
  std::vector<std::unique_ptr<Connection>> conns;  // by peer rank; null for self
  std::thread thread;
  // Keeps the io thread's run() going until the destructor.
  std::optional<boost::asio::executor_work_guard<boost::asio::io_context::executor_type>> guard;
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

  // ---- Connections on first use (tcp_connect.cc, tcp_accept.cc). ----
  bool lazy = false;
  // lazy and fail_all_on_peer_loss: a thread looks for failure records (watch_failures).
  bool watch_failures = false;
  std::function<bool()> pending_elsewhere;  // TCPTransportOptions::pending_elsewhere
  std::vector<char> elsewhere;  // GUARDED_BY(mu_), by rank: TCPTransport::carried_elsewhere
  std::thread failure_watch;    // joined by ~TCPTransport
  std::condition_variable failure_watch_cv;  // waits on mu_: closing
  // What a connector's handshake brings (its deadline set per connect); a connect's waits look
  // at the set-up watch too, for a rank that failed its set-up after publishing its address.
  SetupContext connect_ctx;
  std::shared_ptr<backends::SetupWatch> setup_watch;
  std::atomic<bool> closing{false};     // set by abort_locked: connects stop (SetupContext)
  std::deque<int> connect_queue;        // GUARDED_BY(mu_): peers to connect to, in order
  std::vector<std::thread> connectors;  // GUARDED_BY(mu_); joined by ~TCPTransport
  int idle_connectors = 0;              // GUARDED_BY(mu_)
  std::condition_variable connect_cv;   // waits on mu_: a peer queued, or closing
  std::unique_ptr<tcp_detail::Accepting> accepting;  // io thread only, after set-up

  Connection& conn(int peer) { return *conns[static_cast<std::size_t>(peer)]; }
  const Connection& conn(int peer) const { return *conns[static_cast<std::size_t>(peer)]; }

  // ---- Set-up and the io thread (tcp_setup.cc). ----
  void run();

  // ---- Connecting on first use (tcp_connect.cc). ----
  void want_connection_locked(int peer, bool to_send);
  void connect_loop();
  void connect(int peer);
  void attach_write(int peer, boost::asio::ip::tcp::socket s);
  void connect_failed(int peer, std::exception_ptr e);
  void watch_reverse(int peer);
  void read_reverse(int peer);
  void stop_reverse(Connection& c);
  void join_connectors();
  bool pending_locked() const;
  std::string connection_note(int peer);

  // ---- Accepting on the io thread (tcp_accept.cc). ----
  void start_accepting();
  void accept_pending();
  void step_handshake(const std::shared_ptr<tcp_detail::PendingAccept>& p);
  void drop_pending(const std::shared_ptr<tcp_detail::PendingAccept>& p);
  void attach_read(int peer, boost::asio::ip::tcp::socket s);
  void stop_accepting();

  // ---- Reader (tcp_reader.cc): frames off read_fd, by the read_owner holder. ----
  void try_drain(int peer);
  void drain(Connection& c, int peer);
  bool next_window(Connection& c, int peer);
  static std::span<std::byte> sink(Connection& c);
  static std::size_t take_ahead(Connection& c, std::byte* to, std::size_t want);
  bool read_ahead(Connection& c, int peer, bool& empty);
  bool read_failed(Connection& c, int peer, ssize_t n);
  bool read_frame_header(Connection& c, int peer);

  // ---- Matching (tcp_matching.cc): receives, unexpected entries, parking. ----
  bool start_payload_locked(Connection& c, int peer);
  void finish_payload(Connection& c, int peer);
  void submit_receive_locked(const std::shared_ptr<Op>& op);
  bool hold_locked(Connection& c, int peer, std::uint64_t bytes);
  void release_locked(Unexpected& u);
  std::exception_ptr refusal_locked(const Op& op);
  std::exception_ptr no_sender_locked() const;
  void fail_any_source_locked(std::exception_ptr e = nullptr);
  static void refuse_any_source_locked(Op& op, std::exception_ptr none);

  // ---- Writer (tcp_writer.cc): write_fd, by its one writer. ----
  void submit(const std::shared_ptr<Op>& op);
  void write_next(int peer);
  void write_on(int peer, std::shared_ptr<Op> op);
  bool hand_back(Connection& c, std::shared_ptr<Op>& op);
  void end_write(int peer, const std::shared_ptr<Op>& op, const error_code& ec);
  static bool write_some(Connection& c, Op& op, std::size_t cap, int* error = nullptr);
  void progress_sends();
  void leave_progress();

  // ---- Requests and the wait policy (tcp_wait.cc). ----
  void poll_drain(int peer);
  void poll_drain_any(std::vector<pollfd>& fds, std::vector<int>& peers);
  bool drive_until(const Op& op, transport::Clock::time_point deadline);
  static bool reads_from(const Op& op, int peer);
  template <typename Fn>
  void for_each_source(const Op& op, Fn&& fn);
  void cancel(const std::shared_ptr<Op>& op);
  // The io thread's watch on read_fd and write_fd.
  boost::asio::posix::stream_descriptor* register_read(Connection& c, error_code& ec);
  boost::asio::posix::stream_descriptor* register_write(Connection& c, error_code& ec);
  boost::asio::posix::stream_descriptor* register_fd(
      std::optional<boost::asio::posix::stream_descriptor>& r, int fd, error_code& ec);
  static void settle(Connection& c);
  void watch(int peer);
  void watch_and_drain(int peer);
  void watch_for_sleeper(int peer);
  void enter_sleep_any();
  void leave_sleep_any();
  static bool polled_since_look(Connection& c);
  void rewatch_later(int peer);

  // ---- Failure (tcp_failure.cc). ----
  void abort(std::exception_ptr reason, LastFrame last = LastFrame::kAbortNotice);
  void abort_locked(std::exception_ptr reason, Blame blame = {},
                    LastFrame last = LastFrame::kAbortNotice);
  void kill_locked(int peer, const error_code& ec);
  void kill_locked(int peer, PeerLoss loss);
  void fail_queued_locked(Connection& c, int peer, const std::exception_ptr& e,
                          ArrivedMessages arrived);
  void defer_write_failure_locked(int peer, std::shared_ptr<Op> op, const error_code& ec);
  void fail_on_exception(const std::exception_ptr& e, const std::string& where);
  void send_last_frame_and_close(const std::vector<std::byte>& frame);
  void close_all();
  static std::string describe_failure(const AbortNotice& notice, int peer);
  void end_of_last_frame(int peer, std::span<const std::byte> frame, const error_code& ec);
  PeerLoss goodbye_loss(int peer) const;
  PeerLoss notice_loss(int peer, std::span<const std::byte> payload) const;
  PeerLoss fault_loss(int peer, FrameFault fault, const FrameHeader& h) const;
  // Failure and stall records in the store (tcp_records.cc).
  void publish_failure(const AbortNotice& notice);
  bool store_reachable();
  std::optional<std::pair<std::string, Blame>> failure_record();
  std::pair<std::exception_ptr, Blame> published_failure(int peer);
  void end_unexplained(int peer, error_code ec);
  void end_unexplained_by(int peer, error_code ec, Clock::time_point until);
  void watch_for_failures();
  bool look_for_failure();
  transport::PeerActivity heard_from(int peer) const;
  transport::StallReport find_stalled(int peer, std::string_view doing,
                                      std::chrono::milliseconds window);
};

namespace tcp_detail {

// The request of `op`, posted on `impl` (tcp_wait.cc).
std::unique_ptr<transport::Request> make_request(std::shared_ptr<TCPTransport::Impl> impl,
                                                 std::shared_ptr<Op> op);

}  // namespace tcp_detail

}  // namespace c10d::inline v1::gloo_like
