// TCPTransport: the Transport of transport.h over TCP connections, up to two per pair of ranks,
// one per direction: a rank writes to a peer on the connection it made to that peer and reads on
// the one the peer made (one connection carrying both directions moved a 16 MiB exchange about
// 20% slower on loopback; docs/benchmarks.md). Bytes move by system calls on the sockets
// (sendmsg, recv) made by whichever thread waits, or by the io thread; Boost.Asio supplies only
// the io thread's epoll waits and timers.
//
// Setup (in the constructor, bounded by options.timeout): derive the job's key, listen on
// host:0, publish "<group_name>/addr/<rank>" = "host:port" in the store and wait until every rank
// has published its own, so that the constructor returns once the whole group has joined (and a
// rank that failed before it is named). Then, by default (TCPConnect::kLazy), no connection is
// made: a rank connects to a peer on first use, at its first isend to it or its first irecv from
// it (unless the peer's own connection is already here), on one of a few connector threads, with
// the same handshake; the io thread accepts and answers the peers' connections for the
// transport's life, until every peer has connected. A pair that exchanges bytes both ways so
// holds two connections, made independently: two ranks that connect to each other at the same
// moment each make the one they write to, and nothing has to be decided between them. A ring
// keeps connections to its neighbours only, and a subgroup to its members; a group of 64 ranks
// on one host was made in well under the second its full mesh took (docs/perf-log.md). A connect
// that cannot complete (refused past a short retry, a peer that does not prove itself, no
// answer within options.timeout) is the loss of that peer, as a connection that breaks is: its
// requests fail naming the peer and its address.
// With TCPConnect::kEager (C10D_TCP_CONNECT=eager) the constructor makes the full mesh instead:
// it connects to every lower rank, accepts every peer's connection, closes the listener, then
// connects to every higher rank (a rank answers handshakes only while it accepts; in this order
// no two ranks wait for each other's answer), so that an unreachable rank fails the set-up
// rather than the first op that needs it. A rank keeps up to 2(n-1) sockets: when the soft limit
// on open files (RLIMIT_NOFILE) leaves too little room it is raised toward the hard limit; an
// eager set-up fails naming both when that is too low, a lazy one goes on (a ring needs four)
// and a connection that then finds no descriptor fails naming them. A rank whose setup fails
// records why in the store, and the others, whatever they wait for (a key, a connection, an
// answer), fail within a fraction of a second naming it and its reason (setup_watch.h).
//
// Each connection opens with a mutually authenticated handshake (tcp_wire.h, version 5): both
// sides prove by HMAC-SHA256 over fresh nonces from both that they know the job's key, derived
// from the store's token or from a random secret the ranks share through the store
// (tcp_handshake.h); the key never crosses the wire. The accepting side tells a connection
// nothing of the job until it has proven itself, and closes one that fails without a word, so
// a stranger that reaches a rank's port learns nothing and never takes a rank's place. Between
// proven ranks, a world size, group or rank that differs is refused on both sides with an error
// naming both sides' values. The accepting side reads every accepted connection's handshake as
// its bytes arrive (up to 64 at once, each for at most options.timeout), so a connection that
// sends nothing, or part of a handshake, holds up no real peer; refused connections are logged
// by address (the first few, then a count). Once every peer has connected nothing listens: no
// connection can join (an eager transport: from the end of setup). The handshake authenticates
// the ends; it does not encrypt, nor guard the frames after it against a party on the path
// between them.
//
// The frames are drawn in tcp_wire.h.
//
// Threads: one io thread runs the io_context: it reads and writes the sockets that no waiting
// thread is moving bytes on; a thread waiting on a request reads its peer's socket and writes
// queued sends itself (docs/design.md). A send completes once its frame is written (header
// and payload in one gather write, the payload never copied). Receives and messages are matched by
// transport/matcher.h (any-source receives included); a message that arrives before its irecv is
// buffered as an unexpected entry of its peer, in chunks allocated as its bytes arrive (never at
// the size its header claims: transport/unexpected_buffer.h), and copied into the irecv's buffer
// when it is posted. A large one (64 KiB and up) first waits in the socket up to 20 ms for its
// irecv, to be read straight into place. What one peer's unexpected messages hold is bounded
// (max_unexpected_bytes); a peer that goes past it aborts the transport with a NetworkError naming
// it, the bytes and the limit. A header this protocol never sends (tcp_wire.h: decode_frame_header)
// ends the connection as a loss of that peer. A receive whose message belongs to another call (its
// frame's call differs: transport.h: Calls) fails with a CallMismatch, one whose size differs from
// the message with InvalidArgument (calls are compared first; either way the message is read
// through a small buffer and dropped, and the sender has already completed). No exception escapes
// the io thread: one from a handler fails the transport. A lost connection fails every pending and
// later request with that peer with a NetworkError naming it (an any-source receive fails once
// every peer's connection is gone); with options.fail_all_on_peer_loss (what a ProcessGroup wants:
// one lost rank means the group cannot finish any collective) it aborts the whole transport with
// that error instead. A request that times out throws transport::PeerTimeout with what this rank
// last heard from the peer (when the last frame header came, and its tag); find_stalled follows the
// ranks' waits through the store, and an abort whose reason is a PeerTimeout names its rank to the
// peers as the one that made no progress (tcp_wire.h).
//
// Failure spreading: an aborting transport sends its abort notice on each connection it has, in
// both directions (the accepting side's last frame goes back on the connection it accepted:
// tcp_connection.h), and every rank that hears one aborts in turn under fail_all_on_peer_loss,
// so a failure floods the ranks that talk to each other. A rank with no connection to any of
// them reads the failure record in the store (<group>/failure, which every aborting transport
// writes, the first writer winning): a lazy transport with fail_all_on_peer_loss has a thread
// that looks there every kFailureLook while this rank has requests pending (on this transport,
// or on the channel options.pending_elsewhere speaks for), so every rank's pending ops fail
// within moments naming the rank that failed first. It asks the store on its own thread, so a
// store call that waits (another thread's, on a shared client) holds up no op.
//
// Orderly close: the destructor of a transport that was not aborted sends each peer it has a
// connection with a goodbye frame (tcp_wire.h) before closing, so a peer tells a rank that
// finished from one that died: after a goodbye, requests with that rank fail ("closed its
// transport") but the peer's other connections stay up.
//
// Lifetime: requests hold the transport's state by shared_ptr and may outlive it. Destroying a
// request whose payload is on the wire waits for that transfer to end (so a buffer is never
// written after its request is gone). The destructor fails pending requests, closes the sockets
// and joins the io thread. The transport keeps the store alive (a store server hosted in this
// process must outlive the connections set up through it).
#pragma once

#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "backends/common/setup_watch.h"
#include "backends/gloo_like/tcp_wire.h"
#include "c10d/store.h"
#include "transport/matcher.h"
#include "transport/transport.h"

namespace c10d::inline v1::gloo_like {

// When a TCP transport makes its connections (TCPTransportOptions::connect; see above).
enum class TCPConnect {
  kFromEnv,  // C10D_TCP_CONNECT: "lazy" (the default) or "eager"
  kLazy,     // to a peer at first use; set-up waits only for the ranks' addresses
  kEager,    // the full mesh during set-up
};

// C10D_TCP_CONNECT as kLazy (unset, empty or "lazy") or kEager ("eager"); InvalidArgument naming
// the variable and its value for anything else.
TCPConnect tcp_connect_from_env();

struct TCPTransportOptions {
  std::string host = "127.0.0.1";  // the address to listen on and publish (IPv4 or IPv6)
  // For the whole setup, and for each connection made later (and each handshake answered).
  std::chrono::milliseconds timeout{std::chrono::seconds(60)};
  // The secret every rank of the job proves it knows in each connection's handshake (never sent).
  // Empty: C10D_STORE_TOKEN, else a random secret the ranks share through the store
  // (tcp_handshake.h). Every rank of the job must use the same.
  std::string token;
  bool fail_all_on_peer_loss = false;
  // Called once when the transport aborts, whatever the cause (abort(), or a lost peer under
  // fail_all_on_peer_loss), with the error its requests fail with; on the thread that aborts it,
  // under the transport's lock, so it must not call into this transport. The TCP backend passes
  // the failure on to its same-host channels (shm_transport.h). What it throws is logged.
  std::function<void(std::exception_ptr)> on_abort;
  // The most the messages of one peer whose irecv is not posted yet may hold (their bytes plus
  // 128 per message); past it the transport aborts. 0: C10D_MAX_UNEXPECTED_BYTES, else 1 GiB.
  std::uint64_t max_unexpected_bytes = 0;
  // Where the setup's waits look for another rank's set-up failure, and where this rank records
  // its own (setup_watch.h). Null: the transport makes its own.
  std::shared_ptr<backends::SetupWatch> setup_watch;
  // The arrival stamps (transport/matcher.h) this transport shares with the shared-memory
  // transport of the same rank under a RoutedTransport (routed_transport.h compares them); null:
  // its own.
  std::shared_ptr<transport::ArrivalClock> arrivals;
  // The group's host map (transport.h: Hosts; host_map.h), which host_of_rank() reports: one
  // host id per rank. Empty: every rank a host of its own. Not read when host_key is set.
  std::vector<int> host_of_rank;
  // This rank's host key (host_map.h), when the set-up is to learn the host map: it publishes
  // the key beside its address and reads every rank's once all have published their addresses
  // (so no rank waits for the keys). Every rank of the group sets it or none does.
  std::optional<std::string> host_key;
  TCPConnect connect = TCPConnect::kFromEnv;
  // Whether this rank has requests pending on another channel (the TCP backend's shared
  // memory): the failure watch looks at the store then too (see above). Called on that thread,
  // with no lock of this transport held. Null: none.
  std::function<bool()> pending_elsewhere;
};

// The most ranks a TCP transport takes (each peer costs its state, a few hundred bytes).
inline constexpr int kMaxTCPWorldSize = 1 << 17;

// How often the failure watch of a lazy transport looks for a failure record in the store.
inline constexpr std::chrono::milliseconds kFailureLook{200};

// The local address of the interface this host would use to reach `host` (a name or an
// address), found by connecting a UDP socket (no packet is sent); "" when `host` does not
// resolve or no route leads there. On a machine with several interfaces this is the address
// the other ranks, which reach the same store, can reach this one at.
std::string local_address_towards(const std::string& host);

class TCPTransport final : public transport::Transport {
 public:
  TCPTransport(std::shared_ptr<Store> store, int rank, int world_size, std::string group_name,
               TCPTransportOptions options = {});
  ~TCPTransport() override;
  TCPTransport(const TCPTransport&) = delete;
  TCPTransport& operator=(const TCPTransport&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return world_size_; }

  using transport::Transport::irecv;
  using transport::Transport::isend;
  std::unique_ptr<transport::Request> isend(int peer, transport::Tag tag,
                                            std::span<const std::byte> data,
                                            transport::Call call) override;
  std::unique_ptr<transport::Request> irecv(int peer, transport::Tag tag, std::span<std::byte> data,
                                            transport::Call call) override;
  std::unique_ptr<transport::Request> irecv_any(transport::Tag tag,
                                                std::span<std::byte> data) override;
  // A part of an any-source receive that another transport takes part in too, sharing `claim`
  // (routed_transport.h; transport/matcher.h: SourceClaim).
  std::unique_ptr<transport::Request> irecv_any(transport::Tag tag, std::span<std::byte> data,
                                                std::shared_ptr<transport::SourceClaim> claim);
  // The arrival stamp (transport/matcher.h) of the message an any-source receive with `tag`
  // would take now; nullopt when none waits.
  std::optional<std::uint64_t> earliest_unexpected(transport::Tag tag) const;
  // TCPTransportOptions::arrivals.
  std::shared_ptr<transport::ArrivalClock> arrivals() const;
  void abort(std::exception_ptr reason) override;
  std::vector<int> host_of_rank() const override { return host_of_rank_; }
  // Through the store: see Impl::find_stalled. Ranks as this transport numbers them.
  transport::StallReport find_stalled(int peer, std::string_view doing,
                                      std::chrono::milliseconds window) override;

  // `peers` are carried by another channel (the same-host ones, under a RoutedTransport, which
  // says so as it is made): never sent to here, so an any-source receive does not count them
  // among the peers that may still send. Before the first request.
  void carried_elsewhere(const std::vector<int>& peers);
  // Whether connections are made on first use (TCPConnect::kLazy).
  bool lazy() const;
  // The connections this rank has now: by peer, whether this rank made one to it (its write
  // side) and whether the peer made one here (its read side). For tests and diagnostics.
  struct Connections {
    std::vector<int> made;      // peers this rank has connected to
    std::vector<int> accepted;  // peers that have connected to this rank
  };
  Connections connections() const;

  struct Impl;

  // While it lives, a thread of this rank sleeps outside this transport (routed_transport.h: on
  // the shared-memory doorbell) until an any-source receive of this transport completes: it
  // counts as a sleeper on every connection, as a receive asleep in its own wait does, so that
  // the io thread watches the sockets and moves their bytes meanwhile.
  class AnySourceSleep {
   public:
    explicit AnySourceSleep(TCPTransport& tcp);
    ~AnySourceSleep();
    AnySourceSleep(const AnySourceSleep&) = delete;
    AnySourceSleep& operator=(const AnySourceSleep&) = delete;

   private:
    std::shared_ptr<Impl> impl_;
  };

 private:
  // The constructor's work past its argument checks; its errors go through `watch`.
  void set_up(Store* store, const std::string& group_name, const TCPTransportOptions& options,
              transport::Clock::time_point deadline, backends::SetupWatch& watch);
  void start_io();
  void stop_io();

  const int rank_;
  const int world_size_;
  std::vector<int> host_of_rank_;  // set in the constructor, then only read
  std::shared_ptr<Impl> impl_;
};

}  // namespace c10d::inline v1::gloo_like
