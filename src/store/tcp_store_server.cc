// The TCP store server's public class: see tcp_store_server.h for the contract and wire.h for
// the frames. This file checks the options, binds and listens, runs the io thread and stops
// it, and reads the counters; the server's state and the files that serve connections are
// listed in tcp_store_server_impl.h.
#include "store/tcp_store_server.h"

#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"
#include "store/tcp_store_server_impl.h"
#include "store/wire.h"

namespace c10d::inline v1 {
namespace {

namespace asio = boost::asio;
using asio::ip::tcp;
using boost::system::error_code;

}  // namespace

void store::raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < lim.rlim_max) {
    lim.rlim_cur = lim.rlim_max;
    setrlimit(RLIMIT_NOFILE, &lim);
  }
}

// The io thread's loop. While requests keep coming it polls the reactor instead of sleeping
// in epoll_wait: a thread woken from epoll takes tens of microseconds to run again on virtual
// machines, more than a request costs to serve. After kSpinWindow without work it blocks, so
// an idle server (the usual case, hosted inside rank 0) costs nothing, and it regains the
// scheduler's favour for waking threads when many client processes share the cores.
void TCPStoreServer::Impl::run() {
  constexpr auto kSpinWindow = std::chrono::microseconds(50);
  auto last_work = std::chrono::steady_clock::now();
  while (!io.stopped()) {
    if (io.poll() > 0) {
      last_work = std::chrono::steady_clock::now();
    } else if (std::chrono::steady_clock::now() - last_work > kSpinWindow) {
      io.run_one();
      last_work = std::chrono::steady_clock::now();
    }
  }
}

TCPStoreServer::TCPStoreServer(store::ServerOptions options)
    : impl_(std::make_unique<Impl>(std::move(options))) {
  Impl& s = *impl_;
  const StoreLimits& l = s.options.limits;
  // Deadlines are computed from these: a timeout past core::kMaxTimeout would wrap one.
  core::check_timeout(s.options.handshake_timeout, "store server: handshake_timeout");
  core::check_timeout(s.options.busy_handshake_timeout, "store server: busy_handshake_timeout");
  core::check_timeout(s.options.write_timeout, "store server: write_timeout");
  core::check_timeout(s.options.read_timeout, "store server: read_timeout");
  // Lengths travel as u32 on the wire; a frame must hold one key and one value.
  C10D_CHECK(l.max_key_bytes <= UINT32_MAX && l.max_value_bytes <= UINT32_MAX &&
                 l.max_keys_per_op <= UINT32_MAX,
             "store limits: key {} / value {} bytes and {} keys per request must each fit in 32 "
             "bits",
             l.max_key_bytes, l.max_value_bytes, l.max_keys_per_op);
  C10D_CHECK(l.max_frame_bytes >= l.max_key_bytes + l.max_value_bytes + 64,
             "store limits: a request of at most {} bytes cannot carry a {}-byte key and a "
             "{}-byte value",
             l.max_frame_bytes, l.max_key_bytes, l.max_value_bytes);
  C10D_CHECK(l.max_response_bytes >= store::wire::value_answer_bytes(l.max_value_bytes),
             "store limits: an answer of at most {} bytes (max_response_bytes) cannot carry a "
             "{}-byte value",
             l.max_response_bytes, l.max_value_bytes);
  s.output_limit = s.options.max_pending_output_bytes == 0 ? 4 * l.max_response_bytes
                                                           : s.options.max_pending_output_bytes;
  C10D_CHECK(s.output_limit >= l.max_response_bytes,
             "store server: max_pending_output_bytes {} cannot hold one answer of "
             "max_response_bytes {}",
             s.output_limit, l.max_response_bytes);
  s.input_limit = s.options.max_pending_input_bytes != 0 ? s.options.max_pending_input_bytes
                  : l.max_frame_bytes > SIZE_MAX / 4     ? SIZE_MAX
                                                         : 4 * l.max_frame_bytes;
  C10D_CHECK(s.input_limit >= l.max_frame_bytes,
             "store server: max_pending_input_bytes {} cannot hold one request of "
             "max_frame_bytes {}",
             s.input_limit, l.max_frame_bytes);
  s.spare_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  const std::string& host = s.options.host;
  error_code ec;
  tcp::endpoint endpoint;
  if (host.empty() || host == "0.0.0.0") {
    endpoint = tcp::endpoint(tcp::v4(), s.options.port);
  } else if (host == "::") {
    endpoint = tcp::endpoint(tcp::v6(), s.options.port);
  } else {
    auto address = asio::ip::make_address(host, ec);
    if (ec) {
      tcp::resolver resolver(s.io);
      auto results = resolver.resolve(host, std::to_string(s.options.port), ec);
      if (ec || results.empty()) {
        C10D_THROW(NetworkError, "store server: cannot resolve host '{}': {}", host,
                   ec ? ec.message() : "no addresses");
      }
      endpoint = results.begin()->endpoint();
    } else {
      endpoint = tcp::endpoint(address, s.options.port);
    }
  }
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(s.options.backlog, ec);
  if (ec) {
    C10D_THROW(NetworkError, "store server: cannot listen on {}:{}: {}", host, s.options.port,
               ec.message());
  }
  s.port = s.acceptor.local_endpoint().port();
  asio::co_spawn(s.io, s.accept_loop(s.acceptor), asio::detached);
  if (s.options.local_socket) s.open_local_acceptor();
  s.thread = std::thread([&s] {
    // No handler should throw; one that does is logged and the server goes on serving (Asio
    // allows run() again after a handler threw), so nothing leaves the thread.
    for (;;) {
      try {
        s.run();
        return;
      } catch (const std::exception& e) {
        C10D_LOG_ERROR("store server :{}: a handler on the io thread failed: {}", s.port, e.what());
      } catch (...) {
        C10D_LOG_ERROR("store server :{}: a handler on the io thread failed", s.port);
      }
    }
  });
  C10D_LOG_INFO("store server listening on {}:{}{}", host, s.port,
                s.options.token.empty() ? "" : " (token required)");
}

TCPStoreServer::~TCPStoreServer() { stop(); }

std::uint16_t TCPStoreServer::port() const { return impl_->port; }

const std::string& TCPStoreServer::host() const { return impl_->options.host; }

void TCPStoreServer::stop() {
  Impl& s = *impl_;
  // Every caller returns once the server has stopped; the first one does the stopping.
  std::call_once(s.stop_once, [&s] {
    asio::post(s.io, [&s] { s.shutdown(); });
    if (s.thread.get_id() == std::this_thread::get_id()) return;  // cannot join itself
    // Every coroutine ends once its socket is closed; the thread then leaves run(). The
    // watchdog stops the context outright should a coroutine fail to finish within a second.
    std::promise<void> done;
    std::thread watchdog([&s, finished = done.get_future()] {
      if (finished.wait_for(std::chrono::seconds(1)) == std::future_status::timeout) s.io.stop();
    });
    if (s.thread.joinable()) s.thread.join();
    done.set_value();
    watchdog.join();
  });
}

store::ServerStats TCPStoreServer::stats() const {
  const Impl& s = *impl_;
  store::ServerStats st;
  st.connections_accepted = s.accepted.load();
  st.local_connections_accepted = s.local_accepted.load();
  st.connections_open = s.open.load();
  st.connections_rejected = s.rejected.load();
  st.connections_refused = s.refused.load();
  st.connections_evicted = s.evicted.load();
  st.connections_stalled = s.stalled.load();
  st.connections_read_stalled = s.read_stalled.load();
  st.connections_starved = s.starved.load();
  st.requests = s.requests.load();
  st.waits_held = s.held.load();
  st.keys = s.keys.load();
  st.pending_output_bytes = s.pending_output.load();
  st.pending_input_bytes = s.pending_input.load();
  st.buffer_bytes = s.buffer_bytes.load();
  return st;
}

}  // namespace c10d::inline v1
