// TCPStore's shared state, TCPStore::Impl, and the parts of the client that work on it, one file
// each (the frames are drawn in wire.h, the server is tcp_store_server.h):
//   tcp_store.cc          the public class: options and token, each Store operation as a request
//   tcp_store_connect.cc  connecting: every address with backoff, the handshake (HELLO, then
//                         AUTH), the switch to the server's local socket
//   tcp_store_io.cc       one request's trip: socket deadlines, sending, reading and checking the
//                         answer, error statuses as exceptions
//
// One blocking socket, used by one call at a time under mu_. Deadlines: connect polls a
// non-blocking socket; reads and writes block with SO_RCVTIMEO/SO_SNDTIMEO (two syscalls per
// round trip on the hot path, instead of four with poll) and re-check the deadline when woken.
// Any failure in the middle of a call closes the socket, so a half-read answer can never be
// taken for the next one; the next call connects again.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>

#include "c10d/store.h"
#include "core/check.h"
#include "core/fd.h"
#include "store/store_util.h"
#include "store/wire.h"

namespace c10d::inline v1 {

namespace store::tcp_client {

using Clock = std::chrono::steady_clock;

inline Milliseconds remaining(Clock::time_point deadline) {
  return std::max(Milliseconds(0),
                  std::chrono::duration_cast<Milliseconds>(deadline - Clock::now()));
}

}  // namespace store::tcp_client

struct TCPStore::Impl {
  using Clock = store::tcp_client::Clock;
  using Kind = store::wire::Kind;
  using Status = store::wire::Status;
  using Fd = core::Fd;

  TCPStoreOptions options;
  std::string address;
  std::string label;  // "store <address>", opening messages
  std::mutex mu;
  Fd fd;                                 // GUARDED_BY(mu)
  Milliseconds socket_timeout{-1};       // GUARDED_BY(mu): what SO_RCVTIMEO is set to
  Bytes out;                             // GUARDED_BY(mu)
  Bytes in;                              // GUARDED_BY(mu)
  std::size_t in_begin = 0, in_end = 0;  // GUARDED_BY(mu)
  // The limits of the server, from its HELLO answer, combined with ours: what the client checks
  // before sending, so that no request it sends fails for a limit.
  StoreLimits limits;  // GUARDED_BY(mu) once connected; set by connect()

  // A decoded answer: its body after the status byte.
  struct Response {
    std::span<const std::uint8_t> payload;
  };

  // ---- Connecting (tcp_store_connect.cc). ----
  std::string try_connect(Clock::time_point deadline);
  void connect(Clock::time_point deadline);
  std::string handshake(Clock::time_point deadline);
  void switch_to_local(const std::string& name, Clock::time_point deadline);

  // ---- One request's trip (tcp_store_io.cc). ----
  [[noreturn]] void fail(const char* what, const std::string& context);
  void set_socket_timeout(Milliseconds t);
  [[noreturn]] void timed_out(Clock::time_point start, const std::string& context);
  void fill(std::size_t need, Clock::time_point start, Clock::time_point deadline,
            const std::string& context);
  void send_out(Clock::time_point start, Clock::time_point deadline, const std::string& context);
  Response read_answer(Kind kind, Clock::time_point start, Clock::time_point deadline,
                       const std::string& context);
  Response round_trip(Kind kind, Clock::time_point deadline, const std::string& context);
  [[noreturn]] void malformed(std::string_view kind);
  Bytes value_of(const Response& r, std::string_view kind);
  std::int64_t int_of(const Response& r, std::string_view kind);
  void trim_output();
  void trim_input();
  void drop();
  static std::string_view error_text(std::span<const std::uint8_t> rest);
  [[noreturn]] void throw_status(Status status, const store::wire::Header& h,
                                 const std::string& context, std::string_view message);

  // ---- Requests (templates: tcp_store.cc builds them, the rest above carries them). ----

  // One request: connect when needed, send the frame that `build` writes, read its answer.
  // `connect_within` bounds the connect on its own: a WAIT or GET may wait `t` at the server
  // and gives the answer some grace more (plus_grace), but reconnecting to a server that is gone
  // must not take that grace too (a failing transport probes a dead store with a 500 ms WAIT).
  template <typename Build>
  Response call(Kind kind, Milliseconds timeout, const Build& build, const std::string& context,
                Milliseconds connect_within = Milliseconds::max()) {
    const auto start = Clock::now();
    const auto deadline = store::deadline_after(timeout);
    build_frame(kind, build, std::min(deadline, store::deadline_after(connect_within)));
    send_out(start, deadline, context);
    trim_output();
    return read_answer(kind, start, deadline, context);
  }

  // A request the server does not answer when it succeeds (SET): send it and return. Should it
  // fail, its error answer comes ahead of the next call's answer, which throws it.
  template <typename Build>
  void send_only(Kind kind, Milliseconds timeout, const Build& build, const std::string& context) {
    const auto start = Clock::now();
    const auto deadline = store::deadline_after(timeout);
    build_frame(kind, build, deadline);
    send_out(start, deadline, context);
    trim_output();
  }

  template <typename Build>
  void build_frame(Kind kind, const Build& build, Clock::time_point deadline) {
    if (!fd.valid()) connect(deadline);
    out.clear();
    const std::size_t start = store::wire::begin_frame(out, static_cast<std::uint8_t>(kind));
    build(out);
    store::wire::end_frame(out, start);
    const std::size_t body = out.size() - start - store::wire::kHeaderBytes;
    C10D_CHECK(body <= limits.max_frame_bytes,
               "store {}: a {} request of {} bytes exceeds the server's limit of {} per request",
               address, store::wire::kind_name(kind), body, limits.max_frame_bytes);
  }

  void check_key(std::string_view key) const { store::check_key(who(), key, limits); }
  void check_value(std::span<const std::uint8_t> value) const {
    store::check_value(who(), {}, value.size(), limits);  // the key is checked on its own
  }
  void check_keys(std::span<const std::string> keys) const {
    store::check_keys(who(), keys, limits);
  }
  const std::string& who() const { return label; }
};

}  // namespace c10d::inline v1
