// The transport's failures: a lost peer (kill_locked), an abort with its last frame (an abort
// notice naming the first cause, or a goodbye), and the records a failing rank leaves in the
// store for its peers: why it failed (publish_failure), and whom it waits for (find_stalled).
#include <sys/socket.h>

#include <algorithm>
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"
#include "transport/stall_record.h"

namespace c10d::inline v1::gloo_like {
namespace asio = boost::asio;
using transport::Clock;

namespace {

// How long a failing transport waits for the store to answer (Impl::store_reachable).
constexpr std::chrono::milliseconds kFailureStoreTimeout{500};
// StallReport::suspect when the ranks wait for each other.
constexpr int kWaitCycle = -1;

}  // namespace

using core::what_of;
using tcp_detail::PeerEnd;

// Requires mu_. Fails the queued ops of `c` (peer `peer`). Messages that arrived whole stay
// receivable unless `arrived` drops them: a peer that sent and then closed its end has still
// sent them. Any-source receives fail only when no peer is left (fail_any_source_locked).
void TCPTransport::Impl::fail_queued_locked(Connection& c, int peer, const std::exception_ptr& e,
                                            ArrivedMessages arrived) {
  if (c.failed_write) {
    c.failed_write->complete_locked(e);
    c.failed_write.reset();
  }
  // A send a poller is writing (progress_sends) stays: the poller still reads its buffer, and
  // completes it when its write returns.
  std::erase_if(c.sends, [&](const std::shared_ptr<Op>& op) {
    if (op->in_flight) return false;
    op->complete_locked(e);
    return true;
  });
  matcher.take_receives(peer, [&](const std::shared_ptr<Op>& op) { op->complete_locked(e); });
  if (c.claimed) {
    if (!c.claimed->waiter->done) c.claimed->waiter->complete_locked(e);
    release_locked(*c.claimed);
    c.claimed.reset();
  }
  matcher.erase_unexpected_if(peer, [&](const std::shared_ptr<Unexpected>& u) {
    const bool drop = arrived == ArrivedMessages::kDrop || !u->complete;
    if (drop) release_locked(*u);
    return drop;
  });
}

// Requires mu_; io thread. The connection to `peer` broke with the socket error `ec`.
void TCPTransport::Impl::kill_locked(int peer, const error_code& ec) {
  kill_locked(peer, PeerLoss{.ec = ec});
}

// Requires mu_; io thread. Marks the connection to `peer` dead with `loss.why` (or, when null, a
// loss caused by `loss.ec`), closes it and fails its queued ops. A failure (a loss or an abort
// frame, not a goodbye) aborts the whole transport when fail_all_on_peer_loss is set.
// `loss.blame` is whom this rank's abort notice will name, passed on from the notice or record
// that explained the loss (none: `peer` itself, gone).
void TCPTransport::Impl::kill_locked(int peer, PeerLoss loss) {
  Connection& c = conn(peer);
  // Shut down, never closed before the transport goes: another thread may be reading the fd,
  // and a closed fd number can be reused.
  ::shutdown(c.read_fd, SHUT_RDWR);
  ::shutdown(c.write_fd, SHUT_RDWR);
  if (!c.dead) {
    c.dead = loss.why ? std::move(loss.why)
                      : C10D_ERROR(NetworkError, "rank {}: connection to peer rank {} lost: {}",
                                   rank, peer, loss.ec.message());
    if (loss.end == PeerEnd::kFailure && fail_all_on_peer_loss && !aborted) {
      abort_locked(c.dead, loss.blame.value_or(Blame::gone(peer)));
      return;
    }
  }
  fail_queued_locked(c, peer, aborted ? aborted : c.dead,
                     aborted ? ArrivedMessages::kDrop : ArrivedMessages::kKeep);
  fail_any_source_locked(aborted);
}

// Requires mu_; io thread. A write to `peer` failed: stop writing, let the read loop find the
// cause within a second, and kill the connection with `ec` if it has not by then.
void TCPTransport::Impl::defer_write_failure_locked(int peer, std::shared_ptr<Op> op,
                                                    const error_code& ec) {
  Connection& c = conn(peer);
  c.failed_write = std::move(op);
  ::shutdown(c.write_fd, SHUT_WR);
  auto timer = std::make_shared<asio::steady_timer>(io, std::chrono::seconds(1));
  timer->async_wait([self = shared_from_this(), timer, peer, ec](error_code) {
    std::lock_guard lock(self->mu_);
    self->kill_locked(peer, ec);
  });
}

// What a rank that hears `notice` from `peer` reports, after its own "rank R: ".
std::string TCPTransport::Impl::describe_failure(const AbortNotice& notice, int peer) {
  const std::string cause =
      notice.lost_rank == kNoLostRank ? fmt::format("peer rank {} aborted", peer)
      : notice.stalled ? fmt::format("peer rank {} made no progress", notice.lost_rank)
                       : fmt::format("peer rank {} is gone", notice.lost_rank);
  return fmt::format("{} (rank {} reports: {})", cause, peer, notice.message);
}

// Io thread, as a transport goes down: `frame` (a goodbye or an abort notice, tcp_wire.h) on
// every connection that is idle, then close. A connection mid-write just closes; its peer then
// sees a loss.
void TCPTransport::Impl::send_last_frame_and_close(const std::vector<std::byte>& frame) {
  {
    std::lock_guard lock(mu_);
    for (auto& c : conns) {
      if (!c || c->writing || c->dead) continue;
      // One attempt: a frame the socket does not take whole arrives cut, as a loss.
      [[maybe_unused]] const ssize_t n =
          ::send(c->write_fd, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    close_all();  // under mu_: a thread writing directly (submit) never sees a closed fd
  }
}

// An exception escaped `where` (a handler of the io thread, or a read): abort the transport
// with a NetworkError that carries it.
void TCPTransport::Impl::fail_on_exception(const std::exception_ptr& e, const std::string& where) {
  const std::string what = what_of(e);
  C10D_LOG_ERROR("rank {}: {} of the TCP transport failed: {}", rank, where, what);
  std::lock_guard lock(mu_);
  abort_locked(
      C10D_ERROR(NetworkError, "rank {}: {} of the TCP transport failed: {}", rank, where, what));
}

void TCPTransport::Impl::close_all() {  // under mu_; see kill_locked for why nothing is closed
  for (auto& c : conns) {
    if (!c) continue;
    ::shutdown(c->read_fd, SHUT_RDWR);
    ::shutdown(c->write_fd, SHUT_RDWR);
  }
}

void TCPTransport::Impl::abort(std::exception_ptr reason, LastFrame last) {
  // An op that timed out names the rank it found stalled (PeerTimeout): the notice passes that
  // on, so the others blame it rather than this rank, which only gave up waiting.
  Blame blame;
  try {
    if (reason) std::rethrow_exception(reason);
  } catch (const transport::PeerTimeout& t) {
    if (t.peer() >= 0) blame = Blame::made_no_progress(t.peer());
  } catch (...) {
  }
  std::lock_guard lock(mu_);
  abort_locked(std::move(reason), blame, last);
}

// Fails everything with `reason` and closes every connection after a last frame: a goodbye, or
// an abort notice naming `blame` (the peer whose loss caused this, or the one that made no
// progress, or no one) so that the other ranks learn the first cause rather than this rank's
// reaction to it.
void TCPTransport::Impl::abort_locked(std::exception_ptr reason, Blame blame, LastFrame last) {
  if (aborted) return;
  aborted = std::move(reason);
  if (on_abort) {
    // A callback that throws must not leave the abort half done (or unwind the io thread).
    try {
      on_abort(aborted);
    } catch (...) {
      C10D_LOG_ERROR("rank {}: TCPTransportOptions::on_abort threw: {}", rank,
                     what_of(std::current_exception()));
    }
  }
  for (std::size_t p = 0; p < conns.size(); ++p) {
    if (conns[p]) {
      fail_queued_locked(*conns[p], static_cast<int>(p), aborted, ArrivedMessages::kDrop);
    }
  }
  fail_any_source_locked(aborted);
  std::vector<std::byte> frame;
  std::optional<AbortNotice> notice;
  if (last == LastFrame::kGoodbye) {
    const auto goodbye = encode_frame_header(kGoodbyeTag, 0);
    frame.assign(goodbye.begin(), goodbye.end());
  } else {
    notice = AbortNotice{blame.rank, what_of(aborted), blame.stalled};
    frame = encode_abort_notice(*notice);
  }
  asio::post(io, [self = shared_from_this(), frame = std::move(frame), notice] {
    if (notice) self->publish_failure(*notice);
    self->send_last_frame_and_close(frame);
  });
}

// Io thread, outside mu_, before any connection closes: records why this rank fails, unless
// another rank recorded its cause first. A connection in the middle of a frame cannot carry
// the abort notice, so the peer on its other end reads the cause here (published_failure).
// Best effort: a store that cannot be reached leaves the peers to report a plain loss.
void TCPTransport::Impl::publish_failure(const AbortNotice& notice) {
  const std::string value =
      encode_failure_record({notice.lost_rank, describe_failure(notice, rank), notice.stalled});
  const std::span<const std::uint8_t> bytes(reinterpret_cast<const std::uint8_t*>(value.data()),
                                            value.size());
  if (!store_reachable()) return;
  try {
    store->compare_set(failure_key, {}, bytes);
  } catch (const std::exception& e) {
    C10D_LOG_WARN("rank {}: could not record the failure in the store: {}", rank, e.what());
  }
}

// Whether the store answers within kFailureStoreTimeout: a bounded wait for a key this rank
// set at setup. The store's own calls reconnect until the store's timeout (minutes) when the
// server is gone (it may have lived in a rank that died), which must not hold up a failing
// transport; after one miss the store is not asked again.
bool TCPTransport::Impl::store_reachable() {
  if (store_gone.load()) return false;
  try {
    store->wait(std::span<const std::string>(&own_key, 1), kFailureStoreTimeout);
    return true;
  } catch (const std::exception& e) {
    C10D_LOG_DEBUG("rank {}: the store does not answer: {}", rank, e.what());
    store_gone.store(true);
    return false;
  }
}

// The cause another rank published (encode_failure_record): the error to report and whom
// it blames, or none. Not under mu_: a store round trip, only when a connection has ended. A
// record that is not one (anyone who can write the store can write it) is logged, naming the
// key, and ignored: the peer is then reported gone.
std::pair<std::exception_ptr, tcp_detail::Blame> TCPTransport::Impl::published_failure(int peer) {
  if (!store_reachable()) return {nullptr, {}};
  try {
    const std::string key = failure_key;
    if (!store->check(std::span<const std::string>(&key, 1))) return {nullptr, {}};
    const Bytes v = store->get(failure_key);
    const std::string text(v.begin(), v.end());
    const std::optional<AbortNotice> record = decode_failure_record(text);
    if (!record) {
      C10D_LOG_WARN(
          "rank {}: the failure record in the store ('{}') is not \"<rank>\\n<message>\" "
          "({} bytes); ignored",
          rank, failure_key, text.size());
      return {nullptr, {}};
    }
    const AbortNotice heard = heard_abort_notice(*record, rank, static_cast<int>(conns.size()));
    return {C10D_ERROR(NetworkError, "rank {}: connection to peer rank {} closed; {}", rank, peer,
                       heard.message),
            Blame{heard.lost_rank, heard.stalled}};
  } catch (const std::exception& e) {
    C10D_LOG_DEBUG("rank {}: no failure cause from the store: {}", rank, e.what());
    return {nullptr, {}};
  }
}

transport::PeerActivity TCPTransport::Impl::heard_from(int peer) const {
  const Connection& c = conn(peer);
  const Clock::rep at = c.heard_at.load(std::memory_order_relaxed);
  if (at == 0) return {};
  return {true, Clock::now() - Clock::time_point(Clock::duration(at)),
          c.heard_tag.load(std::memory_order_relaxed)};
}

// Transport::find_stalled over the store: this rank's record under stall_prefix + rank is
// "<awaited>\n<doing>"; the chain is followed from `peer` until a rank without a record (the
// stalled one) or a rank met before (a cycle). The outcome is also appended to the job's
// stall records (transport/stall_record.h), for the launcher. Best effort: a store that does
// not answer (or fails on the way) ends the chain where it stands, and the report says so.
transport::StallReport TCPTransport::Impl::find_stalled(int peer, std::string_view doing,
                                                        std::chrono::milliseconds window) {
  transport::StallReport report{peer, {}};
  if (stall_prefix.empty()) return report;
  if (!store_reachable()) {
    report.store_silent = true;
    return report;
  }
  const auto key = [&](int r) { return stall_prefix + std::to_string(r); };
  int at = peer;
  try {
    store->set(key(rank), fmt::format("{}\n{}", peer, doing));
    const auto until = Clock::now() + window;
    std::vector<char> seen(conns.size(), 0);
    seen[static_cast<std::size_t>(rank)] = 1;
    for (;;) {
      if (at < 0 || at >= static_cast<int>(conns.size()) || seen[static_cast<std::size_t>(at)]) {
        report.suspect = kWaitCycle;
        break;
      }
      seen[static_cast<std::size_t>(at)] = 1;
      report.suspect = at;
      const std::string k = key(at);
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(until - Clock::now());
      try {
        store->wait(std::span<const std::string>(&k, 1),
                    std::max(left, std::chrono::milliseconds(1)));
      } catch (const TimeoutError&) {
        break;  // `at` waits for no one known: the stalled rank
      }
      const Bytes v = store->get(k);
      const std::string text(v.begin(), v.end());
      const auto nl = text.find('\n');
      const auto awaits = core::parse_int(std::string_view(text).substr(0, nl), 0,
                                          static_cast<std::int64_t>(conns.size()) - 1);
      if (!awaits.value) {
        // Not a record find_stalled writes: `at` waits, for whom is not known.
        C10D_LOG_WARN(
            "rank {}: the stall record '{}' names no rank of the group: {}; the chain "
            "ends at rank {}",
            rank, k, awaits.error, at);
        break;
      }
      report.chain.push_back({at, static_cast<int>(*awaits.value),
                              nl == std::string::npos
                                  ? std::string()
                                  : transport::stall_doing(std::string_view(text).substr(nl + 1))});
      at = static_cast<int>(*awaits.value);
    }
  } catch (const std::exception& e) {
    // The store failed (its server gone: node 0's launcher ends with its own ranks, while the
    // other nodes' ranks are still here). Its next call would reconnect until the store's own
    // timeout, minutes maybe: it is not asked again.
    C10D_LOG_DEBUG("rank {}: following the ranks' waits in the store stopped: {}", rank, e.what());
    store_gone.store(true);
    report.store_silent = true;
  }
  if (store_gone.load()) return report;
  try {
    const std::string line =
        transport::encode_stall_record({rank, peer, report.suspect, std::string(doing)});
    store->append(transport::kStallRecordsKey,
                  std::span<const std::uint8_t>(reinterpret_cast<const std::uint8_t*>(line.data()),
                                                line.size()));
  } catch (const std::exception& e) {
    C10D_LOG_DEBUG("rank {}: could not record the stall for the launcher: {}", rank, e.what());
  }
  return report;
}

}  // namespace c10d::inline v1::gloo_like
