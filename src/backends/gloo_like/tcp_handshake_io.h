// What both sides of the TCP transport's handshake share (tcp_handshake.h): waits on a
// nonblocking socket bounded by the setup deadline, each looking first at another rank's
// recorded set-up failure (SetupContext::watch), and reading a frame as far as it has arrived.
// The connecting side is in tcp_handshake_connect.cc, the accepting side in
// tcp_handshake_accept.cc, the job's key in tcp_handshake.cc; the first two say
// `using namespace handshake_detail;`.
#pragma once

#include <poll.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <span>
#include <vector>

#include "backends/gloo_like/tcp_handshake.h"
#include "core/check.h"

namespace c10d::inline v1::gloo_like::handshake_detail {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using transport::Clock;

inline std::int64_t ms_until(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

// The longest a set-up wait sleeps before it looks at `watch` (or, without one, the deadline).
inline int poll_slice_ms(std::int64_t left, const backends::SetupWatch* watch) {
  const std::int64_t cap = watch != nullptr ? backends::SetupWatch::kPollInterval.count() : 1000;
  return static_cast<int>(std::min<std::int64_t>(left, cap));
}

// Throws another rank's recorded set-up failure, if any (SetupWatch::check), or a NetworkError
// once the transport stopped connecting (SetupContext::cancelled).
inline void look(const SetupContext& ctx) {
  if (ctx.cancelled != nullptr && ctx.cancelled->load()) {
    C10D_THROW(NetworkError, "rank {}: the transport closed while it was connecting",
               ctx.self.rank);
  }
  if (ctx.watch != nullptr) ctx.watch->check();
}

// Waits until `fd` is ready for `events` or the deadline passes (at most a second per call, a
// poll interval with a watch, which it looks at first).
inline void poll_until(int fd, short events, const SetupContext& ctx) {
  look(ctx);
  const std::int64_t left = ms_until(ctx.deadline);
  if (left <= 0) return;
  pollfd p{fd, events, 0};
  ::poll(&p, 1, poll_slice_ms(left, ctx.watch));
}

// Reads what `s` (nonblocking) holds of the frame that `decode` parses into `bytes`, never past
// the frame's end (the peer's next frames stay in the socket). Returns the decoder's answer once
// it is not kShort; kShort when the socket has nothing more for now, or with `ec` set when the
// connection ended (asio::error::eof) or failed.
template <typename Decode>
HandshakeDecode read_some_frame(tcp::socket& s, std::vector<std::byte>& bytes, Decode&& decode,
                                error_code& ec) {
  for (;;) {
    const HandshakeDecode d = decode(std::span<const std::byte>(bytes));
    if (d.code != HandshakeCode::kShort) return d;
    const std::size_t had = bytes.size();
    bytes.resize(d.bytes);
    const std::size_t n = s.read_some(asio::buffer(bytes.data() + had, d.bytes - had), ec);
    bytes.resize(had + n);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      ec.clear();
      return d;
    }
    if (ec) return d;
  }
}

}  // namespace c10d::inline v1::gloo_like::handshake_detail
