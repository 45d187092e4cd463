// The connecting side of the TCP transport's handshake (tcp_handshake.h: connect_to_peer): read
// the peer's address from the store, connect without blocking past the setup deadline (a
// refused connection is retried with backoff for a few seconds), then say hello, answer the
// peer's challenge with this rank's proof and check the peer's signed answer (tcp_wire.h,
// steps 1-4), naming the peer, its address and the step on any failure.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <thread>

#include "backends/gloo_like/tcp_handshake.h"
#include "backends/gloo_like/tcp_handshake_io.h"
#include "core/check.h"
#include "core/logging.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace handshake_detail;  // asio, tcp, error_code, Clock and the shared waits

// A refused connect is tried again for this long (within the setup deadline), with backoff.
constexpr std::chrono::milliseconds kConnectRetryWindow{3000};
constexpr std::chrono::milliseconds kConnectBackoffMax{500};

std::string as_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

// Writes all of `buf` to `s` (nonblocking), waiting for room until the deadline; the error
// (asio::error::timed_out at the deadline), or none.
error_code write_all(tcp::socket& s, std::span<const std::byte> buf, const SetupContext& ctx) {
  std::size_t done = 0;
  while (done < buf.size()) {
    error_code ec;
    done += s.write_some(asio::buffer(buf.data() + done, buf.size() - done), ec);
    if (ec == asio::error::would_block || ec == asio::error::try_again) {
      if (Clock::now() >= ctx.deadline) return asio::error::timed_out;
      poll_until(s.native_handle(), POLLOUT, ctx);
    } else if (ec) {
      return ec;
    }
  }
  return {};
}

// The same, waiting for the whole frame until the deadline (then ec = timed_out).
template <typename Decode>
HandshakeDecode read_frame(tcp::socket& s, Decode&& decode, const SetupContext& ctx,
                           error_code& ec) {
  std::vector<std::byte> bytes;
  for (;;) {
    const HandshakeDecode d = read_some_frame(s, bytes, decode, ec);
    if (d.code != HandshakeCode::kShort || ec) return d;
    if (Clock::now() >= ctx.deadline) {
      ec = asio::error::timed_out;
      return d;
    }
    poll_until(s.native_handle(), POLLIN, ctx);
  }
}

// Connects `s` to `to` without blocking past the deadline (asio's connect would wait in poll
// for as long as the kernel retries a SYN).
error_code connect_until(tcp::socket& s, const tcp::endpoint& to, const SetupContext& ctx) {
  const Clock::time_point deadline = ctx.deadline;
  error_code ec;
  s.open(to.protocol(), ec);
  if (ec) return ec;
  s.non_blocking(true, ec);
  if (ec) return ec;
  if (::connect(s.native_handle(), to.data(), static_cast<socklen_t>(to.size())) == 0) return {};
  if (errno != EINPROGRESS && errno != EAGAIN) return {errno, boost::system::system_category()};
  for (;;) {
    look(ctx);
    const std::int64_t left = ms_until(deadline);
    if (left <= 0) return asio::error::timed_out;
    pollfd p{s.native_handle(), POLLOUT, 0};
    if (::poll(&p, 1, poll_slice_ms(left, ctx.watch)) > 0) break;
  }
  int err = 0;
  socklen_t len = sizeof err;
  if (::getsockopt(s.native_handle(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
  return err == 0 ? error_code{} : error_code{err, boost::system::system_category()};
}

// "host:port" (the host an IPv4 or IPv6 address) as an endpoint; nullopt when it is not one.
std::optional<tcp::endpoint> parse_address(const std::string& addr) {
  const auto colon = addr.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  std::string host = addr.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  unsigned port = 0;
  const char* first = addr.data() + colon + 1;
  const char* last = addr.data() + addr.size();
  const auto [end, parse_ec] = std::from_chars(first, last, port);
  if (parse_ec != std::errc() || end != last || first == last || port == 0 || port > 65535) {
    return std::nullopt;
  }
  error_code ec;
  const auto ip = asio::ip::make_address(host, ec);
  if (ec) return std::nullopt;
  return tcp::endpoint(ip, static_cast<unsigned short>(port));
}

// The connecting side of the handshake on a connected socket `s` (tcp_wire.h, steps 1-4).
void prove_to_peer(tcp::socket& s, const SetupContext& ctx, int peer, const std::string& addr) {
  const auto rank = ctx.self.rank;
  // Who is at fault is not known until the peer proves itself: the address is only what the
  // store says.
  const std::string published =
      fmt::format("rank {}: the process at {}, published as rank {}'s address,", rank, addr, peer);
  const auto io_failure = [&](const char* step, const error_code& ec) {
    if (ec == asio::error::timed_out) {
      C10D_THROW(TimeoutError, "rank {}: handshake with rank {} at {}: no {} within {} ms", rank,
                 peer, addr, step, ctx.timeout.count());
    }
    if (ec == asio::error::eof) {
      C10D_THROW(NetworkError, "{} closed the connection before its {}", published, step);
    }
    C10D_THROW(NetworkError, "rank {}: handshake with rank {} at {}: {}", rank, peer, addr,
               ec.message());
  };

  Nonces nonces;
  nonces.connector = new_nonce();
  if (auto ec = write_all(s, encode_greeting(nonces.connector), ctx)) {
    io_failure("room for this rank's hello", ec);
  }
  error_code ec;
  HandshakeDecode d = read_frame(
      s, [&](std::span<const std::byte> in) { return decode_greeting(in, nonces.acceptor); }, ctx,
      ec);
  if (ec && d.code == HandshakeCode::kShort) io_failure("challenge", ec);
  if (d.code == HandshakeCode::kBadVersion) {
    C10D_THROW(NetworkError,
               "rank {}: rank {} at {} speaks transport handshake version {}, this rank speaks "
               "version {} (every rank must run the same c10d)",
               rank, peer, addr, d.value, kHandshakeVersion);
  }
  if (!d.ok()) C10D_THROW(NetworkError, "{} is not a c10d rank: {}", published, describe(d));

  const Proof proof{ctx.self, static_cast<std::uint32_t>(peer)};
  if (auto wec = write_all(s, encode_proof(proof, ctx.key, nonces), ctx)) {
    io_failure("room for this rank's proof", wec);
  }
  Accept accept;
  d = read_frame(
      s, [&](std::span<const std::byte> in) { return decode_accept(in, ctx.key, nonces, accept); },
      ctx, ec);
  if (ec == asio::error::eof && d.code == HandshakeCode::kShort) {
    // An acceptor closes without a word on a proof that does not check out.
    C10D_THROW(NetworkError,
               "{} closed the connection instead of accepting this rank's proof: it does not "
               "share this job's key (a process of another job, or a rank whose "
               "C10D_STORE_TOKEN differs)",
               published);
  }
  if (ec && d.code == HandshakeCode::kShort) io_failure("answer to this rank's proof", ec);
  if (d.code == HandshakeCode::kBadMac) {
    C10D_THROW(NetworkError,
               "{} did not prove it belongs to this job (its answer is not signed with this "
               "job's key: a stranger, or a rank whose C10D_STORE_TOKEN differs)",
               published);
  }
  if (!d.ok()) C10D_THROW(NetworkError, "{} sent a malformed answer: {}", published, describe(d));
  const AcceptStatus status = judge_accept(ctx.self, proof.expected_rank, accept);
  if (status != AcceptStatus::kAccepted) {
    C10D_THROW(NetworkError, "rank {}: handshake with rank {} at {} refused: {}", rank, peer, addr,
               refusal_at_connector(status, ctx.self, proof.expected_rank, accept.acceptor));
  }
}

}  // namespace

tcp::socket connect_to_peer(asio::io_context& io, Store& store, const SetupContext& ctx, int peer) {
  const auto rank = ctx.self.rank;
  const std::string key = fmt::format("{}/addr/{}", ctx.self.group, peer);
  const auto retry_until = std::min(ctx.deadline, Clock::now() + kConnectRetryWindow);
  std::chrono::milliseconds backoff{10};
  for (;;) {
    const std::string addr =
        ctx.watch != nullptr ? as_string(ctx.watch->get(key, ctx.deadline)) : store.get_string(key);
    const std::optional<tcp::endpoint> to = parse_address(addr);
    if (!to) {
      C10D_THROW(NetworkError,
                 "rank {}: rank {}'s address in the store ('{}') is \"{}\", not host:port", rank,
                 peer, key, addr);
    }
    tcp::socket s(io);
    const error_code ec = connect_until(s, *to, ctx);
    if (!ec) {
      error_code ignored;  // small frames go out at once; a socket without it still works
      s.set_option(tcp::no_delay(true), ignored);
      prove_to_peer(s, ctx, peer, addr);
      error_code blocking_ec;
      s.non_blocking(false, blocking_ec);
      if (blocking_ec) {
        C10D_THROW(NetworkError, "rank {}: connection to rank {} at {}: {}", rank, peer, addr,
                   blocking_ec.message());
      }
      return s;
    }
    if (ec == asio::error::timed_out) {
      C10D_THROW(TimeoutError, "rank {}: cannot connect to rank {} at {} within {} ms", rank, peer,
                 addr, ctx.timeout.count());
    }
    if (ec != asio::error::connection_refused || Clock::now() + backoff >= retry_until) {
      const bool out_of_files = ec.value() == EMFILE || ec.value() == ENFILE;
      C10D_THROW(NetworkError, "rank {}: cannot connect to rank {} at {}: {}{}", rank, peer, addr,
                 ec.message(), out_of_files ? "; " + descriptor_limits() : std::string());
    }
    C10D_LOG_DEBUG("rank {}: connecting to rank {} at {}: {}; retrying in {} ms", rank, peer, addr,
                   ec.message(), backoff.count());
    std::this_thread::sleep_for(backoff);
    look(ctx);
    backoff = std::min(backoff * 2, kConnectBackoffMax);
  }
}

}  // namespace c10d::inline v1::gloo_like
