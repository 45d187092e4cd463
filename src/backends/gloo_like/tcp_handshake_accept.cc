// The accepting side of the TCP transport's handshake (tcp_handshake.h: accept_peers): take
// every connection as it comes and read each one's frames as they arrive, so that a stranger
// that sends nothing, or dribbles, never holds up a real peer behind it; challenge each hello,
// check each proof and answer it signed. A connection that fails is closed and logged by
// address (the first few, then a count) and never takes a rank's place.
#include <poll.h>
#include <sys/socket.h>

#include <array>
#include <optional>
#include <string>
#include <vector>

#include "backends/gloo_like/tcp_handshake.h"
#include "backends/gloo_like/tcp_handshake_io.h"
#include "core/check.h"
#include "core/logging.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace handshake_detail;  // asio, tcp, error_code, Clock and the shared waits

// Refused connections logged one by one; later ones are counted and summed up at the end.
constexpr int kLoggedRefusals = 8;

// "1.2.3.4:5" or "[::1]:5".
std::string endpoint_string(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return ep.address().is_v6() ? fmt::format("[{}]:{}", host, ep.port())
                              : fmt::format("{}:{}", host, ep.port());
}

// Writes a frame of a handshake frame's size to a connection that has never had one written:
// it fits the socket's send buffer at once, so a peer that never reads holds up no one.
bool write_small(tcp::socket& s, std::span<const std::byte> frame) {
  error_code ec;
  const std::size_t n = s.write_some(asio::buffer(frame.data(), frame.size()), ec);
  return !ec && n == frame.size();
}

// Ends the sending side and reads what has arrived, so that closing does not reset the
// connection (which can discard the last frame sent before the peer reads it).
void finish_sending(tcp::socket& s) {
  error_code ec;
  s.shutdown(tcp::socket::shutdown_send, ec);
  std::array<std::byte, 4096> sink;
  s.read_some(asio::buffer(sink), ec);
}

}  // namespace

std::string remote_of(const tcp::socket& s) {
  error_code ec;
  const tcp::endpoint ep = s.remote_endpoint(ec);
  return ec ? std::string("an unknown address") : endpoint_string(ep);
}

RefusalLog::~RefusalLog() {
  if (count_ <= kLoggedRefusals) return;
  try {
    C10D_LOG_WARN("rank {}: refused {} connections {}, {} of them not logged", rank_, count_,
                  during_, count_ - kLoggedRefusals);
  } catch (...) {  // a destructor must not throw; the count is only news
  }
}

void RefusalLog::refused(const std::string& from, const std::string& why) {
  ++count_;
  if (count_ <= kLoggedRefusals) {
    C10D_LOG_WARN("rank {}: refused connection from {}: {}", rank_, from, why);
  }
  if (count_ == kLoggedRefusals) {
    C10D_LOG_WARN("rank {}: further refused connections are counted, not logged", rank_);
  }
}

std::optional<std::uint32_t> accept_step(PendingHandshake& p, const SetupContext& ctx,
                                         const std::function<bool(std::uint32_t)>& joined,
                                         RefusalLog& log, bool& done) {
  done = false;
  error_code ec;
  if (!p.challenged) {
    const HandshakeDecode d = read_some_frame(
        p.socket, p.bytes,
        [&](std::span<const std::byte> in) { return decode_greeting(in, p.nonces.connector); }, ec);
    if (d.code == HandshakeCode::kShort) {
      if (!ec) return std::nullopt;
      done = true;
      log.refused(p.from, ec == asio::error::eof ? "it closed the connection before its hello"
                                                 : ec.message());
      return std::nullopt;
    }
    if (d.code == HandshakeCode::kBadVersion) {
      // Only the version goes back, so the peer can name both; nothing of the job.
      if (write_small(p.socket, encode_version_notice())) finish_sending(p.socket);
      done = true;
      log.refused(p.from, "it speaks " + describe(d));
      return std::nullopt;
    }
    if (!d.ok()) {  // a wrong magic: not a c10d rank, and told nothing
      done = true;
      log.refused(p.from, describe(d) + ": not a c10d rank");
      return std::nullopt;
    }
    p.nonces.acceptor = new_nonce();
    p.challenged = true;
    p.bytes.clear();
    if (!write_small(p.socket, encode_greeting(p.nonces.acceptor))) {
      done = true;
      log.refused(p.from, "could not send it the challenge");
      return std::nullopt;
    }
  }
  Proof proof;
  const HandshakeDecode d = read_some_frame(
      p.socket, p.bytes,
      [&](std::span<const std::byte> in) { return decode_proof(in, ctx.key, p.nonces, proof); },
      ec);
  if (d.code == HandshakeCode::kShort) {
    if (!ec) return std::nullopt;
    done = true;
    log.refused(p.from, ec == asio::error::eof ? "it closed the connection before its proof"
                                               : ec.message());
    return std::nullopt;
  }
  done = true;
  if (d.code == HandshakeCode::kBadMac) {
    log.refused(
        p.from,
        describe(d) + " (a stranger, or a rank whose C10D_STORE_TOKEN differs); told nothing");
    return std::nullopt;
  }
  if (!d.ok()) {
    log.refused(p.from, describe(d));
    return std::nullopt;
  }
  // A proven member of the job from here on: it is told why when it is refused.
  AcceptStatus status = judge_proof(ctx.self, proof);
  const std::uint32_t peer = proof.connector.rank;
  if (status == AcceptStatus::kAccepted && joined(peer)) status = AcceptStatus::kDuplicate;
  const bool sent = write_small(p.socket, encode_accept({ctx.self, status}, ctx.key, p.nonces));
  if (status != AcceptStatus::kAccepted) {
    C10D_LOG_WARN("rank {}: refused rank {} from {}: {}", ctx.self.rank, peer, p.from,
                  refusal_at_acceptor(status, ctx.self, proof));
    return std::nullopt;
  }
  if (!sent) {
    log.refused(p.from, fmt::format("rank {} proved itself but could not be answered", peer));
    return std::nullopt;
  }
  return peer;
}

std::vector<std::optional<tcp::socket>> accept_peers(tcp::acceptor& acceptor,
                                                     const SetupContext& ctx) {
  const auto rank = ctx.self.rank;
  const auto world_size = ctx.self.world_size;
  std::vector<std::optional<tcp::socket>> ins(world_size);
  RefusalLog log(rank, "during setup");
  std::vector<PendingHandshake> pending;
  std::vector<pollfd> fds;
  for (std::uint32_t accepted = 0; accepted < world_size - 1;) {
    for (;;) {  // take every connection waiting in the backlog
      error_code ec;
      tcp::socket s(acceptor.get_executor());
      acceptor.accept(s, ec);
      if (ec == asio::error::would_block || ec == asio::error::try_again) break;
      if (ec) C10D_THROW(NetworkError, "rank {}: accept failed: {}", rank, ec.message());
      s.non_blocking(true, ec);
      if (ec) continue;  // closed at once: setup never waits on a blocking socket
      if (pending.size() == kMaxPendingHandshakes) {
        log.refused(pending.front().from,
                    fmt::format("dropped: {} connections were already waiting to finish a "
                                "handshake",
                                kMaxPendingHandshakes));
        pending.erase(pending.begin());
      }
      std::string from = remote_of(s);
      pending.push_back({std::move(s), std::move(from)});
    }
    for (auto it = pending.begin(); it != pending.end();) {
      bool done = false;
      const std::optional<std::uint32_t> peer = accept_step(
          *it, ctx, [&](std::uint32_t r) { return ins[r].has_value(); }, log, done);
      if (peer) {
        error_code ec;
        it->socket.set_option(tcp::no_delay(true), ec);  // best effort, as above
        it->socket.non_blocking(false, ec);
        if (ec) {
          C10D_THROW(NetworkError, "rank {}: connection from rank {} at {}: {}", rank, *peer,
                     it->from, ec.message());
        }
        ins[*peer].emplace(std::move(it->socket));
        ++accepted;
      }
      it = done ? pending.erase(it) : it + 1;
    }
    if (accepted == world_size - 1) break;
    const std::int64_t left = ms_until(ctx.deadline);
    if (left <= 0) {
      C10D_THROW(TimeoutError, "rank {}: only {} of {} peers connected in {} ms", rank, accepted,
                 world_size - 1, ctx.timeout.count());
    }
    look(ctx);
    fds.assign(1, pollfd{acceptor.native_handle(), POLLIN, 0});
    for (auto& p : pending) fds.push_back(pollfd{p.socket.native_handle(), POLLIN, 0});
    ::poll(fds.data(), fds.size(), poll_slice_ms(left, ctx.watch));
  }
  return ins;
}

}  // namespace c10d::inline v1::gloo_like
