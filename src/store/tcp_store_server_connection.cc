// One connection of the store server (tcp_store_server_impl.h): the coroutine that reads its
// frames, checks each header against StoreLimits before any allocation, holds it to the
// handshake (HELLO first, then AUTH when the server has a token: a MAC of the token over the
// server's nonce), serves its requests in order (tcp_store_server_commands.cc) and writes the
// answers, then closes it. Hostile input closes that connection only.
#include <algorithm>
#include <cstring>
#include <exception>
#include <memory>
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
using store::tcp_server::kFlushBytes;
using store::tcp_server::kInitialReadBuffer;
using store::tcp_server::kLargeFrameBytes;
using store::tcp_server::kMaxHandshakeBody;

}  // namespace

// One connection: read frames into conn.in, serve them in order, write responses.
awaitable<void> TCPStoreServer::Impl::serve(std::unique_ptr<Connection> owned) {
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

awaitable<void> TCPStoreServer::Impl::serve_frames(Connection& conn) {
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
  conn.socket.shutdown(asio::socket_base::shutdown_both, ignored);
  conn.socket.close(ignored);
}

}  // namespace c10d::inline v1
