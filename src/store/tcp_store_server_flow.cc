// Back-pressure in the store server (tcp_store_server_impl.h; the limits are drawn in
// tcp_store_server.h): the server-wide accounting of every connection's buffers, room for large
// request frames under max_pending_input_bytes (first come first served), room for large
// answers under max_pending_output_bytes, the watches that close a connection whose frame stops
// arriving (read_timeout) or whose client does not take its answers (write_timeout), and
// flush(), which writes a connection's answers.
#include <algorithm>
#include <cstring>
#include <string>
#include <utility>

#include "core/logging.h"
#include "store/tcp_store_server_impl.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

namespace asio = boost::asio;
using asio::awaitable;
using asio::use_awaitable;
using store::tcp_server::kInitialReadBuffer;
using store::tcp_server::kKeepBufferBytes;
using store::tcp_server::kLargeAnswerBytes;

}  // namespace

// ---- buffers ----

// Brings the server-wide counters up to date with `c`'s buffers.
void TCPStoreServer::Impl::account(Connection& c) {
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
void TCPStoreServer::Impl::shrink_input(Connection& c) {
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
void TCPStoreServer::Impl::take_input_room(Connection& c, std::size_t bytes) {
  c.in_reserved = bytes;
  input_reserved += bytes;
  pending_input.store(input_reserved, std::memory_order_relaxed);
}

// Once its frame has been served (or the connection ends): its room goes to the waiters.
void TCPStoreServer::Impl::release_input_room(Connection& c) {
  if (c.in_reserved == 0) return;
  input_reserved -= c.in_reserved;
  c.in_reserved = 0;
  pending_input.store(input_reserved, std::memory_order_relaxed);
  grant_input_room();
}

void TCPStoreServer::Impl::leave_input_queue(Connection& c) {
  if (!c.in_input_queue) return;
  input_queue.erase(c.input_queue_at);
  c.in_input_queue = false;
}

// Gives room to the waiters in order while the first one fits, and wakes them.
void TCPStoreServer::Impl::grant_input_room() {
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
awaitable<bool> TCPStoreServer::Impl::reserve_input_room(Connection& c, std::size_t frame) {
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
void TCPStoreServer::Impl::watch_read(Connection& c) {
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

// ---- answers: room for large ones (max_pending_output_bytes), writing ----

// After a write: the output buffer is emptied, and given back when it grew large.
void TCPStoreServer::Impl::release_output(Connection& c) {
  if (c.out.capacity() > kKeepBufferBytes) {
    Bytes().swap(c.out);
  } else {
    c.out.clear();
  }
  account(c);
}

// Whether an answer whose body is `bytes` may be built on `c` now: a large one only alone
// (nothing else pending on `c`) and within the server's limit on unread answers.
bool TCPStoreServer::Impl::answer_fits(const Connection& c, std::uint64_t bytes) const {
  if (bytes < kLargeAnswerBytes) return true;
  if (!c.out.empty()) return false;
  const std::uint64_t pending = pending_output.load(std::memory_order_relaxed);
  return pending == 0 || pending + bytes <= output_limit;
}

// Makes room for a large answer to a `kind` request that does not fit yet: writes what `c` has
// pending, then waits (up to write_timeout) for other connections' answers to be written.
// False when there is still no room, the request then answered busy (answer_busy()). The
// caller looks its keys up again afterwards: they may have changed.
awaitable<bool> TCPStoreServer::Impl::wait_for_room(Connection& c, Kind kind, std::uint64_t bytes) {
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

void TCPStoreServer::Impl::answer_busy(Connection& c, Kind kind, std::uint64_t bytes) {
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

// Writes conn.out, then empties it (and gives back a large buffer). Most answers fit in the
// socket's buffer and go at once; a write that must wait for the client to read is watched
// by write_timer, which closes the connection when its client does not take the answer
// within write_timeout. Throws when the write fails.
awaitable<void> TCPStoreServer::Impl::flush(Connection& c) {
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

}  // namespace c10d::inline v1
