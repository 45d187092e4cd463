// A stand-in for one rank of a TCP transport group, made of plain sockets, for tests that send a
// real rank frames no TCPTransport would (tcp_wire.h draws them). It is a member of the job (it
// knows the job's key), not a stranger (stranger.h): what it tests is the read side after the
// handshake. connect_as_rank() is the only code here that knows the handshake: when the
// handshake changes, it is the one function to adapt.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <span>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "backends/gloo_like/tcp_handshake.h"
#include "backends/gloo_like/tcp_wire.h"
#include "c10d/store.h"
#include "transport/transport.h"

namespace c10d::inline v1::gloo_like::testing {

using transport::Clock;

// The two connections a rank keeps with one peer, seen from the raw side.
class RawPeer {
 public:
  RawPeer() = default;
  RawPeer(int out, int in) : out_(out), in_(in) {}
  RawPeer(RawPeer&& o) noexcept : out_(std::exchange(o.out_, -1)), in_(std::exchange(o.in_, -1)) {}
  RawPeer& operator=(RawPeer&& o) noexcept {
    close();
    out_ = std::exchange(o.out_, -1);
    in_ = std::exchange(o.in_, -1);
    return *this;
  }
  ~RawPeer() { close(); }

  // Writes all of `bytes` on the connection the real rank reads (the one this peer made),
  // waiting for room until `deadline`; false once the real rank has closed it (or at the
  // deadline).
  bool send(std::span<const std::byte> bytes, Clock::time_point deadline) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n =
          ::send(out_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
      if (n > 0) {
        done += static_cast<std::size_t>(n);
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return false;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{out_, POLLOUT, 0};
      ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100)));
    }
    return true;
  }
  // A message frame: header and payload.
  bool send_frame(std::uint64_t tag, std::span<const std::byte> payload,
                  Clock::time_point deadline) {
    const auto header = encode_frame_header(tag, payload.size());
    return send(header, deadline) && send(payload, deadline);
  }
  int out() const { return out_; }
  void set_in(int fd) { in_ = fd; }
  void close() {
    close_in();
    if (out_ >= 0) ::close(out_);
    out_ = -1;
  }
  // Closes only the connection the real rank writes on (with bytes unread there, the kernel
  // resets it): the rank's writes fail while its read side hears nothing.
  void close_in() {
    if (in_ >= 0) ::close(in_);
    in_ = -1;
  }

 private:
  int out_ = -1;  // made by this peer; the real rank reads it
  int in_ = -1;   // made by the real rank; it writes there
};

namespace raw_detail {

inline void fail(const std::string& what) { throw std::runtime_error("connect_as_rank: " + what); }

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

inline bool wait_for(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<long long>(left, 100))) > 0) return true;
  }
}

inline void write_all(int fd, const std::vector<std::byte>& bytes, Clock::time_point deadline) {
  std::size_t done = 0;
  while (done < bytes.size()) {
    if (!wait_for(fd, POLLOUT, deadline)) fail("timed out writing");
    const ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n <= 0) fail("write failed");
    done += static_cast<std::size_t>(n);
  }
}

// One handshake frame from `fd`, read as far as `decode` asks and no further (the frames after
// it stay in the socket); fails unless it decodes.
template <typename Decode>
void read_frame(int fd, Decode&& decode, Clock::time_point deadline, const char* what) {
  std::vector<std::byte> bytes;
  for (;;) {
    const HandshakeDecode d = decode(std::span<const std::byte>(bytes));
    if (d.ok()) return;
    if (d.code != HandshakeCode::kShort) fail(std::string(what) + ": " + describe(d));
    const std::size_t had = bytes.size();
    bytes.resize(d.bytes);
    if (!wait_for(fd, POLLIN, deadline)) fail(std::string("timed out reading the ") + what);
    const ssize_t k = ::recv(fd, bytes.data() + had, d.bytes - had, 0);
    if (k <= 0) fail(std::string("the real rank closed the connection before its ") + what);
    bytes.resize(had + static_cast<std::size_t>(k));
  }
}

}  // namespace raw_detail

// Plays rank `rank` of the group `group` of `world` ranks against the real ranks `reals`, every
// one of them lower than `rank` (the other ranks of the world, if any, never come): publishes a
// listening address in `store` as a rank does, connects to each real rank and accepts its
// connection, each with the handshake TCPTransport's set-up runs (tcp_wire.h, version 5),
// proving itself with the job's key as a rank of the job would (tcp_handshake.h:
// transport_key). The real ranks' set-ups run meanwhile on other threads. Returns one RawPeer
// per real rank, in the order of `reals`. Throws std::runtime_error at `deadline` or on a
// refusal.
inline std::vector<RawPeer> connect_as_rank(Store& store, const std::string& group, int rank,
                                            int world, const std::vector<int>& reals,
                                            Clock::time_point deadline) {
  using namespace raw_detail;
  const TransportKey key = transport_key(store, "", rank);
  const Identity me{static_cast<std::uint32_t>(world), static_cast<std::uint32_t>(rank), group};

  Fd listener{::socket(AF_INET, SOCK_STREAM, 0)};
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof at;
  if (listener.fd < 0 || ::bind(listener.fd, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 ||
      ::listen(listener.fd, 4) != 0 ||
      ::getsockname(listener.fd, reinterpret_cast<sockaddr*>(&at), &len) != 0) {
    fail("cannot listen");
  }
  store.set(group + "/addr/" + std::to_string(rank),
            "127.0.0.1:" + std::to_string(ntohs(at.sin_port)));

  // The connections this peer writes on: each real rank accepts one and reads there. A real rank
  // accepts once it has connected to the ranks below it, so they are reached in rank order.
  std::vector<RawPeer> peers;
  for (const int real : reals) {
    if (real >= rank) fail("a real rank is not below the raw one");
    const std::string addr_key = group + "/addr/" + std::to_string(real);
    store.wait(std::span<const std::string>(&addr_key, 1), std::chrono::milliseconds(20000));
    const std::string addr = store.get_string(addr_key);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(static_cast<std::uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1))));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    RawPeer peer(::socket(AF_INET, SOCK_STREAM, 0), -1);
    const int out = peer.out();
    if (out < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&to), sizeof to) != 0) {
      fail("cannot connect to " + addr);
    }
    const int one = 1;
    ::setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    Nonces sent;  // this peer connects: its nonce is the connector's
    sent.connector = new_nonce();
    write_all(out, encode_greeting(sent.connector), deadline);
    read_frame(
        out, [&](std::span<const std::byte> in) { return decode_greeting(in, sent.acceptor); },
        deadline, "challenge");
    write_all(out, encode_proof({me, static_cast<std::uint32_t>(real)}, key, sent), deadline);
    Accept accept;
    read_frame(
        out, [&](std::span<const std::byte> in) { return decode_accept(in, key, sent, accept); },
        deadline, "accept");
    if (accept.status != AcceptStatus::kAccepted) fail("the real rank refused this peer");
    peers.push_back(std::move(peer));
  }

  // The connections the real ranks make here once they have accepted every peer, in any order.
  for (std::size_t n = 0; n < reals.size(); ++n) {
    if (!wait_for(listener.fd, POLLIN, deadline)) fail("a real rank never connected");
    Fd in{::accept(listener.fd, nullptr, nullptr)};
    if (in.fd < 0) fail("accept failed");
    Nonces got;  // the real rank connects here
    read_frame(
        in.fd,
        [&](std::span<const std::byte> bytes) { return decode_greeting(bytes, got.connector); },
        deadline, "hello");
    got.acceptor = new_nonce();
    write_all(in.fd, encode_greeting(got.acceptor), deadline);
    Proof proof;
    read_frame(
        in.fd,
        [&](std::span<const std::byte> bytes) { return decode_proof(bytes, key, got, proof); },
        deadline, "proof");
    std::size_t which = reals.size();
    for (std::size_t i = 0; i < reals.size(); ++i) {
      if (proof.connector.rank == static_cast<std::uint32_t>(reals[i])) which = i;
    }
    if (judge_proof(me, proof) != AcceptStatus::kAccepted || which == reals.size()) {
      fail("the connection is not from a real rank");
    }
    write_all(in.fd, encode_accept({me, AcceptStatus::kAccepted}, key, got), deadline);
    peers[which].set_in(std::exchange(in.fd, -1));
  }
  return peers;
}

// The two-rank case: rank `rank` of a world of two, against the real rank `real`.
inline RawPeer connect_as_rank(Store& store, const std::string& group, int rank, int world,
                               int real, Clock::time_point deadline) {
  return std::move(connect_as_rank(store, group, rank, world, std::vector<int>{real}, deadline)[0]);
}

}  // namespace c10d::inline v1::gloo_like::testing
