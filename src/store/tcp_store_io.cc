// One TCPStore request's trip (tcp_store_impl.h): the socket's deadlines (SO_RCVTIMEO and
// SO_SNDTIMEO slices under a deadline loop), sending the request, reading its answer (spinning
// briefly before blocking), checking that it answers this request, decoding its values, and
// turning an error status into the exception it stands for. Any failure midway drops the
// connection.
#include <sched.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <new>
#include <string>

#include "core/check.h"
#include "store/tcp_store_impl.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

using store::tcp_client::remaining;

// How a client waits for an answer (see fill()). A thread blocked in recv and woken by the
// answer costs tens of microseconds on virtual machines, more than a busy server takes to
// answer; so it first polls without giving up the core for kHotSpin, then polls yielding the
// core between polls (ranks may outnumber cores) until kSpin, and only then blocks. Measured
// in docs/benchmarks.md: a longer hot phase starves other ranks when they outnumber cores.
constexpr std::chrono::microseconds kHotSpin{5};
constexpr std::chrono::microseconds kSpin{50};

// After a call, a request or answer buffer larger than this is given back: one large get or set
// must not pin its size for the store's life.
constexpr std::size_t kKeepBufferBytes = 64 * 1024;

}  // namespace

[[noreturn]] void TCPStore::Impl::fail(const char* what, const std::string& context) {
  const int err = errno;
  drop();
  C10D_THROW(StoreError, "store {}: {} during {}: {}", address, what, context, std::strerror(err));
}

// SO_RCVTIMEO/SO_SNDTIMEO bound each blocking syscall; the deadline loop around them decides
// when a call has timed out. Slices are capped at kSlice so that calls with different
// timeouts (GET carries the grace, SET does not) share one setting instead of paying a
// setsockopt each; only a call with less than kSlice left sets a shorter one.
void TCPStore::Impl::set_socket_timeout(Milliseconds t) {
  constexpr Milliseconds kSlice{1000};
  t = std::clamp((t + Milliseconds(9)) / 10 * 10, Milliseconds(10), kSlice);
  if (t == socket_timeout) return;
  timeval tv{};
  tv.tv_sec = t.count() / 1000;
  tv.tv_usec = (t.count() % 1000) * 1000;
  ::setsockopt(fd.get(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  ::setsockopt(fd.get(), SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  socket_timeout = t;
}

[[noreturn]] void TCPStore::Impl::timed_out(Clock::time_point start, const std::string& context) {
  drop();
  C10D_THROW(TimeoutError, "store {}: no answer to {} within {} ms", address, context,
             std::chrono::duration_cast<Milliseconds>(Clock::now() - start).count());
}

// Reads until `need` unread bytes are buffered.
void TCPStore::Impl::fill(std::size_t need, Clock::time_point start, Clock::time_point deadline,
                          const std::string& context) {
  if (in_begin + need > in.size()) {
    std::memmove(in.data(), in.data() + in_begin, in_end - in_begin);
    in_end -= in_begin;
    in_begin = 0;
  }
  const auto spin_start = Clock::now();
  while (in_end - in_begin < need) {
    // The buffer grows with the bytes that arrive (at most doubling), never to a length an
    // answer merely claims.
    if (in_end == in.size()) {
      try {
        in.resize(std::min(need, std::max<std::size_t>(4096, 2 * in.size())));
      } catch (const std::bad_alloc&) {
        drop();
        C10D_THROW(StoreError, "store {}: an answer to {} of {} bytes cannot be buffered", address,
                   context, need);
      }
    }
    const auto now = Clock::now();
    if (now >= deadline) timed_out(start, context);
    const bool spinning = now - spin_start < kSpin;
    // The last slice ends at the deadline, not up to a whole slice after it.
    if (!spinning) set_socket_timeout(remaining(deadline));
    ssize_t n =
        ::recv(fd.get(), in.data() + in_end, in.size() - in_end, spinning ? MSG_DONTWAIT : 0);
    if (n < 0 && spinning && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      if (now - spin_start >= kHotSpin) sched_yield();
      continue;
    }
    if (n > 0) {
      in_end += static_cast<std::size_t>(n);
    } else if (n == 0) {
      drop();
      C10D_THROW(StoreError, "store {}: the server closed the connection during {}", address,
                 context);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      continue;  // SO_RCVTIMEO slice over; the deadline check above decides
    } else if (errno != EINTR) {
      fail("receive failed", context);
    }
  }
}

// Sends `out`, one or more request frames.
void TCPStore::Impl::send_out(Clock::time_point start, Clock::time_point deadline,
                              const std::string& context) {
  set_socket_timeout(remaining(deadline));
  std::size_t sent = 0;
  while (sent < out.size()) {
    ssize_t n = ::send(fd.get(), out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n >= 0) {
      sent += static_cast<std::size_t>(n);
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      if (Clock::now() >= deadline) timed_out(start, context);
    } else if (errno != EINTR) {
      fail("send failed", context);
    }
  }
}

// Reads the next answer, which must be to a request of `kind`. Throws on an error status.
TCPStore::Impl::Response TCPStore::Impl::read_answer(Kind kind, Clock::time_point start,
                                                     Clock::time_point deadline,
                                                     const std::string& context) {
  if (in.size() < 4096) in.resize(4096);
  fill(store::wire::kHeaderBytes, start, deadline, context);
  store::wire::Header h;
  auto hs = store::wire::decode_header({in.data() + in_begin, in_end - in_begin}, true,
                                       options.limits, h);
  if (!hs.ok()) {
    drop();
    C10D_THROW(StoreError, "store {}: bad answer to {}: {}", address, context,
               store::wire::describe(hs, options.limits));
  }
  const std::size_t frame = store::wire::kHeaderBytes + static_cast<std::size_t>(h.body_bytes);
  fill(frame, start, deadline, context);
  std::span<const std::uint8_t> body(in.data() + in_begin + store::wire::kHeaderBytes,
                                     h.body_bytes);
  in_begin += frame;
  if (in_begin == in_end) in_begin = in_end = 0;
  if (body.empty()) {
    drop();
    C10D_THROW(StoreError, "store {}: empty answer to {}", address, context);
  }
  const auto status = static_cast<Status>(body[0]);
  if (status == Status::kOk && h.version == store::wire::kVersion &&
      h.kind == (static_cast<std::uint8_t>(kind) | store::wire::kResponseBit)) {
    return {body.subspan(1)};
  }
  throw_status(status, h, context, error_text(body.subspan(1)));
}

TCPStore::Impl::Response TCPStore::Impl::round_trip(Kind kind, Clock::time_point deadline,
                                                    const std::string& context) {
  const auto start = Clock::now();
  send_out(start, deadline, context);
  return read_answer(kind, start, deadline, context);
}

// An answer that does not parse is the server's fault, not the caller's.
[[noreturn]] void TCPStore::Impl::malformed(std::string_view kind) {
  drop();
  C10D_THROW(StoreError, "store {}: malformed {} answer", address, kind);
}

// The answer's one value, or its one i64; anything else is malformed.
Bytes TCPStore::Impl::value_of(const Response& r, std::string_view kind) {
  store::wire::Reader reader(r.payload, options.limits);
  std::span<const std::uint8_t> value;
  reader.value(value);
  if (!reader.finish().ok()) malformed(kind);
  Bytes result(value.begin(), value.end());
  trim_input();
  return result;
}

std::int64_t TCPStore::Impl::int_of(const Response& r, std::string_view kind) {
  store::wire::Reader reader(r.payload, options.limits);
  std::int64_t v = 0;
  reader.i64(v);
  if (!reader.finish().ok()) malformed(kind);
  return v;
}

// Give back the buffer a large request or answer grew: the request's once it is sent, the
// answer's once its values are copied out (a Response points into it until then).
void TCPStore::Impl::trim_output() {
  if (out.capacity() > kKeepBufferBytes) Bytes().swap(out);
}

void TCPStore::Impl::trim_input() {
  if (in.size() > kKeepBufferBytes && in_begin == in_end) Bytes().swap(in);
}

// Forgets the connection: the next call connects again.
void TCPStore::Impl::drop() {
  fd.reset();
  in_begin = in_end = 0;
}

std::string_view TCPStore::Impl::error_text(std::span<const std::uint8_t> rest) {
  if (rest.size() < 4) return {};
  std::uint32_t n = store::wire::get_u32(rest.data());
  if (n > rest.size() - 4) return {};
  return {reinterpret_cast<const char*>(rest.data() + 4), n};
}

[[noreturn]] void TCPStore::Impl::throw_status(Status status, const store::wire::Header& h,
                                               const std::string& context,
                                               std::string_view message) {
  switch (status) {
    case Status::kTimeout:
      C10D_THROW(TimeoutError, "store {}: {} timed out: {}", address, context, message);
    case Status::kNotInteger:
    case Status::kOutOfRange:
      C10D_THROW(InvalidArgument, "store {}: {}: {}", address, context, message);
    case Status::kLimitExceeded:
      drop();  // the server may have closed the connection (it does for a broken frame limit)
      C10D_THROW(InvalidArgument, "store {}: {} refused: {}", address, context, message);
    case Status::kResponseTooLarge:
    case Status::kBusy:
      // The server answered and serves on: the connection stays.
      C10D_THROW(StoreError, "store {}: {} refused: {}", address, context, message);
    case Status::kVersionMismatch:
      drop();
      C10D_THROW(StoreError,
                 "store {}: protocol version mismatch: this client speaks version {}, the "
                 "server speaks version {} ({})",
                 address, store::wire::kVersion, h.version, message);
    case Status::kAuthFailed:  // in this client's words alone: the server's say the same
      drop();
      C10D_THROW(StoreError,
                 "store {}: authentication failed: this client's token does not match the "
                 "store's (C10D_STORE_TOKEN or TCPStoreOptions::token must be the store's "
                 "secret)",
                 address);
    case Status::kOk:
      drop();
      C10D_THROW(StoreError, "store {}: answer to {} does not match the request (kind {:#x})",
                 address, context, h.kind);
    default:
      drop();
      C10D_THROW(StoreError, "store {}: {} failed: {}: {}", address, context,
                 store::wire::status_name(status), message);
  }
}

}  // namespace c10d::inline v1
