// c10d-loopback-bench: what loopback TCP itself moves on this host, with no library in the way:
// the ceiling that the TCP backend and Open MPI's TCP btl both sit under (docs/benchmarks.md,
// issue 3). Two processes (fork), one TCP connection over 127.0.0.1, one thread each, running a
// poll(2) loop of nonblocking send/recv, as both libraries' progress loops do. Per iteration each
// process sends SIZE bytes to the other and receives SIZE from it at once (an exchange: the
// bytes of a 2-rank all_reduce's or all_to_all's step), or, with --one-way, the parent sends
// and the child receives (a 2-rank broadcast). A 1-byte round trip ends every iteration, so the
// next starts together.
//
//   c10d-loopback-bench [--sizes 8M,16M,32M] [--write 256K] [--buffer 0] [--iters 20]
//                       [--one-way]
//
// Prints, per size: the median time of an iteration and the bytes per second in each direction.
// --buffer is what the program asks for SO_SNDBUF and SO_RCVBUF (the kernel caps it at
// net.core.{w,r}mem_max); 0, the default, leaves the kernel's autotuning on, as the TCP backend
// does.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "parse_size.h"

namespace {

struct Options {
  std::vector<std::size_t> sizes = {8u << 20, 16u << 20, 32u << 20};
  std::size_t write = 256u << 10;
  std::size_t buffer = 0;
  int iters = 20;
  bool one_way = false;
};

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

// A system call failed: `what`, and errno's reason.
[[noreturn]] void fail_errno(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

// A byte count (parse_size.h); throws naming `text` when it is not one.
std::size_t parse_bytes(const std::string& text) {
  const auto bytes = c10d::bench::parse_size(text);
  if (!bytes) {
    throw std::invalid_argument("not a size: \"" + text + "\" (examples: 4096, 256K, 1.5M, 1G)");
  }
  return *bytes;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw std::invalid_argument(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--sizes") {
      o.sizes.clear();
      std::string list = value();
      for (std::size_t at = 0; at <= list.size();) {
        const std::size_t comma = std::min(list.find(',', at), list.size());
        o.sizes.push_back(parse_bytes(list.substr(at, comma - at)));
        at = comma + 1;
      }
    } else if (arg == "--write") {
      o.write = parse_bytes(value());
    } else if (arg == "--buffer") {
      o.buffer = parse_bytes(value());
    } else if (arg == "--iters") {
      o.iters = std::stoi(value());
    } else if (arg == "--one-way") {
      o.one_way = true;
    } else {
      throw std::invalid_argument("unknown flag \"" + arg +
                                  "\" (flags: --sizes, --write, --buffer, --iters, --one-way)");
    }
  }
  if (o.write == 0) throw std::invalid_argument("--write must be positive");
  if (o.iters < 1) throw std::invalid_argument("--iters must be at least 1");
  return o;
}

void size_buffers(int fd, std::size_t bytes) {
  if (bytes == 0) return;
  const int b = static_cast<int>(std::min<std::size_t>(bytes, INT32_MAX));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
}

// Moves `to_send` bytes out and `to_recv` bytes in, whichever the socket is ready for; fails
// when nothing moves for 10 s.
void transfer(int fd, const std::byte* out, std::size_t to_send, std::byte* in, std::size_t to_recv,
              std::size_t write) {
  std::size_t sent = 0;
  std::size_t got = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sent < to_send || got < to_recv) {
    pollfd p{fd, static_cast<short>((sent < to_send ? POLLOUT : 0) | (got < to_recv ? POLLIN : 0)),
             0};
    // Polls without sleeping, as the libraries' progress loops do while bytes are due.
    const int ready = ::poll(&p, 1, 0);
    if (ready < 0 && errno != EINTR) fail_errno("poll");
    if (ready <= 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        fail("the peer moved nothing for 10 s");
      }
      continue;
    }
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    if ((p.revents & (POLLERR | POLLHUP)) != 0) {
      fail("the connection failed");
    }
    if (sent < to_send && (p.revents & POLLOUT) != 0) {
      const ssize_t n =
          ::send(fd, out + sent, std::min(write, to_send - sent), MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_errno("send");
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    if (got < to_recv && (p.revents & POLLIN) != 0) {
      const ssize_t n = ::recv(fd, in + got, to_recv - got, MSG_DONTWAIT);
      if (n == 0) {
        fail("the peer closed the connection");
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_errno("recv");
      if (n > 0) got += static_cast<std::size_t>(n);
    }
  }
}

// One process's side. Returns each iteration's time in µs for every size.
std::vector<std::vector<double>> run_side(int fd, bool parent, const Options& o) {
  const std::size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
  std::vector<std::byte> out(largest, std::byte{1});
  std::vector<std::byte> in(largest, std::byte{0});  // touched: no page faults in the timing
  std::vector<std::vector<double>> times;
  for (const std::size_t size : o.sizes) {
    times.emplace_back();
    const bool sends = !o.one_way || parent;
    const bool receives = !o.one_way || !parent;
    for (int it = 0; it < o.iters + 1; ++it) {  // the first is a warm-up
      const auto start = std::chrono::steady_clock::now();
      transfer(fd, out.data(), sends ? size : 0, in.data(), receives ? size : 0, o.write);
      std::byte token{0};
      if (parent) {
        transfer(fd, &token, 1, nullptr, 0, 1);
        transfer(fd, nullptr, 0, &token, 1, 1);
      } else {
        transfer(fd, nullptr, 0, &token, 1, 1);
        transfer(fd, &token, 1, nullptr, 0, 1);
      }
      const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - start;
      if (it > 0) times.back().push_back(us.count());
    }
  }
  return times;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
    if (listener < 0) fail_errno("socket");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    size_buffers(listener, o.buffer);  // accepted sockets inherit the sizes
    if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listener, 1) != 0 ||
        ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      fail_errno("listening on 127.0.0.1");
    }
    const pid_t child = ::fork();
    if (child < 0) fail_errno("fork");
    const bool parent = child != 0;
    int fd = -1;
    if (parent) {
      fd = ::accept(listener, nullptr, nullptr);
    } else {
      fd = ::socket(AF_INET, SOCK_STREAM, 0);
      size_buffers(fd, o.buffer);  // before connect, so the window scale is negotiated for them
      if (fd >= 0 && ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) fd = -1;
    }
    if (fd < 0) fail_errno(parent ? "accept" : "connect");
    ::close(listener);
    const int one = 1;
    ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);

    const auto times = run_side(fd, parent, o);
    if (!parent) return 0;
    int status = 0;
    if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fail("the child process failed");
    }
    std::printf("# loopback TCP, %s, writes of %zu bytes, buffers %s, %d iterations\n",
                o.one_way ? "one way" : "both ways at once", o.write,
                o.buffer == 0 ? "autotuned" : std::to_string(o.buffer).c_str(), o.iters);
    std::printf("# %12s %14s %20s\n", "size (B)", "time (us)", "GB/s per direction");
    for (std::size_t i = 0; i < o.sizes.size(); ++i) {
      std::vector<double> t = times[i];
      std::sort(t.begin(), t.end());
      const double median = t[t.size() / 2];
      std::printf("  %12zu %14.1f %20.2f\n", o.sizes[i], median,
                  static_cast<double>(o.sizes[i]) / median / 1e3);
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d-loopback-bench: %s\n", e.what());
    return 1;
  }
}
