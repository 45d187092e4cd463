// ProcessGroupMPI (process_group_mpi.h): construction, new_group and abort, and the op lifecycle's
// MPI side: the collectives a waiter runs (run_inline) and the runner's driver (start, progress,
// drop_in_flight) that starts and tests everything else on the worker.
#include "backends/mpi/process_group_mpi.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <numeric>
#include <span>
#include <thread>

#include "backends/common/flight_recorder.h"
#include "backends/common/inline_schedule.h"
#include "c10d/init.h"
#include "core/logging.h"

namespace c10d::inline v1 {
namespace mpi {

using backends::OpRunner;

namespace {

// The flight recorder's ring of the group on `comm`, named by the group's name, with its members'
// ranks in MPI_COMM_WORLD; null when the recorder is off.
std::shared_ptr<backends::TraceRing> trace_ring(MPI_Comm comm, int rank, int size,
                                                const std::string& name) {
  if (backends::trace::buffer_from_env() == 0) return nullptr;
  std::vector<int> local(static_cast<std::size_t>(size));
  std::vector<int> world(local.size(), -1);
  std::iota(local.begin(), local.end(), 0);
  {
    MpiLock lock;
    MPI_Group group = MPI_GROUP_NULL;
    MPI_Group all = MPI_GROUP_NULL;
    if (MPI_Comm_group(comm, &group) == MPI_SUCCESS &&
        MPI_Comm_group(MPI_COMM_WORLD, &all) == MPI_SUCCESS) {
      MPI_Group_translate_ranks(group, size, local.data(), all, world.data());
    }
    if (group != MPI_GROUP_NULL) MPI_Group_free(&group);
    if (all != MPI_GROUP_NULL) MPI_Group_free(&all);
  }
  // pg_id: a number the same on every member (FNV-1a of the name); the world's is 0.
  std::uint64_t id = 0;
  if (name != "world") {
    id = 0xcbf29ce484222325ULL;
    for (unsigned char c : name) id = (id ^ c) * 0x100000001b3ULL;
  }
  return backends::trace::make_ring({.name = name,
                                     .desc = name,
                                     .id = id,
                                     .ranks = std::move(world),
                                     .rank = rank,
                                     .backend = "mpi"});
}

}  // namespace

// The worker's watch of one blocking call, for the call's scope.
class ProcessGroupMPI::WatchGuard {
 public:
  WatchGuard(ProcessGroupMPI& g, Clock::time_point deadline, const Call& call) : g_(g) {
    bool wake = false;
    {
      std::lock_guard lock(g_.runner_.mutex());
      wake = g_.watch_locked(deadline, call);
    }
    if (wake) g_.watchdog_->wake();
  }
  ~WatchGuard() { g_.unwatch(); }
  WatchGuard(const WatchGuard&) = delete;
  WatchGuard& operator=(const WatchGuard&) = delete;

 private:
  ProcessGroupMPI& g_;
};

ProcessGroupMPI::ProcessGroupMPI(MPI_Comm comm, int rank, int size, Milliseconds timeout,
                                 std::string name)
    : ProcessGroup(rank, size),
      checks_(rank, size),
      timeout_(timeout),
      name_(std::move(name)),
      // Blocking collectives need MPI_THREAD_MULTIPLE: under the SERIALIZED lock one group's call
      // that waits for a late peer would stall every other group's MPI calls.
      comms_{.blocking = blocking_from_env() && !runtime().serialized},
      runner_(*this, {.name = fmt::format("MPI group {}", name_),
                      .rank = rank,
                      // Not under DETAIL: the worker compares fingerprints before each collective.
                      .inline_ops = !detail_ && backends::inline_from_env(),
                      .serial = false,
                      // A blocking call cannot be handed to the worker midway.
                      .waiter_waits_long = comms_.blocking,
                      .trace = trace_ring(comm, rank, size, name_)}) {
  C10D_CHECK(timeout_.count() > 0, "the group timeout must be positive, not {} ms",
             timeout_.count());
  {
    MpiLock lock;
    comms_.coll = comm;
    throw_if_error(MPI_Comm_set_errhandler(comms_.coll, MPI_ERRORS_RETURN),
                   "MPI_Comm_set_errhandler");
    throw_if_error(MPI_Comm_dup(comms_.coll, &comms_.p2p), "MPI_Comm_dup");
    throw_if_error(MPI_Comm_set_errhandler(comms_.p2p, MPI_ERRORS_RETURN),
                   "MPI_Comm_set_errhandler");
    throw_if_error(MPI_Comm_dup(comms_.coll, &control_), "MPI_Comm_dup");
    throw_if_error(MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  }
  if (comms_.blocking) {
    watchdog_.emplace(
        runner_.mutex(), [this] { return watched_.str(); },
        [this](const std::string& what) {
          // The job ends here: the trace is dumped first (C10D_TRACE_DIR).
          if (runner_.options().trace)
            backends::trace::group_failed(*runner_.options().trace, what);
          C10D_LOG_ERROR(
              "{} did not finish within its timeout inside a blocking MPI call, and MPI cannot "
              "cancel a collective: aborting the job (MPI_Abort). C10D_MPI_BLOCKING=0 runs "
              "collectives as nonblocking calls, whose timeouts throw TimeoutError instead",
              what);
          MPI_Abort(MPI_COMM_WORLD, 1);
        });
  }
  runner_.start_worker();
}

ProcessGroupMPI::~ProcessGroupMPI() {
  runner_.stop(std::make_exception_ptr(Error(
      fmt::format("rank {}: MPI group {} was destroyed with this op pending", rank(), name_))));
  // Pending operations on a freed communicator complete normally (MPI_Comm_free), so this is
  // safe even with abandoned collectives in flight.
  if (!mpi_finalized()) {
    MpiLock lock;
    for (MPI_Comm* c : {&comms_.coll, &comms_.p2p, &control_}) {
      if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
    }
  }
}

std::shared_ptr<ProcessGroup> ProcessGroupMPI::new_group(const std::vector<int>& ranks) {
  const bool member = checks_.new_group(ranks);
  std::lock_guard split_lock(split_mu_);  // one at a time on control_
  // Counted on every rank, members or not, so that the members agree on the tag below.
  const std::uint32_t index = next_child_++;
  // A non-member takes no part: MPI_Comm_create_group is collective over the new group's
  // members only (MPI_Comm_split and MPI_Comm_create are collective over this whole group, so a
  // rank outside the subgroup would wait for every other rank to get there).
  if (!member) return nullptr;
  MPI_Comm child = MPI_COMM_NULL;
  {
    MpiLock lock;
    MPI_Group all = MPI_GROUP_NULL;
    MPI_Group members = MPI_GROUP_NULL;
    int rc = MPI_Comm_group(control_, &all);
    // Position i of `ranks` becomes rank i of the subgroup.
    if (rc == MPI_SUCCESS) {
      rc = MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &members);
    }
    // Concurrent creations on control_ are told apart by their tags (the index, which every
    // member derives alike), bounded by MPI_TAG_UB's least guaranteed value.
    if (rc == MPI_SUCCESS) {
      rc = MPI_Comm_create_group(control_, members, static_cast<int>(index % 32768), &child);
    }
    if (members != MPI_GROUP_NULL) MPI_Group_free(&members);
    if (all != MPI_GROUP_NULL) MPI_Group_free(&all);
    if (rc != MPI_SUCCESS) {
      C10D_THROW(NetworkError, "rank {}: new_group of group {}: MPI_Comm_create_group failed: {}",
                 rank(), name_, mpi_error_text(rc));
    }
  }
  int child_rank = 0;
  int child_size = 0;
  {
    MpiLock lock;
    MPI_Comm_rank(child, &child_rank);
    MPI_Comm_size(child, &child_size);
  }
  return std::make_shared<ProcessGroupMPI>(child, child_rank, child_size, timeout_,
                                           fmt::format("{}.{}", name_, index));
}

void ProcessGroupMPI::abort() {
  fail(std::make_exception_ptr(
      Error(fmt::format("rank {}: MPI group {} was aborted", rank(), name_))));
}

std::shared_ptr<const core::WaitHook> ProcessGroupMPI::make_wait_hook() {
  return backends::shared_wait_hook(weak_from_this(), &ProcessGroupMPI::run_inline);
}

// ---- Collectives driven by their waiter ----

// Work::wait's hook for collectives (not under DETAIL, C10D_INLINE not 0; under
// MPI_THREAD_SERIALIZED too, each MPI call under MpiLock). When `w` is the next op to start,
// its waiter starts it and tests it in a tight loop on its own thread, as a program calling
// MPI itself would: no other thread has to wake, which on these machines costs more than a
// small collective. Otherwise the worker starts it now (OpRunner::take_for_waiter).
// The op keeps its deadline (TimeoutError, and the group fails, as on the worker); when the
// waiter's own deadline comes first, the worker adopts the op and the waiter returns.
void ProcessGroupMPI::run_inline(Work& w, core::WaitClock& clock) {
  bool wake_watchdog = false;
  // Only collectives' Works have this hook (the runner sets it), and they are OpWorks.
  const Call call = describe(static_cast<const OpWork&>(w));
  Clock::time_point deadline;
  auto taken = runner_.take_for_waiter(w, clock.timeout(), [&](backends::RunnerOp& op) {
    // A blocking call's deadline is only the watchdog's, which needs no exact clock.
    deadline = comms_.blocking ? DeadlineWatchdog::deadline_in(op.timeout())
                               : clock.start() + op.timeout();
    if (comms_.blocking) wake_watchdog = watch_locked(deadline, call);
  });
  if (!taken) return;
  Active a{std::static_pointer_cast<OpWork>(std::move(taken)), {}, deadline};
  if (wake_watchdog) watchdog_->wake();
  try {
    {
      MpiLock lock;
      a.started = a.work->start(comms_, call);
    }
    for (unsigned polls = 1; !test(a); ++polls) {
      if (polls % kClockEvery != 0) continue;
      const auto tested = Clock::now();
      if (tested >= a.deadline) C10D_THROW(TimeoutError, "{} timed out", call.str());
      if (tested >= clock.deadline()) {
        {
          std::lock_guard lock(runner_.mutex());
          adopted_ = std::move(a);
        }
        runner_.wake_worker();
        return;
      }
    }
  } catch (...) {
    const auto error = std::current_exception();
    unwatch();  // the call this thread watched failed (blocking) or is abandoned below
    auto work = a.work;
    if (!a.started.requests.empty()) give_up(a);
    fail(error);
    work->fail(error);
    return;
  }
  collective_done();
  a.work->succeed(a.started.finish());
}

// ---- The worker (OpRunner::Driver) ----

std::exception_ptr ProcessGroupMPI::start(OpRunner::OpPtr taken, Clock::time_point deadline) {
  auto op = std::static_pointer_cast<OpWork>(std::move(taken));
  try {
    const Call call = describe(*op);
    Active a{op, {}, deadline};
    if (op->collective() && detail_) {
      // Every rank sees the same fingerprints and skips this op alike, so the communicator's
      // collectives stay matched and the group stays usable.
      if (auto mismatch = check_fingerprints(op, a.deadline, call)) {
        op->fail_unstarted(mismatch);
        collective_done();
        return nullptr;
      }
    }
    {
      // A blocking call is watched while it runs here.
      std::optional<WatchGuard> watch;
      if (comms_.blocking && op->collective()) watch.emplace(*this, a.deadline, call);
      MpiLock lock;
      a.started = op->start(comms_, call);
    }
    if (op->collective()) {
      worker_coll_ = std::move(a);
    } else {
      worker_p2p_.push_back(std::move(a));
    }
    return nullptr;
  } catch (...) {
    // The runner fails the group, then this op (which keeps its closure: MPI may hold some of
    // its buffers).
    return std::current_exception();
  }
}

std::exception_ptr ProcessGroupMPI::progress(bool& progressed) {
  try {
    std::optional<Active>& coll = worker_coll_;
    if (coll && test(*coll)) {
      auto done = std::move(*coll);
      coll.reset();
      collective_done();
      done.work->succeed(done.started.finish());
      progressed = true;
    } else if (coll && Clock::now() >= coll->deadline) {
      C10D_THROW(TimeoutError, "{} timed out", describe(*coll->work).str());
    }
    for (auto it = worker_p2p_.begin(); it != worker_p2p_.end();) {
      if (test(*it)) {
        auto done = std::move(*it);
        it = worker_p2p_.erase(it);
        done.work->succeed(done.started.finish());
        progressed = true;
      } else if (Clock::now() >= it->deadline) {
        if (it->started.is_recv && it->started.source < 0) {
          C10D_THROW(TimeoutError, "{} timed out: no rank sent a message with tag {}",
                     describe(*it->work).str(), it->started.tag);
        }
        C10D_THROW(TimeoutError, "{} timed out", describe(*it->work).str());
      } else {
        ++it;
      }
    }
    return nullptr;
  } catch (...) {
    return std::current_exception();
  }
}

// Destroyed or failed: everything the worker holds fails with the reason (each op given up and
// dropped before its callbacks run, which may throw).
void ProcessGroupMPI::drop_in_flight(const std::exception_ptr& error) {
  if (worker_coll_) {
    auto work = worker_coll_->work;
    give_up(*worker_coll_);
    worker_coll_.reset();
    work->fail(error);
  }
  while (!worker_p2p_.empty()) {
    Active a = std::move(worker_p2p_.front());
    worker_p2p_.pop_front();
    auto work = a.work;
    give_up(a);
    work->fail(error);
  }
}

void ProcessGroupMPI::collect_locked() {
  if (adopted_) {
    worker_coll_ = std::move(adopted_);
    adopted_.reset();
  }
}

// C10D_DEBUG=DETAIL: all-gathers the fingerprints on the collectives' communicator (so they
// match in order with the collectives themselves) and compares them with rank 0's; the
// InvalidArgument naming the calls, or null. Times out like the op it guards.
std::exception_ptr ProcessGroupMPI::check_fingerprints(const std::shared_ptr<OpWork>& op,
                                                       Clock::time_point deadline,
                                                       const Call& call) {
  constexpr std::size_t kBytes = backends::Fingerprint::kBytes;
  const auto n = static_cast<std::size_t>(size());
  // This rank's fingerprint, then every rank's: one buffer, kept by the op (Started::keep).
  Tensor buffer = scratch_bytes(kBytes * (n + 1));
  const auto mine = op->fingerprint.encode();
  std::memcpy(bytes(buffer), mine.data(), kBytes);
  const std::span<const std::byte> all(reinterpret_cast<const std::byte*>(bytes(buffer)) + kBytes,
                                       kBytes * n);
  Active a{op, {}, deadline};
  a.started.keep = {buffer};
  {
    MpiLock lock;
    check(MPI_Iallgather(bytes(buffer), static_cast<int>(kBytes), MPI_BYTE, bytes(buffer) + kBytes,
                         static_cast<int>(kBytes), MPI_BYTE, comms_.coll, a.started.add()),
          call, "MPI_Iallgather (C10D_DEBUG=DETAIL fingerprints)");
  }
  while (!test(a)) {
    if (Clock::now() >= deadline) {
      give_up(a);
      C10D_THROW(TimeoutError, "{}: timed out comparing fingerprints (C10D_DEBUG=DETAIL)",
                 call.str());
    }
    std::this_thread::yield();
  }
  return backends::fingerprint_mismatch(all, size(), name_);
}

}  // namespace mpi

std::shared_ptr<ProcessGroup> make_process_group_mpi(Milliseconds timeout) {
  mpi::ensure_runtime();
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  {
    mpi::MpiLock lock;
    mpi::throw_if_error(MPI_Comm_dup(MPI_COMM_WORLD, &comm),
                        "make_process_group_mpi: MPI_Comm_dup");
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  return std::make_shared<mpi::ProcessGroupMPI>(comm, rank, size, timeout, "world");
}

}  // namespace c10d::inline v1
