// ShmTransport's waiters (shm_transport_impl.h): a thread waiting on a request moves the bytes
// itself, polling while they keep moving (yielding where it has no core of its own), then
// sleeping on its segment's doorbell (a futex that every peer writing to it or freeing room for
// it rings), looking every kSleepSlice that each same-host peer's process still exists; and the
// error of a request that times out.
#include <poll.h>
#include <sched.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <vector>

#include "backends/gloo_like/shm_transport_impl.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "core/host.h"
#include "core/spin_wait.h"

namespace c10d::inline v1::gloo_like {

namespace {

using namespace shm_detail;

// A waiter keeps polling this long after bytes last moved when it has a core of its own
// (yielding the core between polls after core::kHotSpin: see poll_until).
constexpr auto kHotWindow = std::chrono::milliseconds(1);
// The longest a waiter sleeps on its doorbell before looking at its peers' processes.
constexpr auto kSleepSlice = std::chrono::milliseconds(100);

}  // namespace

// What this rank last heard from same-host peer `r` (transport.h: PeerActivity). Only reads.
transport::PeerActivity ShmTransport::Impl::heard_from(int r) const {
  std::lock_guard lock(mu);
  const Peer& p = peers[static_cast<std::size_t>(peer_index[static_cast<std::size_t>(r)])];
  transport::PeerActivity heard = p.heard;
  Clock::time_point at = p.heard_at;
  if (slots) {  // a shared-slot round that completed later: every peer took part
    const Clock::time_point round_at{
        Clock::duration(slots->heard_at.load(std::memory_order_acquire))};
    if (round_at.time_since_epoch().count() != 0 && (!heard.known || round_at > at)) {
      heard = {.known = true, .tag = slots->heard_tag.load(std::memory_order_relaxed)};
      at = round_at;
    }
  }
  if (heard.known) heard.ago = Clock::now() - at;
  return heard;
}

// A same-host peer whose process is gone, as an error; null when all are there. One that closed
// its transport first finished (as a TCP goodbye says): its going fails nothing. A process that
// exited is gone before its parent reaps it (it may never, while this rank waits: a launcher
// that waits for its children in order): its pidfd says so, where kill(pid, 0) would find the
// zombie there. One poll(2) looks at every peer.
std::exception_ptr ShmTransport::Impl::lost_peer() const {
  std::vector<pollfd> fds;
  for (const Peer& p : peers) {
    if (p.pidfd.valid()) fds.push_back({p.pidfd.get(), POLLIN, 0});
  }
  if (!fds.empty()) ::poll(fds.data(), fds.size(), 0);
  std::size_t polled = 0;
  for (const Peer& p : peers) {
    const bool ended =
        p.pidfd.valid() ? fds[polled++].revents != 0 : ::kill(p.pid, 0) != 0 && errno == ESRCH;
    if (p.header->closed.load(std::memory_order_acquire) != 0) continue;
    if (ended) {
      return C10D_ERROR(NetworkError, "rank {}: same-host peer rank {} (pid {}) is gone", rank,
                        p.rank, p.pid);
    }
  }
  return nullptr;
}

// Sleeps on this rank's doorbell until a peer rings it or `until`, unless progress is possible
// right now or `done` holds.
template <typename Done>
void ShmTransport::Impl::sleep(Done& done, Clock::time_point until) {
  const std::uint32_t bell = own_header->doorbell.load(std::memory_order_seq_cst);
  own_header->sleepers.fetch_add(1, std::memory_order_seq_cst);
  if (!progress() && !done()) {
    const auto left = std::chrono::duration_cast<std::chrono::microseconds>(until - Clock::now());
    if (left.count() > 0) transport::futex_wait(own_header->doorbell, bell, left);
  }
  own_header->sleepers.fetch_sub(1, std::memory_order_seq_cst);
}

void ShmTransport::Impl::wait(Op& op, Clock::time_point deadline) {
  if (!poll_until([&] { return op.done.load(std::memory_order_acquire); }, deadline)) {
    const auto now = Clock::now();
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(now - op.posted_at).count();
    if (op.any_source()) throw transport::any_source_timeout(op.describe(), op.tag, op.posted_at);
    const transport::PeerActivity heard = heard_from(op.peer);
    throw transport::PeerTimeout(
        core::with_location(__FILE__, __LINE__,
                            fmt::format("{} timed out: not done {} ms after posting; {}",
                                        op.describe(), ms, transport::heard_string(heard))),
        op.peer, heard);
  }
  if (op.error) std::rethrow_exception(op.error);
}

// Moves bytes, polling and then sleeping on the doorbell, until `done` holds (true) or the
// deadline passes (false). A template, so that a wait's done() (an atomic load) is inlined into
// every poll turn; ShmTransport::poll_until passes its std::function.
template <typename Done>
bool ShmTransport::Impl::poll_until(Done&& done, Clock::time_point deadline, bool move_bytes) {
  // Where processes share cores a waiter yields between polls at once (as core::hot_spin).
  const bool hot = core::has_own_core();
  const auto hot_window =
      hot ? std::chrono::microseconds(kHotWindow) : std::chrono::microseconds(0);
  // Read at the first look at the clock (16 polls in), not here: most waits end before it.
  Clock::time_point last_moved{};
  bool moved = false;
  for (unsigned polls = 1; !done(); ++polls) {
    const bool moved_now = move_bytes && progress();
    moved |= moved_now;
    if (done()) break;
    // A poll that only reads the peers' words leaves the line to the peer that writes it.
    if (!move_bytes) core::cpu_relax();
    // Where ranks outnumber cores, every poll that found nothing yields at once: the peer this
    // waits for may be waiting for this very core, and 15 more polls before a yield kept it
    // off (an 8-byte all_reduce of 4 ranks on 2 cores: 27 µs, 22 yielding at once).
    if (!hot && !moved_now) sched_yield();
    if (polls % 16 != 0) continue;
    auto now = Clock::now();
    if (moved || last_moved == Clock::time_point{}) last_moved = now;
    moved = false;
    if (now >= deadline) return false;
    const auto idle = now - last_moved;
    // Past the hot spin a poller yields between polls: the peer may be waiting to run on this
    // very core (another process took the other one, or the affinity says so), and a poller
    // that never yields holds it for a whole time slice. Two ranks pinned to one core took
    // 1.1 ms per 8-byte all_reduce that way.
    if (idle < core::hot_spin()) continue;
    if (idle < std::max<Clock::duration>(hot_window, core::spin_window())) {
      if (hot) sched_yield();  // else yielded above
      continue;
    }
    // When the peers were last looked at is the transport's, not this wait's: a caller that
    // waits in short slices (ring_all_reduce looks at its sends every 50 ms) must not put the
    // look off for ever.
    Clock::time_point next_liveness{Clock::duration(next_liveness_check.load())};
    if (now >= next_liveness) {
      next_liveness = now + kSleepSlice;
      next_liveness_check.store(next_liveness.time_since_epoch().count());
      if (auto lost = lost_peer()) {
        std::lock_guard lock(mu);
        abort_locked(lost);
        continue;  // the abort failed what `done` waits for, or it waits for more
      }
      if (std::lock_guard lock(mu); end_sends_to_closed_locked()) continue;
    }
    auto until = std::min(deadline, next_liveness);
    // A parked single-copy message is copied into a buffer after its grace by whoever polls.
    if (parked.load(std::memory_order_relaxed) > 0) until = std::min(until, now + kParkGrace);
    sleep(done, until);
    last_moved = Clock::now();  // poll hot again once woken
  }
  return true;
}

bool ShmTransport::Impl::poll_until(const std::function<bool()>& done, Clock::time_point deadline,
                                    bool move_bytes) {
  return poll_until<const std::function<bool()>&>(done, deadline, move_bytes);
}

bool ShmTransport::poll_until(const std::function<bool()>& done,
                              transport::Clock::time_point deadline) {
  C10D_CHECK(impl_->own_header != nullptr,
             "ShmTransport rank {}: poll_until needs a same-host peer (a doorbell to sleep on)",
             rank_);
  return impl_->poll_until(done, deadline);
}

void ShmTransport::wake() {
  if (impl_->own_header != nullptr) ring_doorbell(impl_->own_header);
}

bool ShmTransport::peers_open() const {
  for (const shm_detail::Peer& p : impl_->peers) {
    if (p.header->closed.load(std::memory_order_acquire) == 0) return true;
  }
  return false;
}

}  // namespace c10d::inline v1::gloo_like
