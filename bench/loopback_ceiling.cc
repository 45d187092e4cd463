// c10d-loopback-bench: what loopback TCP itself moves on this host, with no library in the way:
// the ceiling that the TCP backend and Open MPI's TCP btl both sit under (docs/benchmarks.md).
// Two processes (fork), one TCP connection over 127.0.0.1, one thread each, running a
// poll(2) loop of nonblocking send/recv, as both libraries' progress loops do. Per iteration each
// process sends SIZE bytes to the other and receives SIZE from it at once (an exchange: the
// bytes of a 2-rank all_reduce's or all_to_all's step), or, with --one-way, the parent sends
// and the child receives (a 2-rank broadcast). A 1-byte round trip ends every iteration, so the
// next starts together.
//
// With --ranks N, N processes form a ring, each connected to the next: per iteration each sends
// 2(N-1)/N of SIZE to its right and receives as much from its left at once. Those are the bytes
// a ring all_reduce of SIZE moves per rank, and no bandwidth-optimal all_reduce moves fewer (for
// N = 2, SIZE each way, the least any all_reduce can move). When the processes outnumber the
// cores they wait in poll(2) instead of spinning, which would keep the cores from the processes
// with bytes to move. A 1-byte token around the ring ends every iteration.
//
//   c10d-loopback-bench [--sizes 8M,16M,32M] [--write 256K] [--buffer 0] [--iters 20]
//                       [--one-way | --ranks N]
//
// Prints, per size: the median time of an iteration and the bytes per second in each direction
// (per process, with --ranks).
// --buffer is what the program asks for SO_SNDBUF and SO_RCVBUF (the kernel caps it at
// net.core.{w,r}mem_max); 0, the default, leaves the kernel's autotuning on, as the TCP backend
// does. --ranks is 2 to 64. Values are checked whole (cli_args.h), and the sizes against the
// host's available memory before any process starts; a bad flag exits 1 naming it.
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

#include "cli_args.h"

namespace {

// The most processes --ranks forks: a ring past this measures the scheduler, not loopback.
constexpr int kMaxRanks = 64;

struct Options {
  std::vector<std::size_t> sizes = {8u << 20, 16u << 20, 32u << 20};
  std::size_t write = 256u << 10;
  std::size_t buffer = 0;
  int iters = 20;
  bool one_way = false;
  int ranks = 0;  // > 0: a ring of that many processes
};

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

// A system call failed: `what`, and errno's reason.
[[noreturn]] void fail_errno(const std::string& what) { fail(what + ": " + std::strerror(errno)); }

// A byte count (cli_args.h); throws naming `text` when it is not one.
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
      // SO_SNDBUF takes an int; a larger request must not be cut down silently.
      if (o.buffer > static_cast<std::size_t>(INT32_MAX)) {
        throw std::invalid_argument("--buffer " + std::to_string(o.buffer) +
                                    " is above the socket option's limit of 2147483647 bytes");
      }
    } else if (arg == "--iters") {
      const std::string v = value();
      const auto n = c10d::bench::parse_integer(v, 1, 1'000'000'000);
      if (!n)
        throw std::invalid_argument("--iters takes an integer from 1 to 1000000000, not '" + v +
                                    "'");
      o.iters = *n;
    } else if (arg == "--one-way") {
      o.one_way = true;
    } else if (arg == "--ranks") {
      const std::string v = value();
      const auto n = c10d::bench::parse_integer(v, 2, kMaxRanks);
      if (!n) {
        throw std::invalid_argument("--ranks takes an integer from 2 to " +
                                    std::to_string(kMaxRanks) + " (processes forked), not '" + v +
                                    "'");
      }
      o.ranks = *n;
    } else {
      throw std::invalid_argument(
          "unknown flag \"" + arg +
          "\" (flags: --sizes, --write, --buffer, --iters, --one-way, --ranks)");
    }
  }
  if (o.one_way && o.ranks > 0) {
    throw std::invalid_argument("--one-way and --ranks exclude each other");
  }
  if (o.write == 0) throw std::invalid_argument("--write must be positive");
  return o;
}

void size_buffers(int fd, std::size_t bytes) {
  if (bytes == 0) return;
  const int b = static_cast<int>(std::min<std::size_t>(bytes, INT32_MAX));
  ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &b, sizeof b);
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &b, sizeof b);
}

// Where a process's bytes go out and come in: one connection both ways, or two (a ring).
struct Link {
  int out;
  int in;
};

// Moves `to_send` bytes out and `to_recv` bytes in, whichever the sockets are ready for; polls
// without sleeping, as the libraries' progress loops do while bytes are due, unless `block`.
// Fails when nothing moves for 10 s.
void transfer(Link link, const std::byte* out, std::size_t to_send, std::byte* in,
              std::size_t to_recv, std::size_t write, bool block = false) {
  std::size_t sent = 0;
  std::size_t got = 0;
  const bool one = link.out == link.in;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (sent < to_send || got < to_recv) {
    const short want_out = sent < to_send ? POLLOUT : 0;
    const short want_in = got < to_recv ? POLLIN : 0;
    pollfd p[2] = {{link.out, static_cast<short>(want_out | (one ? want_in : 0)), 0},
                   {link.in, want_in, 0}};
    const int ready = ::poll(p, one ? 1 : 2, block ? 100 : 0);
    if (ready < 0 && errno != EINTR) fail_errno("poll");
    if (ready <= 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        fail("the peer moved nothing for 10 s");
      }
      continue;
    }
    deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    const short out_events = p[0].revents;
    const short in_events = one ? p[0].revents : p[1].revents;
    if (((out_events | in_events) & (POLLERR | POLLHUP)) != 0) {
      fail("the connection failed");
    }
    if (sent < to_send && (out_events & POLLOUT) != 0) {
      const ssize_t n = ::send(link.out, out + sent, std::min(write, to_send - sent),
                               MSG_DONTWAIT | MSG_NOSIGNAL);
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_errno("send");
      if (n > 0) sent += static_cast<std::size_t>(n);
    }
    if (got < to_recv && (in_events & POLLIN) != 0) {
      const ssize_t n = ::recv(link.in, in + got, to_recv - got, MSG_DONTWAIT);
      if (n == 0) {
        fail("the peer closed the connection");
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) fail_errno("recv");
      if (n > 0) got += static_cast<std::size_t>(n);
    }
  }
}

// A 1-byte token once around: `first` sends it and waits for it to come back; every other
// process passes it on. Over one connection, a round trip.
void pass_token(Link link, bool first, bool block) {
  std::byte token{0};
  if (first) {
    transfer(link, &token, 1, nullptr, 0, 1, block);
    transfer(link, nullptr, 0, &token, 1, 1, block);
  } else {
    transfer(link, nullptr, 0, &token, 1, 1, block);
    transfer(link, &token, 1, nullptr, 0, 1, block);
  }
}

// What each process of a ring of n moves each way for an all_reduce of `size` bytes.
std::size_t ring_bytes(std::size_t size, int n) {
  return size / static_cast<std::size_t>(n) * 2 * static_cast<std::size_t>(n - 1);
}

// What one process moves per iteration for a size.
struct Bytes {
  std::size_t out;
  std::size_t in;
};

// Process `me` of `n` (0 is the parent): each iteration's time in µs for every size.
std::vector<std::vector<double>> run_side(Link link, int me, int n, const Options& o) {
  const auto bytes_for = [&](std::size_t size) -> Bytes {
    if (o.ranks > 0) return {ring_bytes(size, n), ring_bytes(size, n)};
    if (o.one_way) return {me == 0 ? size : 0, me == 0 ? 0 : size};
    return {size, size};
  };
  std::size_t largest = 0;
  for (const std::size_t size : o.sizes) {
    largest = std::max({largest, bytes_for(size).out, bytes_for(size).in});
  }
  std::vector<std::byte> out(largest, std::byte{1});
  std::vector<std::byte> in(largest, std::byte{0});  // touched: no page faults in the timing
  const long cores = ::sysconf(_SC_NPROCESSORS_ONLN);
  const bool block = cores > 0 && n > cores;
  std::vector<std::vector<double>> times;
  for (const std::size_t size : o.sizes) {
    times.emplace_back();
    const Bytes b = bytes_for(size);
    for (int it = 0; it < o.iters + 1; ++it) {  // the first is a warm-up
      const auto start = std::chrono::steady_clock::now();
      transfer(link, out.data(), b.out, in.data(), b.in, o.write, block);
      pass_token(link, me == 0, block);
      const std::chrono::duration<double, std::micro> us = std::chrono::steady_clock::now() - start;
      if (it > 0) times.back().push_back(us.count());
    }
  }
  return times;
}

// A listening socket on 127.0.0.1, port 0; its address in `addr`.
int listen_loopback(sockaddr_in& addr, std::size_t buffer) {
  const int listener = ::socket(AF_INET, SOCK_STREAM, 0);
  if (listener < 0) fail_errno("socket");
  addr = {};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  size_buffers(listener, buffer);  // accepted sockets inherit the sizes
  if (::bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(listener, 1) != 0 ||
      ::getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    fail_errno("listening on 127.0.0.1");
  }
  return listener;
}

int connect_loopback(const sockaddr_in& addr, std::size_t buffer) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) fail_errno("socket");
  size_buffers(fd, buffer);  // before connect, so the window scale is negotiated for them
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    fail_errno("connect");
  }
  return fd;
}

void no_delay(int fd) {
  const int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    {
      // Each process holds an out and an in buffer of the largest size it moves, touched: check
      // the host has that memory before forking (a bad_alloc in a child says much less).
      const int n = o.ranks > 0 ? o.ranks : 2;
      const std::size_t largest = *std::max_element(o.sizes.begin(), o.sizes.end());
      const std::size_t each_way = o.ranks > 0 ? ring_bytes(largest, n) : largest;
      const std::string why =
          c10d::bench::memory_fault("--sizes " + std::to_string(largest), 2 * each_way, n);
      if (!why.empty()) throw std::invalid_argument(why);
    }
    // n processes: a pair over one connection, or a ring where process i listens on
    // listeners[i] for its left neighbour and connects to listeners[i + 1].
    const int n = o.ranks > 0 ? o.ranks : 2;
    std::vector<sockaddr_in> addrs(static_cast<std::size_t>(o.ranks > 0 ? n : 1));
    std::vector<int> listeners;
    for (auto& addr : addrs) listeners.push_back(listen_loopback(addr, o.buffer));
    std::vector<pid_t> children;
    int me = 0;
    for (int i = 1; i < n && me == 0; ++i) {
      const pid_t child = ::fork();
      if (child < 0) fail_errno("fork");
      if (child == 0) {
        me = i;
      } else {
        children.push_back(child);
      }
    }
    Link link{-1, -1};
    if (o.ranks == 0) {
      const int fd =
          me == 0 ? ::accept(listeners[0], nullptr, nullptr) : connect_loopback(addrs[0], o.buffer);
      if (fd < 0) fail_errno("accept");
      link = {fd, fd};
    } else {
      link.out = connect_loopback(addrs[static_cast<std::size_t>((me + 1) % n)], o.buffer);
      link.in = ::accept(listeners[static_cast<std::size_t>(me)], nullptr, nullptr);
      if (link.in < 0) fail_errno("accept");
    }
    for (const int l : listeners) ::close(l);
    no_delay(link.out);
    no_delay(link.in);

    const auto times = run_side(link, me, n, o);
    if (me != 0) return 0;
    for (const pid_t child : children) {
      int status = 0;
      if (::waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fail("a child process failed");
      }
    }
    const std::string buffers = o.buffer == 0 ? "autotuned" : std::to_string(o.buffer);
    if (o.ranks > 0) {
      std::printf(
          "# loopback TCP, a ring of %d processes, each moving 2(n-1)/n of the size to its right "
          "and as much from its left at once, writes of %zu bytes, buffers %s, %d iterations\n",
          n, o.write, buffers.c_str(), o.iters);
      std::printf("# %12s %16s %14s %24s\n", "size (B)", "bytes each way", "time (us)",
                  "GB/s per process each way");
    } else {
      std::printf("# loopback TCP, %s, writes of %zu bytes, buffers %s, %d iterations\n",
                  o.one_way ? "one way" : "both ways at once", o.write, buffers.c_str(), o.iters);
      std::printf("# %12s %14s %20s\n", "size (B)", "time (us)", "GB/s per direction");
    }
    for (std::size_t i = 0; i < o.sizes.size(); ++i) {
      std::vector<double> t = times[i];
      std::sort(t.begin(), t.end());
      const double median = t[t.size() / 2];
      if (o.ranks > 0) {
        const std::size_t each = ring_bytes(o.sizes[i], n);
        std::printf("  %12zu %16zu %14.1f %24.2f\n", o.sizes[i], each, median,
                    static_cast<double>(each) / median / 1e3);
      } else {
        std::printf("  %12zu %14.1f %20.2f\n", o.sizes[i], median,
                    static_cast<double>(o.sizes[i]) / median / 1e3);
      }
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d-loopback-bench: %s\n", e.what());
    return 1;
  }
}
