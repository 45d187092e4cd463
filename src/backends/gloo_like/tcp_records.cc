// The records a failing transport leaves in the store, and reads there: why it failed
// (publish_failure, under <group>/failure; the first writer wins), which a rank reads when a
// connection ends without a word (published_failure) and, on a lazy transport, while it has
// requests pending (watch_for_failures: it may have no connection to the ranks that failed);
// and whom a rank whose
// op timed out waits for (find_stalled, under <group>/stall/<set-up>/<rank>, and the job's
// c10d/stalls for the launcher). Best effort and bounded: a store that does not answer a short
// probe is not asked again.
#include <algorithm>
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"
#include "transport/stall_record.h"

namespace c10d::inline v1::gloo_like {

namespace {

// How long a failing transport waits for the store to answer (Impl::store_reachable).
constexpr std::chrono::milliseconds kFailureStoreTimeout{500};
// How long a rank whose connection ended without a word waits for a failure record, and how
// often it looks (end_unexplained).
constexpr std::chrono::milliseconds kRecordGrace{200};
constexpr std::chrono::milliseconds kRecordLook{10};
// StallReport::suspect when the ranks wait for each other.
constexpr int kWaitCycle = -1;

}  // namespace

// Io thread, outside mu_, before any connection closes: records why this rank fails, unless
// another rank recorded its cause first. A connection in the middle of a frame cannot carry
// the abort notice, so the peer on its other end reads the cause here (published_failure).
// Best effort: a store that cannot be reached leaves the peers to report a plain loss.
void TCPTransport::Impl::publish_failure(const AbortNotice& notice) {
  const std::string value = encode_failure_record({notice, rank});
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

// The failure another rank recorded (encode_failure_record), as this rank takes it: what the
// recording rank's abort notice would have made it say ("peer rank ... (rank <from> reports:
// ...)"), and whom it blames (heard_abort_notice); nullopt when there is none, the store does not
// answer, or the record is not one (anyone who can write the store can write it: logged, naming
// the key, and ignored). Not under mu_: store round trips.
std::optional<std::pair<std::string, tcp_detail::Blame>> TCPTransport::Impl::failure_record() {
  if (!store_reachable()) return std::nullopt;
  try {
    const std::string key = failure_key;
    if (!store->check(std::span<const std::string>(&key, 1))) return std::nullopt;
    const Bytes v = store->get(failure_key);
    const std::string text(v.begin(), v.end());
    const int world = static_cast<int>(conns.size());
    const std::optional<FailureRecord> record = decode_failure_record(text);
    if (record && record->from == rank) return std::nullopt;  // this rank's own: nothing new
    if (!record || record->from >= world) {
      C10D_LOG_WARN(
          "rank {}: the failure record in the store ('{}') is not \"<rank>\\n<another rank of "
          "the group>\\n<message>\" ({} bytes); ignored",
          rank, failure_key, text.size());
      return std::nullopt;
    }
    const AbortNotice heard = heard_abort_notice(record->notice, rank, world);
    return std::pair{describe_failure(heard, record->from), Blame{heard.lost_rank, heard.stalled}};
  } catch (const std::exception& e) {
    C10D_LOG_DEBUG("rank {}: no failure cause from the store: {}", rank, e.what());
    return std::nullopt;
  }
}

// The cause another rank published, for a connection to `peer` that ended without a word: the
// error to report and whom it blames, or none (the peer is then reported gone).
std::pair<std::exception_ptr, tcp_detail::Blame> TCPTransport::Impl::published_failure(int peer) {
  const auto record = failure_record();
  if (!record) return {nullptr, {}};
  return {C10D_ERROR(NetworkError, "rank {}: connection to peer rank {} closed; {}", rank, peer,
                     record->first),
          record->second};
}

// Any thread, outside mu_: the connection from `peer` ended without a word (`ec`), its reader
// gone if read_closed. Ranks that fail at once record their causes as they abort, racing the
// look for one, so while none is there (and the store answers, and this transport is not going
// down) the io thread looks again every kRecordLook until `until`, holding nothing meanwhile,
// before the peer is blamed. The connection's ops wait for that end.
void TCPTransport::Impl::end_unexplained(int peer, error_code ec) {
  end_unexplained_by(peer, ec, Clock::now() + kRecordGrace);
}

void TCPTransport::Impl::end_unexplained_by(int peer, error_code ec, Clock::time_point until) {
  auto [why, blame] = published_failure(peer);
  if (!why && !store_gone.load() && !closing.load() && Clock::now() < until) {
    auto timer = std::make_shared<asio::steady_timer>(io, kRecordLook);
    timer->async_wait([self = shared_from_this(), timer, peer, ec, until](error_code) {
      self->end_unexplained_by(peer, ec, until);
    });
    return;
  }
  std::lock_guard lock(mu_);
  const bool explained = why != nullptr;
  kill_locked(peer, PeerLoss{.why = std::move(why),
                             .ec = ec,
                             .blame = explained ? std::optional<Blame>(blame) : std::nullopt});
  // A receive the reader was filling is in no queue that kill_locked fails.
  Connection& c = conn(peer);
  if (c.read_closed.load() && c.target) {
    c.target->complete_locked(aborted ? aborted : c.dead);
    c.target.reset();
  }
}

// The failure watch of a lazy transport under fail_all_on_peer_loss (its own thread, started at
// set-up): every kFailureLook while this rank has requests pending, it looks for a failure
// record, so that a rank with no connection to the ranks that failed still learns of it within
// moments. Ends once the transport closes (or it found one, and aborted it).
void TCPTransport::Impl::watch_for_failures() {
  std::unique_lock lock(mu_);
  for (;;) {
    failure_watch_cv.wait_for(lock, kFailureLook, [&] { return closing.load(); });
    if (closing.load()) return;
    const bool pending = pending_locked();
    lock.unlock();
    if ((pending || (pending_elsewhere && pending_elsewhere())) && look_for_failure()) return;
    lock.lock();
  }
}

// Requires mu_. Whether a request of this transport waits: a receive posted, or a send queued.
bool TCPTransport::Impl::pending_locked() const {
  if (matcher.receives() > 0) return true;
  for (const auto& c : conns) {
    if (c && (!c->sends.empty() || c->writing)) return true;
  }
  return false;
}

// The failure watch: when another rank recorded a failure of this group, aborts this transport
// with it, naming the rank it blames, and returns true. One bounded call when there is none: a
// wait for the key of a millisecond. A store that takes long to answer that (its server gone)
// is not asked again.
bool TCPTransport::Impl::look_for_failure() {
  if (store_gone.load()) return false;
  const auto start = Clock::now();
  try {
    store->wait(std::span<const std::string>(&failure_key, 1), std::chrono::milliseconds(1));
  } catch (const TimeoutError&) {
    if (Clock::now() - start > kFailureStoreTimeout) store_gone.store(true);
    return false;
  } catch (const std::exception& e) {
    C10D_LOG_DEBUG("rank {}: the store does not answer: {}", rank, e.what());
    store_gone.store(true);
    return false;
  }
  const auto record = failure_record();
  if (!record) return false;
  std::lock_guard lock(mu_);
  abort_locked(C10D_ERROR(NetworkError, "rank {}: {}", rank, record->first), record->second);
  return true;
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
