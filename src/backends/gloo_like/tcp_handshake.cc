// The TCP transport's handshakes on sockets: see tcp_handshake.h; the frames are in tcp_wire.h.
#include "backends/gloo_like/tcp_handshake.h"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <thread>

#include "core/auth.h"
#include "core/check.h"
#include "core/logging.h"

namespace c10d::inline v1::gloo_like {
namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;
using transport::Clock;

namespace {

// A refused connect is tried again for this long (within the setup deadline), with backoff.
constexpr std::chrono::milliseconds kConnectRetryWindow{3000};
constexpr std::chrono::milliseconds kConnectBackoffMax{500};
// Refused connections logged one by one; later ones are counted and summed up at the end.
constexpr int kLoggedRefusals = 8;

std::int64_t ms_until(Clock::time_point deadline) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
}

// The longest a set-up wait sleeps before it looks at `watch` (or, without one, the deadline).
int poll_slice_ms(std::int64_t left, const backends::SetupWatch* watch) {
  const std::int64_t cap = watch != nullptr ? backends::SetupWatch::kPollInterval.count() : 1000;
  return static_cast<int>(std::min<std::int64_t>(left, cap));
}

// Throws another rank's recorded set-up failure, if any (SetupWatch::check).
void look(const SetupContext& ctx) {
  if (ctx.watch != nullptr) ctx.watch->check();
}

// Waits until `fd` is ready for `events` or the deadline passes (at most a second per call, a
// poll interval with a watch, which it looks at first).
void poll_until(int fd, short events, const SetupContext& ctx) {
  look(ctx);
  const std::int64_t left = ms_until(ctx.deadline);
  if (left <= 0) return;
  pollfd p{fd, events, 0};
  ::poll(&p, 1, poll_slice_ms(left, ctx.watch));
}

// "1.2.3.4:5" or "[::1]:5".
std::string endpoint_string(const tcp::endpoint& ep) {
  const std::string host = ep.address().to_string();
  return ep.address().is_v6() ? fmt::format("[{}]:{}", host, ep.port())
                              : fmt::format("{}:{}", host, ep.port());
}

std::string as_string(const Bytes& b) { return std::string(b.begin(), b.end()); }

std::string remote_of(const tcp::socket& s) {
  error_code ec;
  const tcp::endpoint ep = s.remote_endpoint(ec);
  return ec ? std::string("an unknown address") : endpoint_string(ep);
}

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

// Logs refused connections by address: the first kLoggedRefusals one by one, then only how
// many more, so a flood of strangers cannot fill the log.
class RefusalLog {
 public:
  explicit RefusalLog(std::uint32_t rank) : rank_(rank) {}
  RefusalLog(const RefusalLog&) = delete;
  RefusalLog& operator=(const RefusalLog&) = delete;
  ~RefusalLog() {
    if (count_ <= kLoggedRefusals) return;
    try {
      C10D_LOG_WARN("rank {}: refused {} connections during setup, {} of them not logged", rank_,
                    count_, count_ - kLoggedRefusals);
    } catch (...) {  // a destructor must not throw; the count is only news
    }
  }

  void refused(const std::string& from, const std::string& why) {
    ++count_;
    if (count_ <= kLoggedRefusals) {
      C10D_LOG_WARN("rank {}: refused connection from {}: {}", rank_, from, why);
    }
    if (count_ == kLoggedRefusals) {
      C10D_LOG_WARN("rank {}: further refused connections are counted, not logged", rank_);
    }
  }

 private:
  std::uint32_t rank_;
  int count_ = 0;
};

// An accepted connection whose handshake is under way. Setup reads every one as its bytes come,
// so one that sends nothing, or dribbles, never holds up a real peer's handshake behind it.
struct PendingHandshake {
  tcp::socket socket;
  std::string from;         // its remote address, for logs
  bool challenged = false;  // the Hello is in and the Challenge sent: the Proof comes next
  Nonces nonces;
  std::vector<std::byte> bytes;  // what has arrived of the current frame
};

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

// One step of the accepting side's handshake on `p` (tcp_wire.h): reads what has arrived and
// answers. Returns the peer's rank once it proved itself and was accepted; nullopt while the
// handshake goes on (`done` false) or when it ended in a refusal (`done` true; the connection is
// then to be closed).
std::optional<std::uint32_t> accept_step(PendingHandshake& p, const SetupContext& ctx,
                                         const std::vector<std::optional<tcp::socket>>& ins,
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
  if (status == AcceptStatus::kAccepted && ins[peer]) status = AcceptStatus::kDuplicate;
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

}  // namespace

TransportKey transport_key(Store& store, const std::string& token, int rank) {
  if (!token.empty()) return derive_transport_key(token);
  if (auto env = core::token_from_env()) return derive_transport_key(*env);
  // The first rank to get here, of any group on this store, picks the secret.
  const std::string mine = core::random_hex(32);
  const Bytes got = store.compare_set(kTransportSecretKey, {}, core::as_bytes(mine));
  if (got.size() < 32) {
    C10D_THROW(NetworkError,
               "rank {}: the job secret in the store ('{}') has {} bytes, fewer than 32; delete "
               "the key, or set C10D_STORE_TOKEN",
               rank, kTransportSecretKey, got.size());
  }
  return derive_transport_key({reinterpret_cast<const char*>(got.data()), got.size()});
}

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
      C10D_THROW(NetworkError, "rank {}: cannot connect to rank {} at {}: {}", rank, peer, addr,
                 ec.message());
    }
    C10D_LOG_DEBUG("rank {}: connecting to rank {} at {}: {}; retrying in {} ms", rank, peer, addr,
                   ec.message(), backoff.count());
    std::this_thread::sleep_for(backoff);
    look(ctx);
    backoff = std::min(backoff * 2, kConnectBackoffMax);
  }
}

std::vector<std::optional<tcp::socket>> accept_peers(tcp::acceptor& acceptor,
                                                     const SetupContext& ctx) {
  const auto rank = ctx.self.rank;
  const auto world_size = ctx.self.world_size;
  std::vector<std::optional<tcp::socket>> ins(world_size);
  RefusalLog log(rank);
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
      const std::optional<std::uint32_t> peer = accept_step(*it, ctx, ins, log, done);
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
