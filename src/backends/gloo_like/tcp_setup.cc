// Set-up: listen, publish this rank's address in the store and wait for every rank's; then
// either hand the listener to the io thread (connections on first use: tcp_connect.cc,
// tcp_accept.cc) or make the full mesh: connect to the lower ranks, accept every peer (each
// proves itself in a handshake, tcp_handshake.h), connect to the higher ranks. Then start the io
// thread. Blocking sockets polled against the set-up deadline.
#include <netdb.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <optional>
#include <thread>

#include "backends/gloo_like/host_map.h"
#include "backends/gloo_like/tcp_handshake.h"
#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1::gloo_like {
using asio::ip::tcp;

namespace {

constexpr rlim_t kHeadroom = 256;

std::string limit_text(rlim_t v) {
  return v == RLIM_INFINITY ? std::string("unlimited") : std::to_string(v);
}

// A rank of a group of `world_size` keeps up to 2(world_size - 1) sockets open. Raises the soft
// limit on open files (RLIMIT_NOFILE) toward the hard one when they and some headroom for the
// program would not fit. An eager set-up (`strict`), which opens them all at once, then fails
// naming both limits when even the hard one is too low, instead of a bare "Too many open files"
// midway through; a lazy one may never need them all, and a connect that finds no descriptor
// names the limits then (descriptor_limits).
void ensure_descriptors(int rank, int world_size, bool strict) {
  const auto sockets = 2 * static_cast<rlim_t>(world_size - 1);
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return;
  if (limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < sockets + kHeadroom) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max == RLIM_INFINITY
                          ? sockets + kHeadroom
                          : std::min(limit.rlim_max, sockets + kHeadroom);
    if (raised.rlim_cur > limit.rlim_cur && ::setrlimit(RLIMIT_NOFILE, &raised) == 0) {
      limit = raised;
    }
  }
  if (strict && limit.rlim_cur != RLIM_INFINITY && limit.rlim_cur < sockets + kHeadroom / 4) {
    C10D_THROW(NetworkError,
               "rank {}: a TCP group of {} ranks needs {} sockets per rank (two per peer), but "
               "this process may open only {} files (RLIMIT_NOFILE soft limit; hard limit {}); "
               "raise it (ulimit -n)",
               rank, world_size, sockets, limit.rlim_cur, limit_text(limit.rlim_max));
  }
}

}  // namespace

std::string descriptor_limits() {
  rlimit limit{};
  if (::getrlimit(RLIMIT_NOFILE, &limit) != 0) return "this process is out of file descriptors";
  return fmt::format(
      "this process may open only {} files (RLIMIT_NOFILE soft limit; hard limit {}); raise it "
      "(ulimit -n)",
      limit_text(limit.rlim_cur), limit_text(limit.rlim_max));
}

TCPConnect tcp_connect_from_env() {
  const std::optional<std::string> v = core::env_text("C10D_TCP_CONNECT");
  if (!v || *v == "lazy") return TCPConnect::kLazy;
  if (*v == "eager") return TCPConnect::kEager;
  C10D_THROW(InvalidArgument, "C10D_TCP_CONNECT={}: want lazy (connect on first use) or eager",
             core::printable(*v, 64));
}

std::string local_address_towards(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), "9", &hints, &found) != 0) return "";
  std::string result;
  for (addrinfo* a = found; a != nullptr && result.empty(); a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t len = sizeof(local);
    char text[NI_MAXHOST] = {};
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0 &&
        ::getnameinfo(reinterpret_cast<sockaddr*>(&local), len, text, sizeof(text), nullptr, 0,
                      NI_NUMERICHOST) == 0) {
      result = text;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return result;
}

void TCPTransport::set_up(Store* store, const std::string& group_name,
                          const TCPTransportOptions& options, Clock::time_point deadline,
                          backends::SetupWatch& watch) {
  const int rank = rank_;
  const int world_size = world_size_;
  auto& io = impl_->io;
  const bool lazy = impl_->lazy;

  // Before anything is published: a rank that cannot hold its sockets fails at once (and
  // records why, for its peers).
  ensure_descriptors(rank, world_size, !lazy);
  // Every peer has its state from the start (a few hundred bytes, sockets or not).
  C10D_CHECK(world_size <= kMaxTCPWorldSize,
             "TCPTransport rank {}: a world of {} ranks exceeds the limit of {}", rank, world_size,
             kMaxTCPWorldSize);
  impl_->conns.resize(static_cast<std::size_t>(world_size));
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer != rank) impl_->conns[static_cast<std::size_t>(peer)].reset(new Connection(peer));
  }
  impl_->matcher = decltype(impl_->matcher)(world_size, impl_->max_unexpected, options.arrivals);
  C10D_CHECK(group_name.size() <= kMaxGroupBytes,
             "TCPTransport rank {}: group name of {} bytes exceeds the limit of {}", rank,
             group_name.size(), kMaxGroupBytes);
  const SetupContext setup{Identity{static_cast<std::uint32_t>(world_size),
                                    static_cast<std::uint32_t>(rank), group_name},
                           transport_key(*store, options.token, rank), deadline, options.timeout,
                           &watch};
  error_code host_ec;
  const auto host_address = asio::ip::make_address(options.host, host_ec);
  C10D_CHECK(!host_ec, "TCPTransport rank {}: cannot listen on \"{}\": not an IP address ({})",
             rank, options.host, host_ec.message());
  const tcp::endpoint listen_at(host_address, 0);
  // Socket buffers are left to the kernel's autotuning (net.ipv4.tcp_wmem and tcp_rmem), which
  // grows each connection's buffers to what its path needs. A fixed 8 MiB (SO_SNDBUF and
  // SO_RCVBUF, which turn autotuning off) measured slower on loopback (all_to_all of 64 MiB over
  // 4 ranks: 37.5 against 34.5 ms; docs/benchmarks.md), and on a real network would cap a path
  // whose bandwidth-delay product is larger.
  tcp::acceptor acceptor(io);
  error_code listen_ec;
  acceptor.open(listen_at.protocol(), listen_ec);
  if (!listen_ec) acceptor.bind(listen_at, listen_ec);
  if (!listen_ec) acceptor.listen(asio::socket_base::max_listen_connections, listen_ec);
  if (!listen_ec) acceptor.non_blocking(true, listen_ec);
  if (listen_ec) {
    C10D_THROW(NetworkError, "rank {}: cannot listen on {}: {}", rank, options.host,
               listen_ec.message());
  }
  // A cause left by an earlier group of this name must not explain this one's failures. Every
  // other rank waits for rank 0's address before its set-up ends, so none can publish before
  // this.
  if (rank == 0) store->delete_key(impl_->failure_key);
  // Before the address: a peer whose address is published has published its key too.
  const std::string hosts_prefix = fmt::format("{}/hosts/{}/", group_name, watch.attempt());
  if (options.host_key) publish_host_key(*store, hosts_prefix, rank, *options.host_key);
  store->set(impl_->own_key, fmt::format("{}:{}", options.host, acceptor.local_endpoint().port()));

  if (lazy) {
    impl_->connect_ctx = setup;
    impl_->connect_ctx.watch = impl_->setup_watch.get();
    impl_->connect_ctx.cancelled = &impl_->closing;
    if (world_size > 1) {
      impl_->accepting = std::make_unique<tcp_detail::Accepting>(std::move(acceptor), setup);
    }
    // The io thread answers handshakes from here on, so that a peer that finished its set-up
    // first can connect (and a stranger's attempt is done with) while this rank waits.
    start_io();
    // Set-up returns once every rank has joined, as an eager one does: a rank that failed
    // before it published is named here, and every later connect finds its peer's address.
    std::vector<std::string> keys;
    for (int peer = 0; peer < world_size; ++peer) {
      if (peer != rank) keys.push_back(fmt::format("{}/addr/{}", group_name, peer));
    }
    try {
      if (!keys.empty()) watch.wait(keys, deadline);
      // Every rank published its host key before its address.
      if (options.host_key) {
        host_of_rank_ = read_host_map(*store, watch, hosts_prefix, world_size, deadline);
      }
    } catch (...) {
      impl_->abort(std::current_exception(), tcp_detail::LastFrame::kGoodbye);
      stop_io();
      throw;
    }
    if (impl_->watch_failures) {
      impl_->failure_watch = std::thread([impl = impl_.get()] { impl->watch_for_failures(); });
    }
  } else {
    // Two connections per pair of ranks, one per direction: each rank connects to every peer
    // and writes only there, and reads on the connection the peer made (Connection). It
    // connects to the lower ranks, accepts every peer, then connects to the higher ranks. A
    // rank answers handshakes only while it accepts, and in this order no two ranks wait for
    // each other's answer: rank 0 accepts at once, every rank reaches its accepting once the
    // lower ones do, and leaves it once the lower ones, done accepting, have connected to it.
    std::vector<std::optional<tcp::socket>> outs(static_cast<std::size_t>(world_size));
    for (int peer = 0; peer < rank; ++peer) {
      outs[peer].emplace(connect_to_peer(io, *store, setup, peer));
    }
    // Every peer connects here and proves itself; strangers never take a rank's place.
    std::vector<std::optional<tcp::socket>> ins = accept_peers(acceptor, setup);
    // No one connects to this rank after setup: a connection made later finds nothing listening.
    acceptor.close();
    for (int peer = rank + 1; peer < world_size; ++peer) {
      outs[peer].emplace(connect_to_peer(io, *store, setup, peer));
    }
    for (int peer = 0; peer < world_size; ++peer) {
      if (peer == rank) continue;
      const auto p = static_cast<std::size_t>(peer);
      Connection& c = impl_->conn(peer);
      c.ahead = std::make_unique_for_overwrite<std::byte[]>(tcp_detail::kReadAhead);
      c.read_fd.store(ins[p]->release(), std::memory_order_release);
      c.write_fd.store(outs[p]->release(), std::memory_order_release);
      c.write_side = tcp_detail::WriteSide::kOpen;
      impl_->watch(peer);
    }
    if (options.host_key) {
      host_of_rank_ = read_host_map(*store, watch, hosts_prefix, world_size, deadline);
    }
    // Bytes that arrived during setup raised their readiness edge before anyone waited for it.
    asio::post(impl_->io, [impl = impl_.get(), world_size] {
      for (int peer = 0; peer < world_size; ++peer) {
        if (peer != impl->rank) impl->try_drain(peer);
      }
    });
    start_io();
  }
}

void TCPTransport::start_io() {
  impl_->guard.emplace(asio::make_work_guard(impl_->io));
  if (impl_->accepting) asio::post(impl_->io, [impl = impl_.get()] { impl->start_accepting(); });
  impl_->thread = std::thread([impl = impl_.get()] { impl->run(); });
}

// After an abort: the threads end (connectors, the failure watch, then the io thread, once the
// last frames are out and every wait it had is over).
void TCPTransport::stop_io() {
  impl_->join_connectors();
  asio::post(impl_->io, [impl = impl_.get()] { impl->guard.reset(); });
  if (impl_->thread.joinable()) impl_->thread.join();
}

// The io thread's loop. It does not poll: the threads that wait for messages poll their own
// sockets (see drain), and an io thread polling beside them only takes their cores (measured in
// docs/benchmarks.md). No handler should throw; one that does fails the transport, and the
// loop goes on (Asio allows run() again after a handler threw) to send the last frames and
// close, so nothing escapes the thread.
void TCPTransport::Impl::run() {
  for (;;) {
    try {
      io.run();
      return;
    } catch (...) {
      fail_on_exception(std::current_exception(), "the io thread");
    }
  }
}

namespace tcp_detail {

Connection::~Connection() {
  if (read_reactor) read_reactor->release();
  if (write_reactor) write_reactor->release();
  if (reverse_reactor) reverse_reactor->release();
  for (const int fd : {read_fd.load(), write_fd.load(), reverse_fd}) {
    if (fd >= 0) ::close(fd);
  }
}

}  // namespace tcp_detail

}  // namespace c10d::inline v1::gloo_like
