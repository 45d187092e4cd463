// TCPStoreServer: the rendezvous store's server.
//
// One io_context thread owns everything: the listening socket, every connection, the key-value
// map and the table of held waits. Each connection is one C++20 coroutine that reads frames
// (src/store/wire.h), serves them in order and writes the answers. A request that must wait
// (GET of a missing key, WAIT, MULTI_GET) parks its coroutine on a timer that the write of the
// last missing key cancels, so a waiting client costs a few hundred bytes, never a thread.
//
// Hostile input (garbage, truncated frames, absurd lengths, wrong magic or version, wrong token)
// closes that one connection with a log line; every length is checked against StoreLimits
// before any allocation, a connection's buffer grows only with bytes that actually arrive, and
// before the handshake no frame over 64 bytes is read. A connection that has not finished its
// handshake within ServerOptions::handshake_timeout is closed.
//
// Exhaustion: no answer is larger than StoreLimits::max_response_bytes (a MULTI_GET is summed
// before it is built and refused with kResponseTooLarge); answers not yet written to their
// clients hold at most max_pending_output_bytes in all (a large answer waits for room, then is
// refused with kBusy); an answer its client does not read within write_timeout closes that
// connection; a connection's buffers shrink back to a few KiB after a large frame. Request
// frames of 64 KiB or more hold room for their whole size under max_pending_input_bytes, over
// all connections, from their header until they are served; one that finds no room is not read
// (TCP holds its client back) until room frees, first come first served, or read_timeout
// passes, which closes its connection. Smaller frames never wait. A connection whose begun
// frame stops arriving for read_timeout is closed. At most
// max_connections are served: near the cap, connections still in their handshake are closed
// oldest first, so clients that shake hands at once keep being served; past it, a new connection
// is closed at once. Log lines about closed connections are rate-limited per kind (a few, then
// one summary line per kind every 10 s).
//
// The process hosting a server for thousands of ranks needs as many open files: `c10d-store
// serve` raises its soft RLIMIT_NOFILE to the hard limit; a program hosting one should too.
//
// Thread-safety: the public methods may be called from any thread. Lifetime: the destructor
// stops the server, closes every connection (clients see the server go away) and joins the
// thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "c10d/store.h"

namespace c10d::inline v1::store {

struct ServerOptions {
  // Address to bind: an IPv4 or IPv6 literal or a host name; "" or "0.0.0.0" binds every IPv4
  // interface, "::" every interface.
  std::string host = "127.0.0.1";
  std::uint16_t port = 0;  // 0: an ephemeral port, see port()
  std::string token;       // empty: no authentication
  StoreLimits limits{};
  int backlog = 4096;
  // Also listen on an abstract Unix socket that same-host clients switch to (see TCPStore).
  bool local_socket = true;
  // A connection that has not finished HELLO (and AUTH) by then is closed.
  Milliseconds handshake_timeout{10000};
  // Connections served at once. Past it, the oldest connection still in its handshake is closed
  // to make room, or, when every connection has shaken hands, the new one is closed at once.
  // 0: the soft RLIMIT_NOFILE (read at each accept, so a raised limit counts) less an eighth of
  // it, at least 32, for the rest of the process.
  std::size_t max_connections = 0;
  // From 3/4 of max_connections on, a connection still in its handshake after this is closed
  // (when the next connection arrives), instead of after handshake_timeout.
  Milliseconds busy_handshake_timeout{1000};
  // Bytes of answers built but not yet taken by their clients, over all connections. An answer
  // of 64 KiB or more that does not fit waits (up to write_timeout) for others to be written,
  // then is refused with kBusy. 0: four answers of limits.max_response_bytes; otherwise at least
  // one.
  std::size_t max_pending_output_bytes = 0;
  // A write its client does not take within this (it does not read its answers) closes the
  // connection.
  Milliseconds write_timeout{30000};
  // Bytes of request frames being read or served, over all connections. A frame of 64 KiB or
  // more holds room for its whole size from its header until it has been served; one that
  // does not fit waits, first come first served and without its connection being read, up to
  // read_timeout, then its connection is answered kBusy and closed. Smaller frames never wait
  // (a connection buffers at most 64 KiB of them). 0: four frames of limits.max_frame_bytes;
  // otherwise at least one.
  std::size_t max_pending_input_bytes = 0;
  // How long a large frame waits for room under max_pending_input_bytes; and a connection whose
  // begun frame gets no further byte for this long is closed (idle between frames is fine).
  Milliseconds read_timeout{30000};
};

struct ServerStats {
  std::uint64_t connections_accepted = 0;        // TCP and local
  std::uint64_t local_connections_accepted = 0;  // through the Unix socket
  std::uint64_t connections_open = 0;
  // Closed by the server for any reason but stop(): bad input, limits, auth, a handshake not
  // done in time, and the five below.
  std::uint64_t connections_rejected = 0;
  std::uint64_t connections_refused = 0;  // closed at once: over max_connections
  std::uint64_t connections_evicted = 0;  // in their handshake, closed to make room
  std::uint64_t connections_stalled = 0;  // an answer not taken within write_timeout
  // A begun request frame that got no further byte within read_timeout.
  std::uint64_t connections_read_stalled = 0;
  // A large request frame that found no room under max_pending_input_bytes within read_timeout.
  std::uint64_t connections_starved = 0;
  std::uint64_t requests = 0;
  std::uint64_t waits_held = 0;  // right now
  std::uint64_t keys = 0;
  std::uint64_t pending_output_bytes = 0;  // right now: answers built, not yet written
  std::uint64_t pending_input_bytes = 0;   // right now: room held by large request frames
  std::uint64_t buffer_bytes = 0;          // right now: capacity of every connection's buffers
};

// Raises this process's soft limit on open files to the hard limit (best effort).
void raise_open_file_limit();

}  // namespace c10d::inline v1::store

namespace c10d::inline v1 {

class TCPStoreServer {
 public:
  // Binds, listens and starts serving on its own thread. Throws NetworkError naming the
  // address when it cannot bind.
  explicit TCPStoreServer(store::ServerOptions options);
  ~TCPStoreServer();
  TCPStoreServer(const TCPStoreServer&) = delete;
  TCPStoreServer& operator=(const TCPStoreServer&) = delete;

  std::uint16_t port() const;
  const std::string& host() const;
  // Stops serving: closes the listener and every connection. Idempotent.
  void stop();
  // Counters, read without stopping the server (each is exact; together they are not a
  // consistent snapshot).
  store::ServerStats stats() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace c10d::inline v1
