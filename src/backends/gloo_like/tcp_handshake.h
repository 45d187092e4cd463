// The TCP transport's setup on sockets: the key its ranks prove themselves with, the connecting
// side of the handshake (connect_to_peer) and the accepting side (accept_peers, or accept_step
// one connection at a time on the io thread of a transport that connects on first use). The
// frames are drawn in tcp_wire.h; TCPTransport's constructor calls these in the order
// tcp_transport.h describes, or its connector threads and io thread later (tcp_connect.cc,
// tcp_accept.cc). The key is made in tcp_handshake.cc, the sides in tcp_handshake_connect.cc and
// tcp_handshake_accept.cc, over the socket waits they share (tcp_handshake_io.h).
//
// The key comes from a secret every rank of the job knows and no stranger does: the store's
// token (TCPTransportOptions::token, else C10D_STORE_TOKEN), or else a random job secret that
// the first rank to get there puts in the store under kTransportSecretKey (compare_set, so
// every rank and every group on that store reads the same one). Without a token the store is
// open and whoever reaches it can read the secret: the token is what closes a job.
//
// Blocking calls, each bounded by the setup deadline and ended early by another rank's recorded
// set-up failure (SetupContext::watch) or by the transport closing (SetupContext::cancelled).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "backends/common/setup_watch.h"
#include "backends/gloo_like/tcp_wire.h"
#include "c10d/store.h"
#include "store/asio.h"
#include "transport/transport.h"

namespace c10d::inline v1::gloo_like {

inline constexpr std::string_view kTransportSecretKey = "c10d/transport_secret";

// What a rank brings to its handshakes.
struct SetupContext {
  Identity self;  // this rank's world size, rank and group
  TransportKey key;
  transport::Clock::time_point deadline;  // of the whole setup
  std::chrono::milliseconds timeout;      // the setup's length, for messages
  // Looked at while waiting (for a key, a connection, a peer's answer), at least every
  // SetupWatch::kPollInterval: another rank's set-up failure ends this one (setup_watch.h).
  // Null: none.
  backends::SetupWatch* watch = nullptr;
  // Looked at as often: once set, the wait ends with a NetworkError (a transport that closes
  // while a connector thread connects for it). Null: never.
  const std::atomic<bool>* cancelled = nullptr;
};

// The key of the job (see above); `token` is the explicit option, empty when none.
TransportKey transport_key(Store& store, const std::string& token, int rank);

// Connects to `peer` at the address it published in the store ("<group>/addr/<peer>"), retrying
// a refused connection with backoff for a few seconds (rereading the address: a stale one may
// be replaced), and runs the connecting side of the handshake. NetworkError or TimeoutError
// naming this rank, the peer's rank and its address when it cannot connect or the process there
// does not prove it is that rank of this job.
boost::asio::ip::tcp::socket connect_to_peer(boost::asio::io_context& io, Store& store,
                                             const SetupContext& ctx, int peer);

// Accepts on `acceptor` (listening, nonblocking) until every other rank has connected and
// proven itself, reading every pending connection as its bytes arrive (at most
// kMaxPendingHandshakes at once; past that the oldest is dropped). Connections that fail the
// handshake are closed and logged by address (the first few, then a count) and never take a
// rank's place. Returns one socket per rank (none at this rank's own index). TimeoutError when
// the deadline passes first.
std::vector<std::optional<boost::asio::ip::tcp::socket>> accept_peers(
    boost::asio::ip::tcp::acceptor& acceptor, const SetupContext& ctx);

inline constexpr std::size_t kMaxPendingHandshakes = 64;

// This process's limits on open files, for an error that ran out of them: "this process may open
// only N files (RLIMIT_NOFILE soft limit; hard limit M); raise it (ulimit -n)".
std::string descriptor_limits();

// Logs refused connections by address: the first few one by one, then only how many more, so a
// flood of strangers cannot fill the log; the count is logged when it goes, "refused N
// connections <during>, M of them not logged".
class RefusalLog {
 public:
  RefusalLog(std::uint32_t rank, std::string during) : rank_(rank), during_(std::move(during)) {}
  RefusalLog(const RefusalLog&) = delete;
  RefusalLog& operator=(const RefusalLog&) = delete;
  ~RefusalLog();
  void refused(const std::string& from, const std::string& why);

 private:
  std::uint32_t rank_;
  std::string during_;
  int count_ = 0;
};

// An accepted connection whose handshake is under way. Its frames are read as they come, so one
// that sends nothing, or dribbles, never holds up a real peer's handshake behind it.
struct PendingHandshake {
  boost::asio::ip::tcp::socket socket;  // nonblocking
  std::string from;                     // its remote address, for logs
  bool challenged = false;  // the Hello is in and the Challenge sent: the Proof comes next
  Nonces nonces;
  std::vector<std::byte> bytes;  // what has arrived of the current frame
};

// "1.2.3.4:5" or "[::1]:5" for the remote end of `s`; "an unknown address" when it has none.
std::string remote_of(const boost::asio::ip::tcp::socket& s);

// One step of the accepting side's handshake on `p` (tcp_wire.h): reads what has arrived and
// answers. Returns the peer's rank once it proved itself and was accepted; nullopt while the
// handshake goes on (`done` false) or when it ended in a refusal (`done` true; the connection is
// then to be closed). `joined(rank)`: whether that rank's connection is already here (a second
// one is refused as a duplicate). Only ctx.self and ctx.key are used: it never blocks.
std::optional<std::uint32_t> accept_step(PendingHandshake& p, const SetupContext& ctx,
                                         const std::function<bool(std::uint32_t)>& joined,
                                         RefusalLog& log, bool& done);

}  // namespace c10d::inline v1::gloo_like
