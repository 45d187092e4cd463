// The TCP transport's setup on sockets: the key its ranks prove themselves with, the connecting
// side of the handshake (connect_to_peer) and the accepting side (accept_peers). The frames are
// drawn in tcp_wire.h; TCPTransport's constructor calls these in the order tcp_transport.h
// describes. The key is made in tcp_handshake.cc, the sides in tcp_handshake_connect.cc and
// tcp_handshake_accept.cc, over the socket waits they share (tcp_handshake_io.h).
//
// The key comes from a secret every rank of the job knows and no stranger does: the store's
// token (TCPTransportOptions::token, else C10D_STORE_TOKEN), or else a random job secret that
// the first rank to get there puts in the store under kTransportSecretKey (compare_set, so
// every rank and every group on that store reads the same one). Without a token the store is
// open and whoever reaches it can read the secret: the token is what closes a job.
//
// Blocking calls, each bounded by the setup deadline and ended early by another rank's recorded
// set-up failure (SetupContext::watch); used by the constructing thread alone.
#pragma once

#include <chrono>
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

}  // namespace c10d::inline v1::gloo_like
