// A TCP proxy on 127.0.0.1 whose link can be cut: it forwards bytes both ways between each
// client it accepts and the target port until cut(), and from then on forwards nothing and
// closes nothing, as a network link that went down: the connections stay open and silent (no
// reset, no end of file), which a dead server never is. One thread; joined by the destructor.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace c10d::inline v1::testing {

class CuttableProxy {
 public:
  explicit CuttableProxy(std::uint16_t target) : target_(target) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr = loopback(0);
    socklen_t len = sizeof(addr);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        ::listen(listen_fd_, 16) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ::close(listen_fd_);
      throw std::runtime_error("cuttable proxy: cannot listen on 127.0.0.1");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~CuttableProxy() {
    stop_ = true;
    thread_.join();
    for (const Pair& p : pairs_) {
      ::close(p.fd[0]);
      ::close(p.fd[1]);
    }
    ::close(listen_fd_);
  }
  CuttableProxy(const CuttableProxy&) = delete;
  CuttableProxy& operator=(const CuttableProxy&) = delete;

  std::uint16_t port() const { return port_; }
  void cut() { cut_ = true; }

 private:
  static sockaddr_in loopback(std::uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
  }

  // Polls the listener and the open ends of every pair, 50 ms at a time so that stop_ is seen.
  void run() {
    std::vector<char> buffer(64 * 1024);
    while (!stop_) {
      std::vector<pollfd> fds{{listen_fd_, POLLIN, 0}};
      std::vector<std::pair<std::size_t, int>> ends;  // (pair, side) of fds[1...]
      for (std::size_t i = 0; i < pairs_.size() && !cut_; ++i) {
        for (int side : {0, 1}) {
          if (!pairs_[i].open[side]) continue;
          fds.push_back({pairs_[i].fd[side], POLLIN, 0});
          ends.emplace_back(i, side);
        }
      }
      if (::poll(fds.data(), fds.size(), 50) <= 0 || cut_) continue;
      if (fds[0].revents & POLLIN) accept_one();
      for (std::size_t k = 1; k < fds.size(); ++k) {
        if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
        auto [i, side] = ends[k - 1];
        Pair& p = pairs_[i];
        const int to = p.fd[1 - side];
        const ssize_t n = ::recv(p.fd[side], buffer.data(), buffer.size(), 0);
        if (n <= 0) {
          p.open[side] = false;
          ::shutdown(to, SHUT_WR);  // pass the end of file on
          continue;
        }
        for (ssize_t sent = 0; sent < n;) {
          const ssize_t m = ::send(to, buffer.data() + sent, n - sent, MSG_NOSIGNAL);
          if (m <= 0) break;
          sent += m;
        }
      }
    }
  }

  void accept_one() {
    const int client = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (client < 0) return;
    const int server = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr = loopback(target_);
    if (::connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      ::close(client);
      ::close(server);
      return;
    }
    pairs_.push_back({{client, server}, {true, true}});
  }

  std::uint16_t target_;
  std::uint16_t port_ = 0;
  int listen_fd_ = -1;
  struct Pair {
    int fd[2];     // the client's end, the server's end
    bool open[2];  // whether that end may still send
  };
  std::vector<Pair> pairs_;  // the proxy thread's alone
  std::atomic<bool> cut_{false};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace c10d::inline v1::testing
