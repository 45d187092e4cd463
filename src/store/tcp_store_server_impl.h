// TCPStoreServer's shared state, TCPStoreServer::Impl, and the parts of the server that work on
// it, one file each (the contract is tcp_store_server.h, the frames wire.h):
//   tcp_store_server.cc             the public class: option checks, bind and listen, the io
//                                   thread, stop, stats
//   tcp_store_server_accept.cc      accepting: the accept loops, the local socket, the connection
//                                   cap and eviction, closing a connection, rate-limited logging,
//                                   shutdown
//   tcp_store_server_connection.cc  one connection's coroutine: reading frames, the handshake
//                                   (HELLO, then AUTH when a token is set), serving in order
//   tcp_store_server_commands.cc    keys, waiters and each command's answer
//   tcp_store_server_flow.cc        back-pressure: buffer accounting, room for large requests and
//                                   answers, the read and write stall watches, flush
//
// Words used here: a *connection* is one accepted socket served by one coroutine; a *frame* is
// one request as drawn in wire.h; a *waiter* is a connection parked until a set of keys exists
// or its deadline passes. Everything runs on the io thread except the public methods, which
// only post to it or read atomics.
#pragma once

#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "c10d/store.h"
#include "store/asio.h"
#include "store/tcp_store_server.h"
#include "store/wire.h"

namespace c10d::inline v1 {

namespace store::tcp_server {

using Clock = std::chrono::steady_clock;
using Socket = boost::asio::generic::stream_protocol::socket;  // a TCP or a Unix stream socket

// Small answers are flushed once this many bytes are pending, so pipelined requests cannot grow
// a connection's output without bound.
constexpr std::size_t kFlushBytes = 256 * 1024;
constexpr std::size_t kInitialReadBuffer = 4096;
// Answers at least this large are written on their own and count against the server's limit on
// unread answers (ServerOptions::max_pending_output_bytes); a connection's smaller ones are
// bounded by kFlushBytes.
constexpr std::size_t kLargeAnswerBytes = 64 * 1024;
// Once its frame is done, a buffer larger than this is given back (the input one shrinks to
// kInitialReadBuffer): one large GET or SET must not pin its size for the connection's life.
constexpr std::size_t kKeepBufferBytes = 64 * 1024;
// Request frames at least this large hold room under ServerOptions::max_pending_input_bytes
// before their body is read; smaller ones never wait, so good clients' small requests are
// served whoever holds the room. An input buffer grows past this only for a frame with room.
constexpr std::size_t kLargeFrameBytes = kKeepBufferBytes;
// The largest HELLO or AUTH body (AUTH: a 32-byte MAC), with room to spare.
constexpr std::uint64_t kMaxHandshakeBody = 64;
// A derived connection cap (ServerOptions::max_connections = 0) when there is no file limit.
constexpr std::size_t kUnlimitedConnections = std::size_t{1} << 20;

// Log lines about connections are rate-limited per kind: the first kLogBurst of a kind in each
// kLogWindow, then one line per kind saying how many more there were. An attack therefore
// costs a few lines every 10 s, not one per connection.
constexpr std::uint32_t kLogBurst = 5;
constexpr auto kLogWindow = std::chrono::seconds(10);

enum class Event : std::uint8_t {
  kBadInput,
  kHandshake,
  kEvicted,
  kRefused,
  kStalled,
  kBusy,
  kReadStalled,
  kStarved,
  kAcceptFailed,
};
constexpr std::size_t kEventKinds = 9;

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

}  // namespace store::tcp_server

struct TCPStoreServer::Impl {
  using Clock = store::tcp_server::Clock;
  using Event = store::tcp_server::Event;
  using Socket = store::tcp_server::Socket;
  using Kind = store::wire::Kind;
  using Status = store::wire::Status;
  using error_code = boost::system::error_code;
  template <typename V>
  using StringMap = store::tcp_server::StringMap<V>;
  template <typename T>
  using awaitable = boost::asio::awaitable<T>;

  struct Waiter {
    explicit Waiter(boost::asio::io_context& io) : timer(io) {}
    std::size_t missing = 0;
    boost::asio::steady_timer timer;
  };

  enum class Phase { kHello, kAuth, kReady };

  struct Connection {
    Connection(Socket s, std::string p, boost::asio::io_context& io)
        : socket(std::move(s)),
          peer(std::move(p)),
          handshake_timer(io),
          write_timer(io),
          read_timer(io) {}
    ~Connection() { *alive = false; }
    Socket socket;
    std::string peer;
    Clock::time_point accepted_at = Clock::now();
    // Closes the connection unless the handshake is done in time, so silent or half-open
    // connections cannot pile up. Destroyed (so cancelled) with the connection.
    boost::asio::steady_timer handshake_timer;
    // Closes the connection when a write is not taken in time (see flush()).
    boost::asio::steady_timer write_timer;
    // Closes the connection when a begun frame stops arriving (see watch_read()). Armed once
    // per stall, not per read: its handler re-arms while bytes keep coming.
    boost::asio::steady_timer read_timer;
    bool read_timer_armed = false;
    bool mid_frame = false;        // waiting in fill() for the rest of a begun frame
    Clock::time_point last_input;  // since then no byte has arrived (while mid_frame)
    // Read by the timers' handlers, which may already be queued when the connection ends.
    std::shared_ptr<bool> alive = std::make_shared<bool>(true);
    Phase phase = Phase::kHello;
    // Closed by the server (see close_connection()); its coroutine is finishing.
    bool closed = false;
    // Its place in `handshaking` while `in_handshake`.
    bool in_handshake = false;
    std::list<Connection*>::iterator handshake_at;
    Waiter* waiter = nullptr;  // the wait this connection is parked in, if any
    boost::asio::steady_timer* room_timer = nullptr;  // set while it waits for room for an answer
    // Room held under max_pending_input_bytes for the large frame being read or served; while
    // it waits for that room, its place in `input_queue`, the room it wants and its timer.
    std::size_t in_reserved = 0;
    bool in_input_queue = false;
    std::list<Connection*>::iterator input_queue_at;
    std::size_t input_wanted = 0;
    boost::asio::steady_timer* input_room_timer = nullptr;
    std::uint64_t write_seq = 0;  // tells the write timer which write it watches
    bool writing = false;
    // Frames read (unread bytes are in[begin, end)) and answers not yet written.
    Bytes in;
    std::size_t begin = 0, end = 0;
    Bytes out;
    // What this connection adds to the server's pending_output and buffer_bytes counters.
    std::size_t out_counted = 0;
    std::size_t buffers_counted = 0;
  };

  struct LogGate {
    std::uint32_t logged = 0;
    std::uint64_t suppressed = 0;
  };

  explicit Impl(store::ServerOptions opts) : options(std::move(opts)) {}
  ~Impl() {
    if (spare_fd >= 0) ::close(spare_fd);
  }

  // ---- state owned by the io thread (declared before io, so it outlives every coroutine
  // frame that io's destructor may still destroy) ----
  StringMap<Bytes> data;
  StringMap<std::vector<Waiter*>> waiters;
  // Connections being served: what max_connections counts. Those closed by the server leave at
  // once, the others when their coroutine ends.
  std::unordered_set<Connection*> connections;
  // The connections still in their handshake, oldest first: the first to go under pressure.
  std::list<Connection*> handshaking;
  // Timers of connections waiting for room for a large answer; cancelled when answers drain.
  std::vector<boost::asio::steady_timer*> room_waiters;
  // Connections waiting for room for a large request frame, first come first served (a large
  // frame is not passed over forever by smaller ones), and the room held now.
  std::list<Connection*> input_queue;
  std::size_t input_reserved = 0;
  bool stopping = false;
  std::array<LogGate, store::tcp_server::kEventKinds> log_gates{};
  Clock::time_point log_window_start = Clock::now();
  bool log_timer_armed = false;
  // Kept open so that, out of descriptors, the server can still accept a waiting connection to
  // close it at once rather than leave it hanging in the backlog.
  int spare_fd = -1;

  store::ServerOptions options;
  std::size_t output_limit = 0;  // max_pending_output_bytes, resolved
  std::size_t input_limit = 0;   // max_pending_input_bytes, resolved
  std::uint16_t port = 0;
  std::atomic<std::uint64_t> local_accepted{0};
  std::atomic<std::uint64_t> accepted{0}, open{0}, rejected{0}, requests{0}, held{0}, keys{0};
  std::atomic<std::uint64_t> refused{0}, evicted{0}, stalled{0}, read_stalled{0}, starved{0};
  // Bytes of answers built and not yet written, room held by large request frames, and the
  // capacity of every connection's buffers. Written on the io thread only; atomic so that
  // stats() may read them.
  std::atomic<std::uint64_t> pending_output{0}, pending_input{0}, buffer_bytes{0};
  std::once_flag stop_once;

  boost::asio::io_context io{1};
  boost::asio::ip::tcp::acceptor acceptor{io};
  // Same-host clients switch to this abstract Unix socket after their TCP handshake: it skips
  // the TCP/IP stack, which is most of a small request's cost on loopback. Its random name is
  // announced in the HELLO answer; it exists only in this network namespace.
  boost::asio::local::stream_protocol::acceptor local_acceptor{io};
  std::string local_name;  // without the leading NUL; empty when there is none
  boost::asio::steady_timer log_timer{io};
  std::thread thread;

  // ---- Accepting and closing connections, logging (tcp_store_server_accept.cc). ----
  void log_event(Event e, std::string_view line);
  void roll_log_window(bool force = false);
  std::size_t connection_cap() const;
  void note_rejected(const Connection& c, Event e, std::string_view why);
  void leave_handshaking(Connection& c);
  void close_connection(Connection& c, Event e, std::string_view why, bool reset = false);
  bool make_room();
  void refuse_waiting(int listen_fd);
  template <typename Acceptor>
  awaitable<void> accept_loop(Acceptor& acceptor_ref);
  void open_local_acceptor();
  void shutdown();

  // ---- One connection (tcp_store_server_connection.cc). ----
  awaitable<void> serve(std::unique_ptr<Connection> owned);
  awaitable<void> serve_frames(Connection& conn);

  // ---- Keys, waiters and answers (tcp_store_server_commands.cc). ----
  void notify(std::string_view key);
  void put(std::string_view key, std::span<const std::uint8_t> value);
  awaitable<bool> wait_for(Connection& conn, const std::vector<std::string_view>& want,
                           std::uint64_t timeout_ms);
  void unregister(Waiter& w, const std::vector<std::string_view>& want);
  static std::size_t begin_ok(Bytes& out, Kind kind);
  static void put_i64(Bytes& out, std::int64_t v);
  awaitable<bool> serve_request(Connection& conn, const store::wire::Request& req);

  // ---- Back-pressure and writing (tcp_store_server_flow.cc). ----
  void account(Connection& c);
  void shrink_input(Connection& c);
  void take_input_room(Connection& c, std::size_t bytes);
  void release_input_room(Connection& c);
  void leave_input_queue(Connection& c);
  void grant_input_room();
  awaitable<bool> reserve_input_room(Connection& c, std::size_t frame);
  void watch_read(Connection& c);
  void release_output(Connection& c);
  bool answer_fits(const Connection& c, std::uint64_t bytes) const;
  awaitable<bool> wait_for_room(Connection& c, Kind kind, std::uint64_t bytes);
  void answer_busy(Connection& c, Kind kind, std::uint64_t bytes);
  awaitable<void> flush(Connection& c);

  // ---- The io thread's loop (tcp_store_server.cc). ----
  void run();
};

}  // namespace c10d::inline v1
