// c10d-store-bench: throughput and scale of the TCP store server.
//
//   c10d-store-bench throughput [--clients 1,8,32] [--ops 20000] [--runs 5]
//                               [--transports local,tcp]
//     One server; K client processes (fork+exec of this binary), each doing `ops` rounds of
//     set then get of its own 64-byte value. Prints total operations per second (a set and a
//     get count as two), the median of `runs`, for each transport: "local" lets clients switch
//     to the server's Unix socket (the default), "tcp" keeps them on TCP loopback.
//   c10d-store-bench scale [--connections 1024,4096] [--procs 4] [--runs 5]
//     A store barrier: C connections, opened from `procs` processes before the clock starts,
//     each ADDs to one counter; the connection that brings it to C sets "done"; every
//     connection WAITs for "done". Prints the time until all C are through (median of runs),
//     and the time it took to open and greet the connections.
//
// The server runs in this process on 127.0.0.1, port 0. Workers are separate processes talking
// over loopback, as ranks would. Results are checked: every get must return the value set.
#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "cli_args.h"
#include "store/tcp_store_server.h"
#include "store/wire.h"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using c10d::Bytes;
namespace wire = c10d::store::wire;

// The most worker processes either mode forks (--clients, --procs): a bound on a typo's cost.
constexpr int kMaxProcesses = 512;

// A bad flag: the message names it; exit status 2.
struct UsageError : std::invalid_argument {
  using std::invalid_argument::invalid_argument;
};

int integer_flag(const std::string& flag, std::string_view text, int min, int max) {
  const auto n = c10d::bench::parse_integer(text, min, max);
  if (!n) {
    throw UsageError(
        fmt::format("{} takes an integer from {} to {}, not '{}'", flag, min, max, text));
  }
  return *n;
}

// A comma-separated list of integers in [min, max], each checked whole.
std::vector<int> parse_list(const std::string& flag, std::string_view text, int min, int max) {
  std::vector<int> out;
  for (std::size_t at = 0; at <= text.size();) {
    const std::size_t comma = std::min(text.find(',', at), text.size());
    out.push_back(integer_flag(flag, text.substr(at, comma - at), min, max));
    at = comma + 1;
  }
  return out;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

c10d::TCPStoreOptions client_options(int port) {
  c10d::TCPStoreOptions o;
  o.host = "127.0.0.1";
  o.port = static_cast<std::uint16_t>(port);
  o.timeout = 60s;
  return o;
}

// Arrive at a store barrier named `name` of `n` parties; the last one sets "<name>/go".
void arrive(c10d::Store& store, const std::string& name, int n) {
  if (store.add(name, 1) == n) store.set(name + "/go", std::string_view("1"));
}

// ---- throughput ----

int throughput_worker(int port, int id, int ops) {
  auto options = client_options(port);
  options.use_local_socket = std::getenv("BENCH_TCP_ONLY") == nullptr;
  c10d::TCPStore store(options);
  std::string value(64, static_cast<char>('a' + id % 26));
  std::memcpy(value.data(), &id, sizeof(id));
  const std::string key = "tp/" + std::to_string(id);
  arrive(store, "tp/ready", std::atoi(std::getenv("BENCH_CLIENTS")));
  store.wait(std::vector<std::string>{"tp/ready/go"});
  int wrong = 0;
  for (int i = 0; i < ops; ++i) {
    value[8] = static_cast<char>(i);
    store.set(key, value);
    if (store.get_string(key) != value) ++wrong;
  }
  arrive(store, "tp/done", std::atoi(std::getenv("BENCH_CLIENTS")));
  return wrong == 0 ? 0 : 3;
}

// Starts this binary once per argv, with `env` added to the environment. Everything the child
// needs is built before fork: the server thread is running, and between fork and exec only
// async-signal-safe calls are allowed (no setenv, no malloc).
std::vector<pid_t> spawn(const std::vector<std::vector<std::string>>& argvs,
                         const std::vector<std::pair<std::string, std::string>>& env) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  std::vector<pid_t> pids;
  for (const auto& args : argvs) {
    std::vector<std::string> owned(args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : owned) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execve("/proc/self/exe", argv.data(), envp.data());
      std::_Exit(127);
    }
    pids.push_back(pid);
  }
  return pids;
}

bool reap(const std::vector<pid_t>& pids) {
  bool ok = true;
  for (pid_t p : pids) {
    int status = 0;
    ::waitpid(p, &status, 0);
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

int run_throughput(const std::vector<int>& clients, int ops, int runs,
                   const std::vector<std::string>& transports) {
  std::printf("# c10d-store-bench throughput: set+get of 64-byte values, %d rounds per client\n",
              ops);
  std::printf("# %9s %8s %10s %12s %14s %8s\n", "transport", "clients", "ops", "time(s)", "ops/s",
              "#wrong");
  for (const std::string& transport : transports) {
    for (int k : clients) {
      std::vector<double> rates;
      double seconds = 0;
      bool all_ok = true;
      for (int r = 0; r < runs; ++r) {
        c10d::TCPStoreServer server(c10d::store::ServerOptions{});
        c10d::TCPStore store(client_options(server.port()));
        std::vector<std::vector<std::string>> argvs;
        for (int i = 0; i < k; ++i) {
          argvs.push_back({"c10d-store-bench", "tp-worker", std::to_string(server.port()),
                           std::to_string(i), std::to_string(ops)});
        }
        std::vector<std::pair<std::string, std::string>> env = {
            {"BENCH_CLIENTS", std::to_string(k)}};
        if (transport == "tcp") env.emplace_back("BENCH_TCP_ONLY", "1");
        auto pids = spawn(argvs, env);
        store.wait(std::vector<std::string>{"tp/ready/go"});
        const auto start = Clock::now();
        store.wait(std::vector<std::string>{"tp/done/go"});
        seconds = std::chrono::duration<double>(Clock::now() - start).count();
        all_ok = reap(pids) && all_ok;
        rates.push_back(2.0 * k * ops / seconds);
      }
      std::printf("  %9s %8d %10lld %12.3f %14.0f %8d\n", transport.c_str(), k, 2LL * k * ops,
                  seconds, median(rates), all_ok ? 0 : 1);
      if (!all_ok) return 1;
    }
  }
  return 0;
}

// ---- scale: a store barrier over many connections, driven with epoll ----

int connect_raw(int port) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    std::perror("connect");
    std::exit(4);
  }
  int one = 1;
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

void send_all(int fd, const Bytes& b) {
  std::size_t sent = 0;
  while (sent < b.size()) {
    ssize_t n = ::send(fd, b.data() + sent, b.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
    } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
      std::perror("send");
      std::exit(4);
    }
  }
}

// Reads one answer frame (blocking socket); returns the body after the status byte.
Bytes read_answer(int fd) {
  Bytes buf(wire::kHeaderBytes);
  auto read_n = [&](std::uint8_t* p, std::size_t n) {
    while (n > 0) {
      ssize_t r = ::recv(fd, p, n, 0);
      if (r <= 0) {
        std::fprintf(stderr, "scale worker: server closed a connection\n");
        std::exit(4);
      }
      p += r;
      n -= static_cast<std::size_t>(r);
    }
  };
  read_n(buf.data(), buf.size());
  const std::uint64_t body = wire::get_u64(buf.data() + 8);
  Bytes b(body);
  read_n(b.data(), b.size());
  if (b.empty() || b[0] != 0) {
    std::fprintf(stderr, "scale worker: error answer\n");
    std::exit(4);
  }
  return Bytes(b.begin() + 1, b.end());
}

Bytes request(wire::Kind kind, const std::function<void(Bytes&)>& body) {
  Bytes f;
  auto start = wire::begin_frame(f, static_cast<std::uint8_t>(kind));
  body(f);
  wire::end_frame(f, start);
  return f;
}

int scale_worker(int port, int connections, int total) {
  c10d::TCPStore control(client_options(port));
  std::vector<int> fds;
  const Bytes hello =
      request(wire::Kind::kHello, [](Bytes& f) { wire::put_u16(f, wire::kVersion); });
  for (int i = 0; i < connections; ++i) {
    fds.push_back(connect_raw(port));
    send_all(fds.back(), hello);
  }
  for (int fd : fds) read_answer(fd);
  arrive(control, "scale/ready", std::atoi(std::getenv("BENCH_PROCS")));
  control.wait(std::vector<std::string>{"scale/ready/go"});

  // The barrier: ADD on every connection, then SET (by the last arriver) and WAIT.
  const Bytes add = request(wire::Kind::kAdd, [](Bytes& f) {
    wire::put_string(f, "scale/counter");
    wire::put_u64(f, 1);
  });
  const Bytes set_done = request(wire::Kind::kSet, [](Bytes& f) {
    wire::put_string(f, "scale/done");
    wire::put_string(f, "1");
  });
  const Bytes wait_done = request(wire::Kind::kWait, [](Bytes& f) {
    wire::put_u64(f, 60000);
    wire::put_u32(f, 1);
    wire::put_string(f, "scale/done");
  });
  for (int fd : fds) send_all(fd, add);
  int epfd = ::epoll_create1(EPOLL_CLOEXEC);
  std::vector<int> stage(fds.size(), 0);  // 0: ADD sent, 1: WAIT sent, 2: through
  for (std::size_t i = 0; i < fds.size(); ++i) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = i;
    ::epoll_ctl(epfd, EPOLL_CTL_ADD, fds[i], &ev);
  }
  std::size_t through = 0;
  std::vector<epoll_event> events(256);
  const auto deadline = Clock::now() + 60s;
  while (through < fds.size()) {
    if (Clock::now() > deadline) {
      std::fprintf(stderr, "scale worker: barrier not through within 60 s\n");
      return 5;
    }
    int n = ::epoll_wait(epfd, events.data(), static_cast<int>(events.size()), 1000);
    for (int e = 0; e < n; ++e) {
      const std::size_t i = events[e].data.u64;
      Bytes answer = read_answer(fds[i]);
      if (stage[i] == 0) {
        const auto count = static_cast<std::int64_t>(wire::get_u64(answer.data()));
        if (count == total) send_all(fds[i], set_done);  // a SET is answered only on failure
        send_all(fds[i], wait_done);
        stage[i] = 1;
      } else if (stage[i] == 1) {
        stage[i] = 2;
        ++through;
      }
    }
  }
  arrive(control, "scale/through", std::atoi(std::getenv("BENCH_PROCS")));
  ::close(epfd);
  for (int fd : fds) ::close(fd);
  return 0;
}

int run_scale(const std::vector<int>& sizes, int procs, int runs) {
  std::printf(
      "# c10d-store-bench scale: store barrier (add + wait) over C connections from %d "
      "processes\n",
      procs);
  std::printf("# %11s %16s %18s %8s\n", "connections", "connect+hello(s)", "barrier(s)", "#wrong");
  for (int c : sizes) {
    std::vector<double> barrier, setup;
    bool all_ok = true;
    for (int r = 0; r < runs; ++r) {
      c10d::TCPStoreServer server(c10d::store::ServerOptions{});
      c10d::TCPStore store(client_options(server.port()));
      std::vector<std::vector<std::string>> argvs;
      for (int p = 0; p < procs; ++p) {
        const int mine = c / procs + (p < c % procs ? 1 : 0);
        argvs.push_back({"c10d-store-bench", "scale-worker", std::to_string(server.port()),
                         std::to_string(mine), std::to_string(c)});
      }
      const auto t0 = Clock::now();
      auto pids = spawn(argvs, {{"BENCH_PROCS", std::to_string(procs)}});
      store.wait(std::vector<std::string>{"scale/ready/go"});
      const auto start = Clock::now();
      store.wait(std::vector<std::string>{"scale/through/go"});
      const auto end = Clock::now();
      barrier.push_back(std::chrono::duration<double>(end - start).count());
      setup.push_back(std::chrono::duration<double>(start - t0).count());
      all_ok = reap(pids) && all_ok && store.add("scale/counter", 0) == c;
    }
    std::printf("  %11d %16.3f %18.4f %8d\n", c, median(setup), median(barrier), all_ok ? 0 : 1);
    if (!all_ok) return 1;
  }
  return 0;
}

int usage() {
  std::fprintf(stderr,
               "usage: c10d-store-bench throughput [--clients 1,8,32] [--ops N] [--runs R]\n"
               "                                   [--transports local,tcp]\n"
               "       c10d-store-bench scale [--connections 1024,4096] [--procs P] [--runs R]\n");
  return 2;
}

// The connections one process can hold: its open-file limit, less a few for everything else.
int connection_limit() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) {
    return 1'000'000;
  }
  const rlim_t usable = std::min<rlim_t>(limit.rlim_cur, 1'000'064);
  return usable > 65 ? static_cast<int>(usable - 64) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  c10d::store::raise_open_file_limit();  // the scale mode holds thousands of connections
  const std::string mode = argv[1];
  try {
    // The workers this program starts of itself.
    constexpr int kMaxInt = std::numeric_limits<int>::max();
    if (mode == "tp-worker" && argc == 5) {
      return throughput_worker(integer_flag("port", argv[2], 1, 65535),
                               integer_flag("id", argv[3], 0, kMaxInt),
                               integer_flag("ops", argv[4], 1, kMaxInt));
    }
    if (mode == "scale-worker" && argc == 5) {
      return scale_worker(integer_flag("port", argv[2], 1, 65535),
                          integer_flag("connections", argv[3], 0, kMaxInt),
                          integer_flag("total", argv[4], 1, kMaxInt));
    }
    if (mode != "throughput" && mode != "scale") {
      throw UsageError(fmt::format("unknown mode '{}' (throughput or scale)", mode));
    }
    const int max_connections = connection_limit();
    std::vector<int> clients = {1, 8, 32}, sizes = {1024, 4096};
    std::vector<std::string> transports = {"local"};
    int ops = 20000, runs = 5, procs = 4;
    for (int i = 2; i < argc; ++i) {
      const std::string flag = argv[i];
      const bool known = flag == "--runs" ||
                         (mode == "throughput" &&
                          (flag == "--clients" || flag == "--ops" || flag == "--transports")) ||
                         (mode == "scale" && (flag == "--connections" || flag == "--procs"));
      if (!known) throw UsageError(fmt::format("unknown flag {} for mode {}", flag, mode));
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      const std::string_view v = argv[++i];
      if (flag == "--clients") {
        clients = parse_list(flag, v, 1, kMaxProcesses);
      } else if (flag == "--connections") {
        sizes = parse_list(flag, v, 1, max_connections);
      } else if (flag == "--transports") {
        transports.clear();
        for (std::size_t at = 0; at <= v.size();) {
          const std::size_t comma = std::min(v.find(',', at), v.size());
          transports.emplace_back(v.substr(at, comma - at));
          if (transports.back() != "local" && transports.back() != "tcp") {
            throw UsageError(
                fmt::format("--transports takes local and tcp, not '{}'", transports.back()));
          }
          at = comma + 1;
        }
      } else if (flag == "--ops") {
        ops = integer_flag(flag, v, 1, 1'000'000'000);
      } else if (flag == "--runs") {
        runs = integer_flag(flag, v, 1, 1000);
      } else if (flag == "--procs") {
        procs = integer_flag(flag, v, 1, kMaxProcesses);
      }
    }
    if (mode == "throughput") return run_throughput(clients, ops, runs, transports);
    return run_scale(sizes, procs, runs);
  } catch (const UsageError& e) {
    std::fprintf(stderr, "c10d-store-bench: %s\n", e.what());
    return usage();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "c10d-store-bench: %s\n", e.what());
    return 1;
  }
}
