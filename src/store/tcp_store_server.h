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

namespace c10d::store {

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
};

struct ServerStats {
  std::uint64_t connections_accepted = 0;        // TCP and local
  std::uint64_t local_connections_accepted = 0;  // through the Unix socket
  std::uint64_t connections_open = 0;
  std::uint64_t connections_rejected = 0;  // closed for bad input, limits or auth
  std::uint64_t requests = 0;
  std::uint64_t waits_held = 0;  // right now
  std::uint64_t keys = 0;
};

// Raises this process's soft limit on open files to the hard limit (best effort).
void raise_open_file_limit();

}  // namespace c10d::store

namespace c10d {

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

}  // namespace c10d
