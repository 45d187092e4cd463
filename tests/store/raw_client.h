// A raw TCP client for tests that must speak (or garble) the store protocol by hand: connect,
// send arbitrary bytes, read one answer frame, with deadlines so a test can never hang.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "store/wire.h"

namespace c10d::inline v1::testing {

class RawClient {
 public:
  // `receive_buffer` > 0 shrinks the socket's receive buffer (set before connecting, so the
  // window is small too): a client that does not read then holds the server's answer in the
  // server, not in the kernel.
  explicit RawClient(std::uint16_t port, int receive_buffer = 0) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (receive_buffer > 0) {
      ::setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      throw std::runtime_error("raw client: connect failed");
    }
  }
  ~RawClient() {
    if (fd_ >= 0) ::close(fd_);
  }
  RawClient(const RawClient&) = delete;
  RawClient& operator=(const RawClient&) = delete;

  // Best effort: a server that already closed may refuse part of it.
  void send(const std::vector<std::uint8_t>& bytes) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
      ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<std::size_t>(n);
    }
  }

  // Reads exactly n bytes; nullopt on EOF, error or deadline.
  std::optional<std::vector<std::uint8_t>> read(std::size_t n, std::chrono::milliseconds timeout) {
    std::vector<std::uint8_t> out(n);
    std::size_t got = 0;
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (got < n) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      ssize_t r = ::recv(fd_, out.data() + got, n - got, 0);
      if (r <= 0) return std::nullopt;
      got += static_cast<std::size_t>(r);
    }
    return out;
  }

  struct Answer {
    store::wire::Header header;
    store::wire::Status status;
    std::vector<std::uint8_t> body;  // after the status byte
    std::string message() const {    // for error answers
      if (body.size() < 4) return {};
      return std::string(body.begin() + 4, body.end());
    }
  };

  std::optional<Answer> read_answer(std::chrono::milliseconds timeout) {
    auto head = read(store::wire::kHeaderBytes, timeout);
    if (!head) return std::nullopt;
    Answer a;
    StoreLimits limits;
    if (!store::wire::decode_header(*head, true, limits, a.header).ok()) return std::nullopt;
    auto body = read(static_cast<std::size_t>(a.header.body_bytes), timeout);
    if (!body || body->empty()) return std::nullopt;
    a.status = static_cast<store::wire::Status>((*body)[0]);
    a.body.assign(body->begin() + 1, body->end());
    return a;
  }

  // True when the server closed the connection (EOF) within the timeout.
  bool closed_by_server(std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::uint8_t sink[4096];
    while (std::chrono::steady_clock::now() < deadline) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 50) < 0) return false;
      if (p.revents == 0) continue;
      ssize_t r = ::recv(fd_, sink, sizeof(sink), 0);
      if (r <= 0) return true;
    }
    return false;
  }

  // True when the server has already closed the connection (checked without waiting); unread
  // answers are discarded.
  bool closed_now() {
    std::uint8_t sink[4096];
    for (;;) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 0) <= 0 || p.revents == 0) return false;
      if (::recv(fd_, sink, sizeof(sink), MSG_DONTWAIT) <= 0) return true;
    }
  }

  static std::vector<std::uint8_t> hello(std::uint16_t version = store::wire::kVersion) {
    std::vector<std::uint8_t> out;
    std::size_t start =
        store::wire::begin_frame(out, static_cast<std::uint8_t>(store::wire::Kind::kHello));
    store::wire::put_u16(out, version);
    store::wire::end_frame(out, start);
    out[start + 4] = static_cast<std::uint8_t>(version);
    out[start + 5] = static_cast<std::uint8_t>(version >> 8);
    return out;
  }

 private:
  int fd_ = -1;
};

}  // namespace c10d::inline v1::testing
