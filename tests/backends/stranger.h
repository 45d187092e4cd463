// A stranger to a job, for the handshake tests: a raw TCP client or listener of the test's own,
// on 127.0.0.1 only, that speaks the transport's handshake (tcp_wire.h) and knows everything
// about the job (group name, world size, ranks) except its secret. Every read has a deadline;
// writes never raise SIGPIPE. Not thread-safe: one thread drives a socket.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "backends/gloo_like/tcp_wire.h"
#include "c10d/store.h"

namespace c10d::inline v1::gloo_like::testing {

// The port in "host:port".
inline std::uint16_t port_of(const std::string& addr) {
  return static_cast<std::uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
}

inline sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_port = htons(port);
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return sa;
}

// One connection, closed on destruction.
class StrangerSocket {
 public:
  explicit StrangerSocket(int fd = -1) : fd_(fd) {}
  StrangerSocket(StrangerSocket&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  StrangerSocket& operator=(StrangerSocket&& other) noexcept {
    std::swap(fd_, other.fd_);
    return *this;
  }
  ~StrangerSocket() { close(); }

  // A connection to 127.0.0.1:port; !connected() when refused (errno tells why).
  static StrangerSocket connect_to(std::uint16_t port) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    const sockaddr_in at = loopback(port);
    if (fd >= 0 && ::connect(fd, reinterpret_cast<const sockaddr*>(&at), sizeof at) != 0) {
      const int err = errno;
      ::close(fd);
      errno = err;
      return StrangerSocket(-1);
    }
    return StrangerSocket(fd);
  }

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  // Sends all of `bytes`; false when the peer is gone.
  bool send(std::span<const std::byte> bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::send(fd_, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
      if (n <= 0) return false;
      done += static_cast<std::size_t>(n);
    }
    return true;
  }

  // Up to `n` bytes: fewer when the peer closes (closed() then true) or the time runs out.
  std::vector<std::byte> read_n(std::size_t n,
                                std::chrono::milliseconds within = std::chrono::seconds(10)) {
    std::vector<std::byte> got;
    const auto deadline = std::chrono::steady_clock::now() + within;
    while (got.size() < n) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                            deadline - std::chrono::steady_clock::now())
                            .count();
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left)) <= 0) continue;
      std::byte buf[4096];
      const ssize_t r = ::recv(fd_, buf, std::min(sizeof buf, n - got.size()), 0);
      if (r <= 0) {
        closed_ = true;
        break;
      }
      got.insert(got.end(), buf, buf + r);
    }
    return got;
  }

  // Everything the peer sends until it closes (or the time runs out: closed() false).
  std::vector<std::byte> read_to_end(std::chrono::milliseconds within = std::chrono::seconds(10)) {
    return read_n(SIZE_MAX, within);
  }
  bool closed() const { return closed_; }

 private:
  int fd_;
  bool closed_ = false;
};

// A listener on 127.0.0.1 (an ephemeral port) that plays a rank at an address it planted.
class StrangerListener {
 public:
  StrangerListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in at = loopback(0);
    ::bind(fd_, reinterpret_cast<sockaddr*>(&at), sizeof at);
    ::listen(fd_, 16);
    socklen_t len = sizeof at;
    ::getsockname(fd_, reinterpret_cast<sockaddr*>(&at), &len);
    port_ = ntohs(at.sin_port);
  }
  ~StrangerListener() { ::close(fd_); }
  StrangerListener(const StrangerListener&) = delete;
  StrangerListener& operator=(const StrangerListener&) = delete;

  std::uint16_t port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // The next connection, or an unconnected socket after `within`.
  StrangerSocket accept(std::chrono::milliseconds within = std::chrono::seconds(10)) {
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(within.count())) <= 0) return StrangerSocket(-1);
    return StrangerSocket(::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC));
  }

 private:
  int fd_ = -1;
  std::uint16_t port_ = 0;
};

// A key no rank of any job has.
inline TransportKey stranger_key() { return derive_transport_key(core::random_hex(32)); }

// What a stranger that knows all but the secret sends to claim `rank` of `group` at the rank
// it connected to (`expected`): a correct Hello, then a Proof signed with its own key. Returns
// what the rank sent back after the Challenge (nothing, if it refused the stranger).
struct ClaimResult {
  std::vector<std::byte> challenge;  // the rank's answer to the Hello
  std::vector<std::byte> after_proof;
  bool closed = false;  // the rank closed the connection after the Proof
};
inline ClaimResult claim_rank(StrangerSocket& s, const Identity& claimed, std::uint32_t expected) {
  ClaimResult result;
  Nonces nonces;
  nonces.connector = new_nonce();
  s.send(encode_greeting(nonces.connector));
  result.challenge = s.read_n(kGreetingBytes);
  if (result.challenge.size() != kGreetingBytes) return result;
  decode_greeting(result.challenge, nonces.acceptor);
  s.send(encode_proof({claimed, expected}, stranger_key(), nonces));
  result.after_proof = s.read_to_end();
  result.closed = s.closed();
  return result;
}

}  // namespace c10d::inline v1::gloo_like::testing
