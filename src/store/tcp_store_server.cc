// The TCP store server: see tcp_store_server.h for the contract and wire.h for the frames.
//
// Words used here: a *connection* is one accepted socket served by one coroutine; a *frame* is
// one request as drawn in wire.h; a *waiter* is a connection parked until a set of keys exists
// or its deadline passes. Everything below runs on the io thread except the public methods,
// which only post to it or read atomics.
#include "store/tcp_store_server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <future>
#include <list>
#include <mutex>
#include <thread>
#include <type_traits>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"
#include "store/asio.h"
#include "store/store_util.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using asio::ip::tcp;
using Socket = asio::generic::stream_protocol::socket;  // a TCP or a Unix stream socket
using asio::socket_base;
using boost::system::error_code;
using store::wire::Kind;
using store::wire::Status;

using Clock = std::chrono::steady_clock;

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

// For the summary line: "N more <this> in the last 10 s".
std::string_view event_summary(Event e) {
  switch (e) {
    case Event::kBadInput:
      return "connections closed for bad input, a broken limit or a wrong token";
    case Event::kHandshake:
      return "connections closed for no handshake within the deadline";
    case Event::kEvicted:
      return "connections closed in their handshake to make room";
    case Event::kRefused:
      return "connections refused over the connection cap";
    case Event::kStalled:
      return "connections closed for not reading their answers";
    case Event::kBusy:
      return "answers refused at the limit on unread answers";
    case Event::kReadStalled:
      return "connections closed for a request stalled mid-frame";
    case Event::kStarved:
      return "connections closed for no room for a large request";
    case Event::kAcceptFailed:
      return "failed accepts";
  }
  return "events";
}

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

template <typename V>
using StringMap = std::unordered_map<std::string, V, StringHash, std::equal_to<>>;

std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

}  // namespace

void store::raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

struct TCPStoreServer::Impl {
  struct Waiter {
    explicit Waiter(asio::io_context& io) : timer(io) {}
    std::size_t missing = 0;
    asio::steady_timer timer;
  };

  enum class Phase { kHello, kAuth, kReady };

  struct Connection {
    Connection(Socket s, std::string p, asio::io_context& io)
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
    asio::steady_timer handshake_timer;
    // Closes the connection when a write is not taken in time (see flush()).
    asio::steady_timer write_timer;
    // Closes the connection when a begun frame stops arriving (see watch_read()). Armed once
    // per stall, not per read: its handler re-arms while bytes keep coming.
    asio::steady_timer read_timer;
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
    Waiter* waiter = nullptr;                  // the wait this connection is parked in, if any
    asio::steady_timer* room_timer = nullptr;  // set while it waits for room for an answer
    // Room held under max_pending_input_bytes for the large frame being read or served; while
    // it waits for that room, its place in `input_queue`, the room it wants and its timer.
    std::size_t in_reserved = 0;
    bool in_input_queue = false;
    std::list<Connection*>::iterator input_queue_at;
    std::size_t input_wanted = 0;
    asio::steady_timer* input_room_timer = nullptr;
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
  std::vector<asio::steady_timer*> room_waiters;
  // Connections waiting for room for a large request frame, first come first served (a large
  // frame is not passed over forever by smaller ones), and the room held now.
  std::list<Connection*> input_queue;
  std::size_t input_reserved = 0;
  bool stopping = false;
  std::array<LogGate, kEventKinds> log_gates{};
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

  asio::io_context io{1};
  tcp::acceptor acceptor{io};
  // Same-host clients switch to this abstract Unix socket after their TCP handshake: it skips
  // the TCP/IP stack, which is most of a small request's cost on loopback. Its random name is
  // announced in the HELLO answer; it exists only in this network namespace.
  asio::local::stream_protocol::acceptor local_acceptor{io};
  std::string local_name;  // without the leading NUL; empty when there is none
  asio::steady_timer log_timer{io};
  std::thread thread;

  // ---- rate-limited logging ----

  void log_event(Event e, std::string_view line) {
    if (core::LogLevel::kWarn < core::log_level()) return;
    roll_log_window();
    LogGate& gate = log_gates[static_cast<std::size_t>(e)];
    if (gate.logged < kLogBurst) {
      ++gate.logged;
      C10D_LOG_WARN("store server :{}: {}", port, line);
      return;
    }
    ++gate.suppressed;
    if (!log_timer_armed && !stopping) {
      log_timer_armed = true;
      log_timer.expires_at(log_window_start + kLogWindow);
      log_timer.async_wait([this](error_code ec) {
        log_timer_armed = false;
        if (!ec) roll_log_window();
      });
    }
  }

  // Past the window (or when `force`d, at stop): one line per kind that had lines left out, and
  // a fresh window.
  void roll_log_window(bool force = false) {
    const auto now = Clock::now();
    if (!force && now - log_window_start < kLogWindow) return;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now - log_window_start);
    for (std::size_t i = 0; i < kEventKinds; ++i) {
      if (log_gates[i].suppressed > 0) {
        C10D_LOG_WARN(
            "store server :{}: {} more {} in the last {} s (the first {} of each kind are "
            "logged every {} s)",
            port, log_gates[i].suppressed, event_summary(static_cast<Event>(i)), seconds.count(),
            kLogBurst, kLogWindow.count());
      }
      log_gates[i] = {};
    }
    log_window_start = now;
  }

  // ---- connections: the cap, eviction, accounting ----

  std::size_t connection_cap() const {
    if (options.max_connections > 0) return options.max_connections;
    rlimit lim{};
    if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) {
      return kUnlimitedConnections;
    }
    const std::size_t soft = static_cast<std::size_t>(lim.rlim_cur);
    const std::size_t reserve = std::max<std::size_t>(32, soft / 8);
    return std::min(kUnlimitedConnections, soft > reserve ? soft - reserve : std::size_t{1});
  }

  // Counts a closing by the server and logs it (rate-limited).
  void note_rejected(const Connection& c, Event e, std::string_view why) {
    rejected.fetch_add(1, std::memory_order_relaxed);
    log_event(e, fmt::format("closing connection from {}: {}", c.peer, why));
  }

  void leave_handshaking(Connection& c) {
    if (!c.in_handshake) return;
    handshaking.erase(c.handshake_at);
    c.in_handshake = false;
  }

  // Closes `c` now, from outside its coroutine (a timer, or the accept loop making room): its
  // descriptor is free at once and it no longer counts against the cap; its coroutine sees the
  // socket closed and ends.
  // `reset`: drop unsent answers with a reset rather than leave the kernel trying to deliver
  // them to a client that does not read.
  void close_connection(Connection& c, Event e, std::string_view why, bool reset = false) {
    if (c.closed) return;
    c.closed = true;
    note_rejected(c, e, why);
    leave_handshaking(c);
    connections.erase(&c);
    error_code ignored;
    if (reset) c.socket.set_option(socket_base::linger(true, 0), ignored);
    c.socket.close(ignored);
    if (c.input_room_timer != nullptr) c.input_room_timer->cancel();
  }

  // Before serving a new connection. Near the cap (3/4 of it), connections still in their
  // handshake after busy_handshake_timeout are closed; at the cap, the oldest one still in its
  // handshake is. A client shakes hands within a round trip of connecting, so what this closes
  // is idle or hostile. False when the server is at its cap and every connection has shaken
  // hands: the new one is refused.
  bool make_room() {
    const std::size_t cap = connection_cap();
    if (connections.size() + 1 > cap - cap / 4) {
      const auto too_old = Clock::now() - options.busy_handshake_timeout;
      while (!handshaking.empty() && handshaking.front()->accepted_at <= too_old) {
        evicted.fetch_add(1, std::memory_order_relaxed);
        close_connection(*handshaking.front(), Event::kEvicted,
                         fmt::format("no handshake within {} ms while the server is near its cap "
                                     "of {} connections",
                                     options.busy_handshake_timeout.count(), cap));
      }
    }
    if (connections.size() < cap) return true;
    if (handshaking.empty()) return false;
    evicted.fetch_add(1, std::memory_order_relaxed);
    close_connection(*handshaking.front(), Event::kEvicted,
                     fmt::format("the server is at its cap of {} connections and this is the "
                                 "oldest one still in its handshake",
                                 cap));
    return true;
  }

  // Out of descriptors with nothing to evict: accepts one waiting connection on the spare
  // descriptor and closes it, so its client learns at once instead of waiting in the backlog.
  void refuse_waiting(int listen_fd) {
    if (spare_fd < 0) return;
    ::close(spare_fd);
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
      ::close(fd);
      refused.fetch_add(1, std::memory_order_relaxed);
      rejected.fetch_add(1, std::memory_order_relaxed);
      log_event(Event::kRefused, "out of file descriptors: closed a new connection at once");
    }
    spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  }

  // Brings the server-wide counters up to date with `c`'s buffers.
  void account(Connection& c) {
    const std::size_t out_now = c.out.size();
    if (out_now >= c.out_counted) {
      pending_output.fetch_add(out_now - c.out_counted, std::memory_order_relaxed);
    } else {
      pending_output.fetch_sub(c.out_counted - out_now, std::memory_order_relaxed);
      for (asio::steady_timer* t : room_waiters) t->cancel();  // room for a waiting answer
    }
    c.out_counted = out_now;
    const std::size_t buffers_now = c.in.capacity() + c.out.capacity();
    if (buffers_now >= c.buffers_counted) {
      buffer_bytes.fetch_add(buffers_now - c.buffers_counted, std::memory_order_relaxed);
    } else {
      buffer_bytes.fetch_sub(c.buffers_counted - buffers_now, std::memory_order_relaxed);
    }
    c.buffers_counted = buffers_now;
  }

  // After a frame: an input buffer grown for a large one goes back to a few KiB, so that it
  // may give back its room. (A buffer is grown to exactly its frame, so nothing follows the
  // frame in it; the copy is for safety.)
  void shrink_input(Connection& c) {
    if (c.in.size() <= kKeepBufferBytes) return;
    const std::size_t unread = c.end - c.begin;
    Bytes fresh(std::max(kInitialReadBuffer, unread));
    std::memcpy(fresh.data(), c.in.data() + c.begin, unread);
    c.in.swap(fresh);
    c.begin = 0;
    c.end = unread;
    account(c);
  }

  // ---- room for large request frames (max_pending_input_bytes) ----

  // Never past input_limit: callers check `bytes <= input_limit - input_reserved`.
  void take_input_room(Connection& c, std::size_t bytes) {
    c.in_reserved = bytes;
    input_reserved += bytes;
    pending_input.store(input_reserved, std::memory_order_relaxed);
  }

  // Once its frame has been served (or the connection ends): its room goes to the waiters.
  void release_input_room(Connection& c) {
    if (c.in_reserved == 0) return;
    input_reserved -= c.in_reserved;
    c.in_reserved = 0;
    pending_input.store(input_reserved, std::memory_order_relaxed);
    grant_input_room();
  }

  void leave_input_queue(Connection& c) {
    if (!c.in_input_queue) return;
    input_queue.erase(c.input_queue_at);
    c.in_input_queue = false;
  }

  // Gives room to the waiters in order while the first one fits, and wakes them.
  void grant_input_room() {
    while (!input_queue.empty()) {
      Connection& c = *input_queue.front();
      if (c.input_wanted > input_limit - input_reserved) return;
      leave_input_queue(c);
      take_input_room(c, c.input_wanted);
      if (c.input_room_timer != nullptr) c.input_room_timer->cancel();
    }
  }

  // Room for a `frame`-byte request before its body is read. Without room the connection is
  // not read, so TCP holds its client back; it waits behind earlier waiters up to read_timeout.
  // False when no room came (or the connection was closed, or the server is stopping).
  awaitable<bool> reserve_input_room(Connection& c, std::size_t frame) {
    if (input_queue.empty() && frame <= input_limit - input_reserved) {
      take_input_room(c, frame);
      co_return true;
    }
    // Its client may be waiting for these (the HELLO answer, say) before it sends the rest.
    if (!c.out.empty()) co_await flush(c);
    if (c.closed || stopping) co_return false;
    c.input_wanted = frame;
    c.input_queue_at = input_queue.insert(input_queue.end(), &c);
    c.in_input_queue = true;
    asio::steady_timer t(io);
    t.expires_after(options.read_timeout);
    c.input_room_timer = &t;
    error_code ec;
    co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
    c.input_room_timer = nullptr;
    if (c.in_input_queue) {  // not granted: its time is up, or it is being closed
      leave_input_queue(c);
      grant_input_room();  // it may have stood before waiters that fit
    }
    co_return c.in_reserved > 0 && !c.closed && !stopping;
  }

  // Called while `c` waits in fill() with part of a frame buffered: unless bytes keep coming,
  // the connection is closed read_timeout after the last one (or after the wait began).
  void watch_read(Connection& c) {
    if (c.read_timer_armed) return;
    c.read_timer_armed = true;
    c.read_timer.expires_at(c.last_input + options.read_timeout);
    c.read_timer.async_wait([this, &c, alive = c.alive](error_code ec) {
      if (ec || !*alive) return;
      c.read_timer_armed = false;
      if (!c.mid_frame || c.closed) return;
      if (Clock::now() < c.last_input + options.read_timeout) {
        watch_read(c);  // bytes came meanwhile
        return;
      }
      read_stalled.fetch_add(1, std::memory_order_relaxed);
      close_connection(c, Event::kReadStalled,
                       fmt::format("{} bytes of a request frame buffered and no more arrived "
                                   "within {} ms",
                                   c.end - c.begin, options.read_timeout.count()),
                       /*reset=*/true);
    });
  }

  // After a write: the output buffer is emptied, and given back when it grew large.
  void release_output(Connection& c) {
    if (c.out.capacity() > kKeepBufferBytes) {
      Bytes().swap(c.out);
    } else {
      c.out.clear();
    }
    account(c);
  }

  // Whether an answer whose body is `bytes` may be built on `c` now: a large one only alone
  // (nothing else pending on `c`) and within the server's limit on unread answers.
  bool answer_fits(const Connection& c, std::uint64_t bytes) const {
    if (bytes < kLargeAnswerBytes) return true;
    if (!c.out.empty()) return false;
    const std::uint64_t pending = pending_output.load(std::memory_order_relaxed);
    return pending == 0 || pending + bytes <= output_limit;
  }

  // Makes room for a large answer to a `kind` request that does not fit yet: writes what `c` has
  // pending, then waits (up to write_timeout) for other connections' answers to be written.
  // False when there is still no room, the request then answered busy (answer_busy()). The
  // caller looks its keys up again afterwards: they may have changed.
  awaitable<bool> wait_for_room(Connection& c, Kind kind, std::uint64_t bytes) {
    if (!c.out.empty()) co_await flush(c);
    const auto deadline = Clock::now() + options.write_timeout;
    while (!answer_fits(c, bytes)) {
      if (stopping || Clock::now() >= deadline) {
        answer_busy(c, kind, bytes);
        co_return false;
      }
      asio::steady_timer t(io);
      t.expires_at(deadline);
      room_waiters.push_back(&t);
      c.room_timer = &t;
      error_code ec;
      co_await t.async_wait(asio::redirect_error(use_awaitable, ec));
      c.room_timer = nullptr;
      std::erase(room_waiters, &t);
    }
    co_return true;
  }

  void answer_busy(Connection& c, Kind kind, std::uint64_t bytes) {
    const std::string why = fmt::format(
        "the server holds {} bytes of answers its clients have not read yet; this {}-byte "
        "answer found no room under its limit of {} bytes (ServerOptions::"
        "max_pending_output_bytes) within {} ms",
        pending_output.load(std::memory_order_relaxed), bytes, output_limit,
        options.write_timeout.count());
    store::wire::encode_error(c.out, kind, Status::kBusy, why);
    if (stopping) return;
    log_event(Event::kBusy,
              fmt::format("{} from {} refused: {}", store::wire::kind_name(kind), c.peer, why));
  }

  // ---- keys and waiters ----

  void notify(std::string_view key) {
    auto it = waiters.find(key);
    if (it == waiters.end()) return;
    std::vector<Waiter*> list = std::move(it->second);
    waiters.erase(it);
    for (Waiter* w : list) {
      if (--w->missing == 0) w->timer.cancel();
    }
  }

  void put(std::string_view key, std::span<const std::uint8_t> value) {
    auto it = data.find(key);
    if (it == data.end()) {
      data.emplace(std::string(key), Bytes(value.begin(), value.end()));
    } else {
      it->second.assign(value.begin(), value.end());
    }
    keys.store(data.size(), std::memory_order_relaxed);
    notify(key);
  }

  // Parks the connection until every key exists or the deadline passes; true when they exist.
  awaitable<bool> wait_for(Connection& conn, const std::vector<std::string_view>& want,
                           std::uint64_t timeout_ms) {
    const auto deadline =
        std::chrono::steady_clock::now() +
        std::chrono::milliseconds(std::min<std::uint64_t>(timeout_ms, 365ull * 24 * 3600 * 1000));
    for (;;) {
      Waiter w(io);
      for (std::string_view k : want) {
        if (!data.contains(k)) {
          ++w.missing;
          waiters[std::string(k)].push_back(&w);
        }
      }
      if (w.missing == 0) co_return true;
      if (stopping || std::chrono::steady_clock::now() >= deadline) {
        unregister(w, want);
        co_return false;
      }
      w.timer.expires_at(deadline);
      conn.waiter = &w;
      held.fetch_add(1, std::memory_order_relaxed);
      error_code ec;
      co_await w.timer.async_wait(asio::redirect_error(use_awaitable, ec));
      held.fetch_sub(1, std::memory_order_relaxed);
      conn.waiter = nullptr;
      unregister(w, want);
      // Woken: all keys were set (one may have been deleted since: look again), the deadline
      // passed, or the server is stopping.
    }
  }

  void unregister(Waiter& w, const std::vector<std::string_view>& want) {
    for (std::string_view k : want) {
      auto it = waiters.find(k);
      if (it == waiters.end()) continue;
      std::erase(it->second, &w);
      if (it->second.empty()) waiters.erase(it);
    }
  }

  // ---- responses ----

  static std::size_t begin_ok(Bytes& out, Kind kind) {
    std::size_t start =
        store::wire::begin_frame(out, static_cast<std::uint8_t>(kind) | store::wire::kResponseBit);
    out.push_back(static_cast<std::uint8_t>(Status::kOk));
    return start;
  }

  static void put_i64(Bytes& out, std::int64_t v) {
    store::wire::put_u64(out, static_cast<std::uint64_t>(v));
  }

  // Serves one decoded request (after the handshake), appending its response to conn.out.
  // Returns false when the connection must be closed after the response is flushed.
  //
  // A request that answers with values (GET, COMPARE_SET, MULTI_GET) sizes its answer first:
  // over max_response_bytes it is refused, and a large one waits for room (wait_for_room()),
  // then looks again, since the keys may have changed while it waited.
  awaitable<bool> serve_request(Connection& conn, const store::wire::Request& req) {
    using store::wire::encode_error;
    using store::wire::put_bytes;
    Bytes& out = conn.out;
    switch (req.kind) {
      case Kind::kSet:  // no answer when it succeeds (wire.h)
        put(req.keys[0], req.values[0]);
        break;
      case Kind::kGet: {
        for (;;) {
          auto it = data.find(req.keys[0]);
          if (it == data.end()) {
            if (!out.empty()) co_await flush(conn);
            if (!co_await wait_for(conn, req.keys, req.timeout_ms)) {
              encode_error(
                  out, req.kind, Status::kTimeout,
                  fmt::format("key '{}' was not set within {} ms", req.keys[0], req.timeout_ms));
              break;
            }
            continue;
          }
          // Within max_response_bytes: the constructor checks that a largest value fits.
          const std::uint64_t bytes = store::wire::value_answer_bytes(it->second.size());
          if (!answer_fits(conn, bytes)) {
            if (!co_await wait_for_room(conn, req.kind, bytes)) break;
            continue;
          }
          out.reserve(out.size() + store::wire::kHeaderBytes + bytes);
          std::size_t start = begin_ok(out, req.kind);
          put_bytes(out, it->second);
          store::wire::end_frame(out, start);
          break;
        }
        break;
      }
      case Kind::kAdd: {
        auto it = data.find(req.keys[0]);
        const auto parsed =
            it == data.end() ? std::optional<std::int64_t>(0) : store::parse_int64(it->second);
        if (!parsed) {
          encode_error(out, req.kind, Status::kNotInteger,
                       fmt::format("add to key '{}': its value is not an integer", req.keys[0]));
          break;
        }
        const std::int64_t current = *parsed;
        std::int64_t sum = 0;
        if (__builtin_add_overflow(current, req.delta, &sum)) {
          encode_error(out, req.kind, Status::kOutOfRange,
                       fmt::format("add of {} to key '{}' (value {}) would overflow int64",
                                   req.delta, req.keys[0], current));
          break;
        }
        char text[24];
        auto [end, ec] = std::to_chars(text, text + sizeof(text), sum);
        put(req.keys[0], as_bytes(std::string_view(text, end - text)));
        std::size_t start = begin_ok(out, req.kind);
        put_i64(out, sum);
        store::wire::end_frame(out, start);
        break;
      }
      case Kind::kCompareSet: {
        const auto& expected = req.values[0];
        const auto& desired = req.values[1];
        for (;;) {
          auto it = data.find(req.keys[0]);
          // The answer is one of the three values; room is made for the largest.
          const std::uint64_t bytes = store::wire::value_answer_bytes(
              std::max({it == data.end() ? std::size_t{0} : it->second.size(), expected.size(),
                        desired.size()}));
          if (!answer_fits(conn, bytes)) {
            if (!co_await wait_for_room(conn, req.kind, bytes)) break;
            continue;
          }
          std::span<const std::uint8_t> result;
          if ((it == data.end() && expected.empty()) ||
              (it != data.end() && std::equal(it->second.begin(), it->second.end(),
                                              expected.begin(), expected.end()))) {
            put(req.keys[0], desired);
            result = desired;
          } else if (it == data.end()) {
            result = expected;
          } else {
            result = it->second;
          }
          out.reserve(out.size() + store::wire::kHeaderBytes + bytes);
          std::size_t start = begin_ok(out, req.kind);
          put_bytes(out, result);
          store::wire::end_frame(out, start);
          break;
        }
        break;
      }
      case Kind::kCheck: {
        bool all = true;
        for (auto k : req.keys) all = all && data.contains(k);
        std::size_t start = begin_ok(out, req.kind);
        out.push_back(all ? 1 : 0);
        store::wire::end_frame(out, start);
        break;
      }
      case Kind::kWait:
      case Kind::kMultiGet: {
        for (;;) {
          if (!out.empty()) co_await flush(conn);
          if (!co_await wait_for(conn, req.keys, req.timeout_ms)) {
            // A few keys by name: the message stays readable, and small however long the list
            // (an answer, too, must fit max_response_bytes).
            constexpr std::size_t kNamed = 8;
            std::vector<std::string_view> missing;
            std::size_t count = 0;
            for (auto k : req.keys) {
              if (data.contains(k)) continue;
              if (++count <= kNamed) missing.push_back(k);
            }
            encode_error(
                out, req.kind, Status::kTimeout,
                fmt::format("keys [{}{}] were not set within {} ms", fmt::join(missing, ", "),
                            count > kNamed ? fmt::format(", ... {} keys missing in all", count)
                                           : std::string(),
                            req.timeout_ms));
            break;
          }
          if (req.kind == Kind::kWait) {
            store::wire::end_frame(out, begin_ok(out, req.kind));
            break;
          }
          // A small request may name one large value many times: the answer is sized before
          // it is built.
          std::uint64_t value_bytes = 0;
          for (auto k : req.keys) value_bytes += data.find(k)->second.size();
          const std::uint64_t bytes =
              store::wire::multi_get_answer_bytes(req.keys.size(), value_bytes);
          if (bytes > options.limits.max_response_bytes) {
            encode_error(out, req.kind, Status::kResponseTooLarge,
                         fmt::format("MULTI_GET of {} keys would answer {} bytes, over the limit "
                                     "of {} bytes per answer (max_response_bytes)",
                                     req.keys.size(), bytes, options.limits.max_response_bytes));
            break;
          }
          if (!answer_fits(conn, bytes)) {
            if (!co_await wait_for_room(conn, req.kind, bytes)) break;
            continue;
          }
          out.reserve(out.size() + store::wire::kHeaderBytes + bytes);
          std::size_t start = begin_ok(out, req.kind);
          store::wire::put_u32(out, static_cast<std::uint32_t>(req.keys.size()));
          for (auto k : req.keys) put_bytes(out, data.find(k)->second);
          store::wire::end_frame(out, start);
          break;
        }
        break;
      }
      case Kind::kDelete: {
        auto it = data.find(req.keys[0]);
        const bool existed = it != data.end();
        if (existed) data.erase(it);
        keys.store(data.size(), std::memory_order_relaxed);
        std::size_t start = begin_ok(out, req.kind);
        out.push_back(existed ? 1 : 0);
        store::wire::end_frame(out, start);
        break;
      }
      case Kind::kNumKeys: {
        std::size_t start = begin_ok(out, req.kind);
        put_i64(out, static_cast<std::int64_t>(data.size()));
        store::wire::end_frame(out, start);
        break;
      }
      case Kind::kAppend: {
        auto it = data.find(req.keys[0]);
        if (it != data.end() &&
            it->second.size() + req.values[0].size() > options.limits.max_value_bytes) {
          encode_error(out, req.kind, Status::kLimitExceeded,
                       fmt::format("append to key '{}' would make a value of {} bytes, over the "
                                   "limit of {}",
                                   req.keys[0], it->second.size() + req.values[0].size(),
                                   options.limits.max_value_bytes));
          break;
        }
        if (it == data.end()) {
          put(req.keys[0], req.values[0]);
        } else {
          it->second.insert(it->second.end(), req.values[0].begin(), req.values[0].end());
          notify(req.keys[0]);
        }
        store::wire::end_frame(out, begin_ok(out, req.kind));
        break;
      }
      case Kind::kMultiSet: {
        for (std::size_t i = 0; i < req.keys.size(); ++i) put(req.keys[i], req.values[i]);
        store::wire::end_frame(out, begin_ok(out, req.kind));
        break;
      }
      case Kind::kHello:
      case Kind::kAuth:
        encode_error(out, req.kind, Status::kBadRequest,
                     fmt::format("{} after the handshake", store::wire::kind_name(req.kind)));
        co_return false;
    }
    co_return true;
  }

  // Writes conn.out, then empties it (and gives back a large buffer). Most answers fit in the
  // socket's buffer and go at once; a write that must wait for the client to read is watched
  // by write_timer, which closes the connection when its client does not take the answer
  // within write_timeout. Throws when the write fails.
  awaitable<void> flush(Connection& c) {
    account(c);
    error_code ec;
    std::size_t written = c.out.empty() ? 0 : c.socket.write_some(asio::buffer(c.out), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) ec = {};
    if (!ec && written < c.out.size()) {
      const std::uint64_t seq = ++c.write_seq;
      c.writing = true;
      c.write_timer.expires_after(options.write_timeout);
      c.write_timer.async_wait([this, &c, seq, alive = c.alive](error_code timer_ec) {
        if (timer_ec || !*alive || !c.writing || c.write_seq != seq) return;
        stalled.fetch_add(1, std::memory_order_relaxed);
        close_connection(c, Event::kStalled,
                         fmt::format("{} bytes of answers not taken within {} ms: its client "
                                     "does not read them",
                                     c.out.size(), options.write_timeout.count()),
                         /*reset=*/true);
      });
      co_await asio::async_write(c.socket,
                                 asio::buffer(c.out.data() + written, c.out.size() - written),
                                 asio::redirect_error(use_awaitable, ec));
      c.writing = false;
      c.write_timer.cancel();
    }
    release_output(c);
    if (ec) throw boost::system::system_error(ec);
  }

  // One connection: read frames into conn.in, serve them in order, write responses.
  awaitable<void> serve(std::unique_ptr<Connection> owned) {
    Connection& conn = *owned;
    // co_spawn runs this body later: the server may have stopped, or closed the connection to
    // make room, meanwhile.
    if (!stopping && !conn.closed) {
      error_code ec;
      conn.socket.non_blocking(true, ec);
      conn.handshake_timer.expires_after(options.handshake_timeout);
      conn.handshake_timer.async_wait([this, &conn, alive = conn.alive](error_code timer_ec) {
        if (timer_ec || !*alive || conn.phase == Phase::kReady) return;
        close_connection(conn, Event::kHandshake, "no handshake within the deadline");
      });
      try {
        co_await serve_frames(conn);
      } catch (const boost::system::system_error&) {
        // The peer went away, or the server closed the socket: nothing to answer.
      } catch (const std::exception& e) {
        note_rejected(conn, Event::kBadInput, e.what());
      }
    }
    conn.mid_frame = false;
    leave_handshaking(conn);
    leave_input_queue(conn);
    release_input_room(conn);
    connections.erase(&conn);
    open.fetch_sub(1, std::memory_order_relaxed);
    Bytes().swap(conn.in);
    Bytes().swap(conn.out);
    account(conn);
  }

  awaitable<void> serve_frames(Connection& conn) {
    const auto& limits = options.limits;
    store::wire::Nonce nonce{};
    Bytes& in = conn.in;
    Bytes& out = conn.out;
    std::size_t& begin = conn.begin;  // unread bytes are in[begin, end)
    std::size_t& end = conn.end;
    in.resize(kInitialReadBuffer);
    account(conn);
    store::wire::Request req;

    // Reads more bytes so that at least `need` unread bytes are buffered.
    auto fill = [&](std::size_t need) -> awaitable<void> {
      if (begin + need > in.size()) {
        std::memmove(in.data(), in.data() + begin, end - begin);
        end -= begin;
        begin = 0;
      }
      // Before waiting for input, send what is already answered: a pipelining client may be
      // waiting for it before it sends the rest.
      if (!out.empty()) co_await flush(conn);
      while (end - begin < need) {
        // The buffer grows with the bytes that actually arrive (at most doubling), never to a
        // size a header merely claims: a client that announces 64 MiB and sends nothing costs
        // a few KiB (and holds its room for read_timeout). Grown to exactly that size, so the
        // room covers the capacity.
        if (end == in.size()) {
          const std::size_t grown = std::min(need, 2 * in.size());
          in.reserve(grown);
          in.resize(grown);
          account(conn);
        }
        // Part of a frame is here: the rest must follow within read_timeout of now, the last
        // read (or the start of this wait). Whole frames, the usual case, never get here.
        conn.mid_frame = end > begin;
        if (conn.mid_frame) {
          conn.last_input = Clock::now();
          watch_read(conn);
        }
        end += co_await conn.socket.async_read_some(asio::buffer(in.data() + end, in.size() - end),
                                                    use_awaitable);
      }
      conn.mid_frame = false;
    };

    for (;;) {
      if (end - begin < store::wire::kHeaderBytes) co_await fill(store::wire::kHeaderBytes);
      store::wire::Header h;
      auto hs = store::wire::decode_header({in.data() + begin, end - begin}, false, limits, h);
      if (!hs.ok()) {
        const std::string why = store::wire::describe(hs, limits);
        if (hs.code == store::wire::DecodeCode::kBadVersion) {
          store::wire::encode_error(
              out, Kind::kHello, Status::kVersionMismatch,
              fmt::format("protocol version mismatch: the client speaks version {}, this server "
                          "speaks version {}",
                          h.version, store::wire::kVersion));
        } else if (hs.code == store::wire::DecodeCode::kFrameTooLarge) {
          store::wire::encode_error(out, Kind::kHello, Status::kLimitExceeded, why);
        }
        note_rejected(conn, Event::kBadInput, why);
        break;
      }
      // HELLO and AUTH bodies are a few bytes: before the handshake nothing larger is read.
      if (conn.phase != Phase::kReady && h.body_bytes > kMaxHandshakeBody) {
        store::wire::encode_error(out, static_cast<Kind>(h.kind), Status::kBadRequest,
                                  "a frame before the handshake is done must be HELLO or AUTH");
        note_rejected(conn, Event::kBadInput,
                      fmt::format("{}-byte frame before the handshake", h.body_bytes));
        break;
      }
      const std::size_t frame = store::wire::kHeaderBytes + static_cast<std::size_t>(h.body_bytes);
      if (frame >= kLargeFrameBytes && !co_await reserve_input_room(conn, frame)) {
        if (conn.closed || stopping) break;
        starved.fetch_add(1, std::memory_order_relaxed);
        const std::string why = fmt::format(
            "its {}-byte {} request found no room within {} ms: the server holds {} bytes of "
            "large requests, its limit (ServerOptions::max_pending_input_bytes) is {} bytes",
            frame, store::wire::kind_name(static_cast<Kind>(h.kind)), options.read_timeout.count(),
            input_reserved, input_limit);
        store::wire::encode_error(out, static_cast<Kind>(h.kind), Status::kBusy, why);
        note_rejected(conn, Event::kStarved, why);
        break;
      }
      if (end - begin < frame) co_await fill(frame);
      const Kind kind = static_cast<Kind>(h.kind);
      // Before the handshake is done only its own frame is read; anything else is refused
      // without decoding its body.
      if (conn.phase == Phase::kHello && kind != Kind::kHello) {
        store::wire::encode_error(out, kind, Status::kBadRequest,
                                  "the first request on a connection must be HELLO");
        note_rejected(conn, Event::kBadInput,
                      fmt::format("{} before HELLO", store::wire::kind_name(kind)));
        break;
      }
      if (conn.phase == Phase::kAuth && kind != Kind::kAuth) {
        store::wire::encode_error(out, kind, Status::kAuthRequired,
                                  "this store requires authentication: set C10D_STORE_TOKEN "
                                  "(or the token option) to the store's shared secret");
        note_rejected(conn, Event::kBadInput,
                      fmt::format("{} without authentication", store::wire::kind_name(kind)));
        break;
      }
      auto ds = store::wire::decode_request(
          kind, {in.data() + begin + store::wire::kHeaderBytes, h.body_bytes}, limits, req);
      requests.fetch_add(1, std::memory_order_relaxed);
      if (!ds.ok()) {
        const bool limit = ds.code == store::wire::DecodeCode::kKeyTooLarge ||
                           ds.code == store::wire::DecodeCode::kValueTooLarge ||
                           ds.code == store::wire::DecodeCode::kTooManyKeys;
        const std::string why = fmt::format("{} request: {}", store::wire::kind_name(kind),
                                            store::wire::describe(ds, limits));
        store::wire::encode_error(out, kind, limit ? Status::kLimitExceeded : Status::kBadRequest,
                                  why);
        note_rejected(conn, Event::kBadInput, why);
        break;
      }
      bool keep = true;
      if (conn.phase == Phase::kHello) {
        const bool auth = !options.token.empty();
        if (auth) nonce = store::wire::random_nonce();
        std::size_t start = begin_ok(out, kind);
        out.push_back(auth ? 1 : 0);
        out.insert(out.end(), nonce.begin(), nonce.end());
        store::wire::put_u64(out, limits.max_key_bytes);
        store::wire::put_u64(out, limits.max_value_bytes);
        store::wire::put_u64(out, limits.max_keys_per_op);
        store::wire::put_u64(out, limits.max_frame_bytes);
        store::wire::put_string(out, local_name);
        store::wire::end_frame(out, start);
        conn.phase = auth ? Phase::kAuth : Phase::kReady;
      } else if (conn.phase == Phase::kAuth) {
        if (!store::wire::mac_equal(req.mac, store::wire::auth_mac(options.token, nonce))) {
          store::wire::encode_error(out, kind, Status::kAuthFailed,
                                    "authentication failed: the client's token does not match "
                                    "the store's");
          note_rejected(conn, Event::kBadInput, "wrong token");
          break;
        }
        store::wire::end_frame(out, begin_ok(out, kind));
        conn.phase = Phase::kReady;
      } else {
        keep = co_await serve_request(conn, req);
      }
      if (conn.phase == Phase::kReady) leave_handshaking(conn);
      begin += frame;
      if (begin == end) begin = end = 0;
      shrink_input(conn);
      account(conn);
      release_input_room(conn);
      if (!keep) break;
      if (out.size() >= kFlushBytes) co_await flush(conn);
    }
    // Closing: send what was answered (an error frame, usually), best effort.
    if (!out.empty()) {
      try {
        co_await flush(conn);
      } catch (const boost::system::system_error&) {
      }
    }
    error_code ignored;
    conn.socket.shutdown(socket_base::shutdown_both, ignored);
    conn.socket.close(ignored);
  }

  // Accepts connections on `acceptor` (TCP or Unix) until the server stops; each is served by
  // its own coroutine.
  template <typename Acceptor>
  awaitable<void> accept_loop(Acceptor& acceptor_ref) {
    constexpr bool kLocal = std::is_same_v<Acceptor, asio::local::stream_protocol::acceptor>;
    for (;;) {
      error_code ec;
      auto socket = co_await acceptor_ref.async_accept(asio::redirect_error(use_awaitable, ec));
      if (stopping || ec == asio::error::operation_aborted) co_return;
      if (ec) {
        if (ec == asio::error::no_descriptors ||
            ec == error_code(ENFILE, boost::system::system_category())) {
          // Out of descriptors (the cap is above what the process has left): free one by
          // closing the oldest connection still in its handshake and accept again, or failing
          // that turn the waiting connection away at once.
          if (!handshaking.empty()) {
            evicted.fetch_add(1, std::memory_order_relaxed);
            close_connection(*handshaking.front(), Event::kEvicted,
                             "out of file descriptors and this is the oldest connection still "
                             "in its handshake");
            continue;
          }
          refuse_waiting(acceptor_ref.native_handle());
        }
        // Or a connection reset before accept: back off briefly, go on.
        log_event(Event::kAcceptFailed, fmt::format("accept failed: {}", ec.message()));
        asio::steady_timer pause(io, std::chrono::milliseconds(10));
        co_await pause.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      std::string peer = "local";
      if constexpr (!kLocal) {
        socket.set_option(tcp::no_delay(true), ec);
        auto ep = socket.remote_endpoint(ec);
        peer = ec ? std::string("?") : fmt::format("{}:{}", ep.address().to_string(), ep.port());
      } else {
        local_accepted.fetch_add(1, std::memory_order_relaxed);
      }
      accepted.fetch_add(1, std::memory_order_relaxed);
      if (!make_room()) {
        refused.fetch_add(1, std::memory_order_relaxed);
        rejected.fetch_add(1, std::memory_order_relaxed);
        const std::string why = fmt::format(
            "the server serves its cap of {} connections (max_connections, by default from the "
            "open-file limit), every one past its handshake",
            connections.size());
        log_event(Event::kRefused,
                  fmt::format("closing connection from {} at once: {}", peer, why));
        // Best effort, without waiting: the client reads why instead of a bare close.
        Bytes answer;
        store::wire::encode_error(answer, Kind::kHello, Status::kBusy, why);
        socket.non_blocking(true, ec);
        socket.write_some(asio::buffer(answer), ec);
        socket.shutdown(socket_base::shutdown_send, ec);
        socket.close(ec);
        continue;
      }
      // Counted from here, not when its coroutine starts, so a burst of accepts cannot pass
      // the cap.
      auto conn = std::make_unique<Connection>(Socket(std::move(socket)), std::move(peer), io);
      connections.insert(conn.get());
      conn->handshake_at = handshaking.insert(handshaking.end(), conn.get());
      conn->in_handshake = true;
      open.fetch_add(1, std::memory_order_relaxed);
      asio::co_spawn(io, serve(std::move(conn)), asio::detached);
    }
  }

  // Listens on an abstract Unix socket with a random name; on failure, serves TCP only.
  void open_local_acceptor() {
    const auto nonce = store::wire::random_nonce();
    std::string name = "c10d-store-";
    for (int i = 0; i < 12; ++i) name += fmt::format("{:02x}", nonce[i]);
    error_code ec;
    asio::local::stream_protocol::endpoint endpoint(std::string(1, '\0') + name);
    local_acceptor.open(endpoint.protocol(), ec);
    if (!ec) local_acceptor.bind(endpoint, ec);
    if (!ec) local_acceptor.listen(options.backlog, ec);
    if (ec) {
      C10D_LOG_INFO("store server :{}: no local socket ({}); TCP only", port, ec.message());
      local_acceptor.close(ec);
      return;
    }
    local_name = std::move(name);
    asio::co_spawn(io, accept_loop(local_acceptor), asio::detached);
  }

  // The io thread's loop. While requests keep coming it polls the reactor instead of sleeping
  // in epoll_wait: a thread woken from epoll takes tens of microseconds to run again on virtual
  // machines, more than a request costs to serve. After kSpinWindow without work it blocks, so
  // an idle server (the usual case, hosted inside rank 0) costs nothing, and it regains the
  // scheduler's favour for waking threads when many client processes share the cores.
  void run() {
    constexpr auto kSpinWindow = std::chrono::microseconds(50);
    auto last_work = std::chrono::steady_clock::now();
    while (!io.stopped()) {
      if (io.poll() > 0) {
        last_work = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - last_work > kSpinWindow) {
        io.run_one();
        last_work = std::chrono::steady_clock::now();
      }
    }
  }

  // Runs on the io thread: closes everything so every coroutine finishes.
  void shutdown() {
    stopping = true;
    error_code ec;
    acceptor.close(ec);
    local_acceptor.close(ec);
    log_timer.cancel();
    roll_log_window(/*force=*/true);
    for (Connection* c : connections) {
      c->socket.shutdown(socket_base::shutdown_both, ec);
      c->socket.close(ec);
      if (c->waiter != nullptr) c->waiter->timer.cancel();
      if (c->room_timer != nullptr) c->room_timer->cancel();
      if (c->input_room_timer != nullptr) c->input_room_timer->cancel();
    }
  }
};

TCPStoreServer::TCPStoreServer(store::ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& s = *impl_;
  const StoreLimits& l = s.options.limits;
  // Deadlines are computed from these: a timeout past core::kMaxTimeout would wrap one.
  core::check_timeout(s.options.handshake_timeout, "store server: handshake_timeout");
  core::check_timeout(s.options.busy_handshake_timeout, "store server: busy_handshake_timeout");
  core::check_timeout(s.options.write_timeout, "store server: write_timeout");
  core::check_timeout(s.options.read_timeout, "store server: read_timeout");
  // Lengths travel as u32 on the wire; a frame must hold one key and one value.
  C10D_CHECK(l.max_key_bytes <= UINT32_MAX && l.max_value_bytes <= UINT32_MAX &&
                 l.max_keys_per_op <= UINT32_MAX,
             "store limits: key {} / value {} bytes and {} keys per request must each fit in 32 "
             "bits",
             l.max_key_bytes, l.max_value_bytes, l.max_keys_per_op);
  C10D_CHECK(l.max_frame_bytes >= l.max_key_bytes + l.max_value_bytes + 64,
             "store limits: a request of at most {} bytes cannot carry a {}-byte key and a "
             "{}-byte value",
             l.max_frame_bytes, l.max_key_bytes, l.max_value_bytes);
  C10D_CHECK(l.max_response_bytes >= store::wire::value_answer_bytes(l.max_value_bytes),
             "store limits: an answer of at most {} bytes (max_response_bytes) cannot carry a "
             "{}-byte value",
             l.max_response_bytes, l.max_value_bytes);
  s.output_limit = s.options.max_pending_output_bytes == 0 ? 4 * l.max_response_bytes
                                                           : s.options.max_pending_output_bytes;
  C10D_CHECK(s.output_limit >= l.max_response_bytes,
             "store server: max_pending_output_bytes {} cannot hold one answer of "
             "max_response_bytes {}",
             s.output_limit, l.max_response_bytes);
  s.input_limit = s.options.max_pending_input_bytes != 0 ? s.options.max_pending_input_bytes
                  : l.max_frame_bytes > SIZE_MAX / 4     ? SIZE_MAX
                                                         : 4 * l.max_frame_bytes;
  C10D_CHECK(s.input_limit >= l.max_frame_bytes,
             "store server: max_pending_input_bytes {} cannot hold one request of "
             "max_frame_bytes {}",
             s.input_limit, l.max_frame_bytes);
  s.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const std::string& host = s.options.host;
  error_code ec;
  tcp::endpoint endpoint;
  if (host.empty() || host == "0.0.0.0") {
    endpoint = tcp::endpoint(tcp::v4(), s.options.port);
  } else if (host == "::") {
    endpoint = tcp::endpoint(tcp::v6(), s.options.port);
  } else {
    auto address = asio::ip::make_address(host, ec);
    if (ec) {
      tcp::resolver resolver(s.io);
      auto results = resolver.resolve(host, std::to_string(s.options.port), ec);
      if (ec || results.empty()) {
        C10D_THROW(NetworkError, "store server: cannot resolve host '{}': {}", host,
                   ec ? ec.message() : "no addresses");
      }
      endpoint = results.begin()->endpoint();
    } else {
      endpoint = tcp::endpoint(address, s.options.port);
    }
  }
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(s.options.backlog, ec);
  if (ec) {
    C10D_THROW(NetworkError, "store server: cannot listen on {}:{}: {}", host, s.options.port,
               ec.message());
  }
  s.port = s.acceptor.local_endpoint().port();
  asio::co_spawn(s.io, s.accept_loop(s.acceptor), asio::detached);
  if (s.options.local_socket) s.open_local_acceptor();
  s.thread = std::thread([&s] {
    // No handler should throw; one that does is logged and the server goes on serving (Asio
    // allows run() again after a handler threw), so nothing leaves the thread.
    for (;;) {
      try {
        s.run();
        return;
      } catch (const std::exception& e) {
        C10D_LOG_ERROR("store server :{}: a handler on the io thread failed: {}", s.port, e.what());
      } catch (...) {
        C10D_LOG_ERROR("store server :{}: a handler on the io thread failed", s.port);
      }
    }
  });
  C10D_LOG_INFO("store server listening on {}:{}{}", host, s.port,
                s.options.token.empty() ? "" : " (token required)");
}

TCPStoreServer::~TCPStoreServer() { stop(); }

std::uint16_t TCPStoreServer::port() const { return impl_->port; }

const std::string& TCPStoreServer::host() const { return impl_->options.host; }

void TCPStoreServer::stop() {
  Impl& s = *impl_;
  // Every caller returns once the server has stopped; the first one does the stopping.
  std::call_once(s.stop_once, [&s] {
    asio::post(s.io, [&s] { s.shutdown(); });
    if (s.thread.get_id() == std::this_thread::get_id()) return;  // cannot join itself
    // Every coroutine ends once its socket is closed; the thread then leaves run(). The
    // watchdog stops the context outright should a coroutine fail to finish within a second.
    std::promise<void> done;
    std::thread watchdog([&s, finished = done.get_future()] {
      if (finished.wait_for(std::chrono::seconds(1)) == std::future_status::timeout) s.io.stop();
    });
    if (s.thread.joinable()) s.thread.join();
    done.set_value();
    watchdog.join();
  });
}

store::ServerStats TCPStoreServer::stats() const {
  const Impl& s = *impl_;
  store::ServerStats st;
  st.connections_accepted = s.accepted.load();
  st.local_connections_accepted = s.local_accepted.load();
  st.connections_open = s.open.load();
  st.connections_rejected = s.rejected.load();
  st.connections_refused = s.refused.load();
  st.connections_evicted = s.evicted.load();
  st.connections_stalled = s.stalled.load();
  st.connections_read_stalled = s.read_stalled.load();
  st.connections_starved = s.starved.load();
  st.requests = s.requests.load();
  st.waits_held = s.held.load();
  st.keys = s.keys.load();
  st.pending_output_bytes = s.pending_output.load();
  st.pending_input_bytes = s.pending_input.load();
  st.buffer_bytes = s.buffer_bytes.load();
  return st;
}

}  // namespace c10d::inline v1
