// Requests and the wait policy. A thread waiting on a request moves the bytes itself, as an MPI
// progress loop does: it polls (writes queued sends, reads its peer's socket), for longer when
// its message is small (kLongPollBytes); then a large transfer's waiter drives it in poll(2)
// (drive_until) and a small one's sleeps on its op's condition variable, while the io thread
// watches the sockets nobody polls (tcp_watch.cc).
#include <poll.h>

#include <algorithm>
#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"
#include "core/host.h"
#include "core/spin_wait.h"

namespace c10d::inline v1::gloo_like {
using tcp_detail::Op;

namespace {

// A waiter for a message up to kLongPollBytes polls kLongPollScale times the usual spin window
// (core/spin_wait.h) before it sleeps: it waits mostly for its peer to reach the same step, which
// on shared cores is often later than 50 µs, and a sleeping waiter costs a wake-up per message.
// A waiter for a larger message polls the usual window (spinning longer made a 16 MiB all_reduce
// slower: 18.8 against 16.7 ms with a 1 ms window), then drives the transfer itself, sleeping in
// poll(2) on its sockets (Impl::drive_until): 16 MiB all_reduce of 2 ranks at 2.05-2.08 GB/s
// busbw against 1.48-1.76 when the io thread moved the bytes and woke the waiter.
constexpr std::size_t kLongPollBytes = 64 << 10;
constexpr int kLongPollScale = 20;  // 1 ms by default
// How long a waiter driving a large transfer itself sleeps in poll(2) at most before it looks
// whether its op completed some other way (Impl::drive_until).
constexpr std::chrono::milliseconds kDriveSlice{1};
// Within kDriveSpin of starting to drive or of a socket it polls becoming ready, a waiter that
// has a core of its own (core/host.h) looks again without sleeping: a transfer under way delivers a
// chunk every few µs, and sleeping in poll(2) costs a wake-up per chunk (perf: a 1 MiB all_reduce
// of 2 ranks spent 28% of its time switching tasks). Where processes outnumber cores it sleeps as
// before: its spinning would take the core from the rank it waits for (docs/benchmarks.md).
constexpr std::chrono::milliseconds kDriveSpin{1};

}  // namespace

// A polling waiter's drain: poll(2) first, which looks at the socket without taking its lock.
// recv takes it even on an empty socket, and a waiter spinning on recv makes the kernel,
// delivering the peer's bytes into that socket, spin for the lock (measured in
// docs/benchmarks.md).
void TCPTransport::Impl::poll_drain(int peer) {
  pollfd p{conn(peer).read_fd.load(std::memory_order_acquire), POLLIN, 0};
  if (p.fd < 0 || ::poll(&p, 1, 0) == 0) return;  // empty: drain would find nothing either
  try_drain(peer);
}

// A polling waiter of an any-source receive: one poll(2) over the sockets that may still
// bring it a message, then a drain of the readable ones only, instead of a system call per
// peer per turn. Left out: a socket whose stream ended (read_closed), and one whose message in
// front is parked: that message is for another receive (the any-source one would have taken
// it), and it comes in when that receive is posted (submit_receive_locked) or its grace ends
// (a timer of the io thread), so polling it would only find it ready at every turn and its
// drain take mu_ for nothing. `fds` and `peers`: the caller's, reused across turns.
void TCPTransport::Impl::poll_drain_any(std::vector<pollfd>& fds, std::vector<int>& peers) {
  fds.clear();
  peers.clear();
  for (std::size_t p = 0; p < conns.size(); ++p) {
    const Connection* c = conns[p].get();
    const int fd = c == nullptr ? -1 : c->read_fd.load(std::memory_order_acquire);
    if (fd < 0 || c->read_closed.load() || c->parked.load(std::memory_order_relaxed)) continue;
    fds.push_back({fd, POLLIN, 0});
    peers.push_back(static_cast<int>(p));
  }
  if (fds.empty() || ::poll(fds.data(), fds.size(), 0) <= 0) return;
  for (std::size_t i = 0; i < fds.size(); ++i) {
    if (fds[i].revents != 0) try_drain(peers[i]);
  }
}

// Whether `op` waits for bytes from `peer`: a receive from it, or an any-source receive.
bool TCPTransport::Impl::reads_from(const Op& op, int peer) {
  return !op.is_send && (op.peer == peer || op.any_source());
}
// fn(peer) for each peer whose socket `op` waits to read (reads_from).
template <typename Fn>
void TCPTransport::Impl::for_each_source(const Op& op, Fn&& fn) {
  if (op.is_send) return;
  if (!op.any_source()) {
    fn(op.peer);
    return;
  }
  for (std::size_t p = 0; p < conns.size(); ++p) {
    if (conns[p]) fn(static_cast<int>(p));
  }
}

// A waiter for a large message after its spin window (TCPRequest::wait): it goes on moving
// the bytes itself, sleeping in poll(2) on exactly the sockets it needs: its peer's for a
// receive (unless the message in front there is parked for another receive), and every
// connection with queued sends that nobody is writing. Readiness wakes this thread directly,
// instead of the io thread (epoll), which then completes the op and wakes this thread through
// the op's condition variable: two wake-ups per segment on cores both ranks keep busy. The
// poll lasts at most kDriveSlice, so a completion by another thread (or a failure) is seen
// soon. The caller counts as a progressor and, for a receive, as a poller of the connection,
// so the io thread stays away meanwhile. True once `op` is done; false at the deadline.
bool TCPTransport::Impl::drive_until(const Op& op, Clock::time_point deadline) {
  std::vector<pollfd> fds;
  auto last_ready = Clock::now();
  for (;;) {
    if (op.done.load(std::memory_order_acquire)) return true;
    progress_sends();
    for_each_source(op, [&](int peer) { try_drain(peer); });
    if (op.done.load(std::memory_order_acquire)) return true;
    const auto now = Clock::now();
    if (now >= deadline) return false;
    fds.clear();
    {
      std::lock_guard lock(mu_);
      // Aborted: abort_locked fails the op, which the next turn sees; meanwhile just sleep.
      for (std::size_t p = 0; p < conns.size() && !aborted; ++p) {
        Connection* c = conns[p].get();
        if (c == nullptr || c->dead) continue;
        const int in = c->read_fd.load(std::memory_order_acquire);
        if (in >= 0 && reads_from(op, static_cast<int>(p)) && !c->parked) {
          fds.push_back({in, POLLIN, 0});
        }
        if (c->write_side == tcp_detail::WriteSide::kOpen && !c->writing && !c->sends.empty()) {
          fds.push_back({c->write_fd.load(), POLLOUT, 0});
        }
      }
    }
    const bool hot = core::has_own_core() && now - last_ready < kDriveSpin;
    const auto slice = std::min<Clock::duration>(deadline - now, kDriveSlice);
    const int ms =
        hot ? 0 : static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(slice).count());
    if (::poll(fds.data(), fds.size(), ms) > 0) last_ready = Clock::now();
  }
}

// A request goes: its op leaves its queue, or, in flight, is waited for (its buffer is read or
// written until then).
void TCPTransport::Impl::cancel(const std::shared_ptr<Op>& op) {
  std::unique_lock lock(mu_);
  if (op->done) return;
  if (op->in_flight) {  // a writer (io thread or poller) holds its buffer: wait for the end
    op->cv.wait(lock, [&] { return op->done.load(); });
    return;
  }
  if (op->is_send) {
    std::erase(conn(op->peer).sends, op);
  } else {
    matcher.cancel(op->peer, op);
  }
}

namespace {

class TCPRequest final : public transport::Request {
 public:
  TCPRequest(std::shared_ptr<TCPTransport::Impl> impl, std::shared_ptr<Op> op)
      : impl_(std::move(impl)), op_(std::move(op)) {}
  ~TCPRequest() override { impl_->cancel(op_); }
  bool test() override {
    if (!op_->done.load(std::memory_order_acquire)) {
      if (op_->any_source()) {
        impl_->poll_drain_any(fds_, fd_peers_);
      } else if (!op_->is_send) {
        impl_->try_drain(op_->peer);
      }
    }
    if (!op_->done.load(std::memory_order_acquire)) return false;
    if (op_->error) std::rethrow_exception(op_->error);
    return true;
  }
  int source() const override { return op_->source.load(std::memory_order_acquire); }
  transport::PeerActivity heard() const override {
    return op_->any_source() ? transport::PeerActivity{} : impl_->heard_from(op_->peer);
  }
  void wait(Clock::time_point deadline) override {
    // Poll first: write queued sends and read the sockets of the peers it waits for ourselves
    // (see drain and progress_sends). Before sleeping, make sure the io thread watches them
    // again.
    TCPTransport::Impl& state = *impl_;
    state.progressors.fetch_add(1);
    state.for_each_source(*op_, [&](int peer) {
      Connection& c = state.conn(peer);
      c.pollers.fetch_add(1);
      c.polls.fetch_add(1, std::memory_order_relaxed);
    });
    bool done = core::spin_until(
        [&] {
          if (op_->done.load(std::memory_order_acquire)) return true;
          state.progress_sends();
          if (op_->any_source()) {
            state.poll_drain_any(fds_, fd_peers_);
          } else if (!op_->is_send) {
            state.poll_drain(op_->peer);
          }
          return op_->done.load(std::memory_order_acquire);
        },
        deadline,
        op_->bytes() <= kLongPollBytes ? kLongPollScale * core::spin_window()
                                       : core::spin_window());
    if (!done && op_->bytes() > kLongPollBytes) done = state.drive_until(*op_, deadline);
    // A receive about to sleep counts itself before it stops polling, so that the last poller
    // to leave, whose own op may be done, has the io thread watch for it.
    const bool sleeps = !op_->is_send && !done;
    state.for_each_source(*op_, [&](int peer) {
      Connection& c = state.conn(peer);
      if (sleeps) c.sleepers.fetch_add(1);
      if (c.pollers.fetch_sub(1) == 1 && c.sleepers.load() > 0) {
        asio::post(state.io, [impl = impl_, peer] { impl->watch_for_sleeper(peer); });
      }
    });
    state.leave_progress();
    std::unique_lock lock(state.mu_);
    const bool completed = op_->cv.wait_until(lock, deadline, [&] { return op_->done.load(); });
    if (sleeps) {
      state.for_each_source(*op_, [&](int peer) { state.conn(peer).sleepers.fetch_sub(1); });
    }
    if (!completed) {
      const auto ms =
          std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - op_->posted_at)
              .count();
      if (op_->any_source()) {
        throw transport::any_source_timeout(op_->describe(), op_->tag, op_->posted_at);
      }
      const transport::PeerActivity heard = state.heard_from(op_->peer);
      lock.unlock();
      throw transport::PeerTimeout(
          core::with_location(
              __FILE__, __LINE__,
              fmt::format("{} timed out: not done {} ms after posting; {}{}", op_->describe(), ms,
                          transport::heard_string(heard), state.connection_note(op_->peer))),
          op_->peer, heard);
    }
    lock.unlock();
    if (op_->error) std::rethrow_exception(op_->error);
  }

 private:
  std::shared_ptr<TCPTransport::Impl> impl_;
  std::shared_ptr<Op> op_;
  // An any-source receive's poll(2) set (Impl::poll_drain_any), kept across turns.
  std::vector<pollfd> fds_;
  std::vector<int> fd_peers_;
};

}  // namespace

namespace tcp_detail {

std::unique_ptr<transport::Request> make_request(std::shared_ptr<TCPTransport::Impl> impl,
                                                 std::shared_ptr<Op> op) {
  return std::make_unique<TCPRequest>(std::move(impl), std::move(op));
}

}  // namespace tcp_detail

}  // namespace c10d::inline v1::gloo_like
