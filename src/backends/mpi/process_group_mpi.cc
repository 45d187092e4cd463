// ProcessGroupMPI: the ProcessGroup of process_group.h mapped straight onto Open MPI calls.
// The factory make_process_group_mpi() is declared in include/c10d/init.h.
//
// Contract, as the TCP group (backends/common/transport_process_group.cc): each call checks
// its arguments on the caller's thread (InvalidArgument at once, nothing queued), takes the
// group's next sequence number (collectives and point-to-point count apart) and queues the op
// (an OpWork: the Work the caller gets, holding the closure that starts the op; one allocation);
// ops start in issue order, at most one collective in flight per group. Who runs a collective:
// the thread that waits for it, when it is next to start (run_inline: no thread hand-off, which
// costs more than a small collective here), or else the group's worker thread; while callers
// wait at once the worker holds a collective back 1 ms to leave it to them
// (backends/common/inline_schedule.h, shared with the TCP group).
//
// How a collective is called (Comms::blocking, C10D_MPI_BLOCKING):
//  - blocking (the default): the blocking MPI function (MPI_Allreduce, MPI_Bcast, ...), which is
//    what raw MPI programs call and Open MPI's fastest path (its nonblocking collectives, libnbc,
//    are a schedule interpreter: measured up to 1.8x slower over TCP, docs/benchmarks.md). A
//    waiter runs one only if it waits as long as the op's timeout (a blocking call cannot be
//    handed over midway); other waiters leave it to the worker and may time out themselves
//    (TimeoutError) while it runs. MPI cannot cancel a collective, so a call still running at
//    the op's deadline ends the job: a DeadlineWatchdog logs the op and calls MPI_Abort, and
//    mpirun stops every rank. abort() fails the group's queued ops but cannot stop a call in
//    MPI; the destructor then waits for it (at most until its deadline).
//  - nonblocking (C10D_MPI_BLOCKING=0): the nonblocking twin (MPI_Iallreduce, ...) tested until
//    it completes or its deadline passes, so a timeout or abort() fails the op (TimeoutError)
//    and the group instead of the job; a waiter whose own deadline comes first hands the started
//    op to the worker (adopted_).
// Every rank must choose alike (MPI never matches a blocking collective with a nonblocking one);
// the thread that calls never matters. Under MPI_THREAD_SERIALIZED collectives are nonblocking.
// send/recv post MPI_Isend/MPI_Irecv in issue order on the group's own point-to-point
// communicator (the user tag is the MPI tag) and are tested alongside: a recv waiting for a peer
// never blocks the collectives behind it. recv_any_source is MPI_Irecv from MPI_ANY_SOURCE; its
// Work's source_rank() is the completed status's MPI_SOURCE (MPI's matching is the one
// process_group.h describes).
//
// Reductions: every reduce op is a user-defined, commutative MPI_Op over per-dtype datatypes
// that calls algorithms::reduce_into, so the arithmetic is exactly the TCP backend's (integer
// wraparound, NaN propagation, bool as logical ops, float16/bfloat16 rounding). MPI's own ops
// differ in places: Open MPI 4.1's AVX sum of MPI_INT8_T and MPI_UINT8_T saturates (200 + 100
// gives 255: the conformance suite caught it when MPI_SUM was tried), and for float32 sums they
// measured no faster (docs/benchmarks.md). AVG is a SUM followed by
// algorithms::finish_average; PREMUL_SUM scales this rank's contribution with
// algorithms::premul_in_place (on a scratch copy when the input must stay unchanged) and sums.
//
// Communicators: each group owns three duplicates of its communicator: collectives, point-to-
// point, and control (MPI_Comm_split for new_group, called on the caller's thread, so it never
// interleaves with the worker's collectives). Every communicator has MPI_ERRORS_RETURN; an
// error code becomes a NetworkError naming the rank, the op, its sequence number and
// MPI_Error_string's text.
//
// Failure: an MPI error or a timeout fails the op and marks the group failed: every pending and
// later op fails with that error. MPI cannot cancel a collective, so an op abandoned on timeout
// or abort() keeps its buffers (and scratch) alive for the rest of the process. abort() never
// calls MPI_Abort: it only fails this group's ops (the watchdog above is the one caller).
//
// MPI lifetime: the first group initializes MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE, or
// MPI_THREAD_SERIALIZED under C10D_MPI_THREAD_LEVEL=serialized) unless the program already did;
// MPI_Finalize then runs at exit (atexit), only if we initialized it. With MPI_THREAD_SERIALIZED
// every MPI call of every group, the worker's and an inline waiter's alike, takes one
// process-wide mutex (MpiLock), which is all that level asks: calls from several threads, never
// two at once. Below SERIALIZED the backend refuses (Unsupported).
//
// Threads: the caller's threads check, queue, (new_group only) split communicators, and run
// the collectives they wait for (above); one worker per group runs every other MPI call; with
// blocking collectives, one watchdog thread per group (deadline_watchdog.h).
// Thread-safety: every method may be called from any thread. Lifetime: the destructor fails pending
// ops with an Error and joins the worker.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <list>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "algorithms/reduce_kernels.h"
#include "backends/common/fingerprint.h"
#include "backends/common/inline_schedule.h"
#include "backends/common/op_checks.h"
#include "backends/mpi/deadline_watchdog.h"
#include "c10d/errors.h"
#include "c10d/init.h"
#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1 {
namespace {

using Clock = std::chrono::steady_clock;

// The message of an exception, for an error that wraps it.
std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an exception of unknown type";
  }
}

// ---- MPI runtime: initialization, the serialization mutex, datatypes and reduce ops ----

// libnbc, Open MPI's nonblocking collectives, runs every in-place MPI_Iallreduce on fewer than
// 4 ranks, whatever its size, as a binomial reduce followed by a broadcast: at 16 MiB on 2 ranks
// 2.2x slower than MPI_Allreduce. Its algorithm is the MCA variable
// coll_libnbc_iallreduce_algorithm, which the MPI tool interface (MPI_T) can set between calls,
// so each all_reduce sets it first: recursive doubling (log2 p rounds) below 64 KiB, the ring
// (bandwidth-optimal) from 64 KiB up, where each measured fastest (docs/benchmarks.md). Left
// alone when the user chose (the variable's environment variable, or a value not the default)
// or when there is no such variable (another MPI, or Open MPI without libnbc). The variable is
// the process's: a program that also calls MPI_Iallreduce itself gets the last choice made here.
class NbcAllreduceChoice {
 public:
  static constexpr std::size_t kRingBytes = std::size_t{64} << 10;

  // After MPI_Init; `mpi_level` is the thread level MPI runs at. MPI_T is initialized at that
  // level: Open MPI 4.1's MPI_T_init_thread makes the level it is asked for the process's own
  // (MPI_Query_thread then reports it, and Open MPI's thread-multiple flag follows), so asking
  // for MPI_THREAD_MULTIPLE turned a process running at MPI_THREAD_SERIALIZED into one that
  // claims MULTIPLE.
  void init(int mpi_level) {
    constexpr const char* kName = "coll_libnbc_iallreduce_algorithm";
    if (std::getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm") != nullptr) return;
    int provided = 0, index = 0, count = 0, value = -1;
    if (MPI_T_init_thread(mpi_level, &provided) != MPI_SUCCESS) return;
    if (MPI_T_cvar_get_index(kName, &index) != MPI_SUCCESS ||
        MPI_T_cvar_handle_alloc(index, nullptr, &handle_, &count) != MPI_SUCCESS) {
      MPI_T_finalize();
      return;
    }
    if (count == 1 && MPI_T_cvar_read(handle_, &value) == MPI_SUCCESS && value == 0) {
      current_ = 0;
      active_ = true;
    } else {
      MPI_T_cvar_handle_free(&handle_);
      MPI_T_finalize();
    }
  }

  // Sets the algorithm for an all_reduce of `bytes`; the lock returned is held while the caller
  // posts the MPI_Iallreduce, so that another group's thread cannot change it in between.
  std::unique_lock<std::mutex> select(std::size_t bytes) {
    if (!active_) return {};
    std::unique_lock lock(mu_);
    if (!active_) return {};
    const int want = bytes >= kRingBytes ? kRing : kRecursiveDoubling;
    if (want != current_ && MPI_T_cvar_write(handle_, &want) == MPI_SUCCESS) current_ = want;
    return lock;
  }

  // Before MPI_Finalize, when this process initialized MPI.
  void shutdown() {
    if (!active_) return;
    std::lock_guard lock(mu_);
    active_ = false;
    MPI_T_cvar_handle_free(&handle_);
    MPI_T_finalize();
  }

 private:
  static constexpr int kRing = 1, kRecursiveDoubling = 4;  // libnbc's numbering
  std::atomic<bool> active_{false};
  MPI_T_cvar_handle handle_ = nullptr;
  std::mutex mu_;
  int current_ = 0;  // GUARDED_BY(mu_)
};

struct Runtime {
  bool serialized = false;  // provided == MPI_THREAD_SERIALIZED: lock every call
  std::mutex mu;            // taken around every MPI call when `serialized`
  MPI_Datatype types[kNumDTypes] = {};
  MPI_Op sum = MPI_OP_NULL, product = MPI_OP_NULL, min = MPI_OP_NULL, max = MPI_OP_NULL,
         band = MPI_OP_NULL, bor = MPI_OP_NULL, bxor = MPI_OP_NULL;
  NbcAllreduceChoice allreduce_algorithm;
  int tag_ub = 32767;  // MPI_TAG_UB; 32767 is the least the standard allows
};

Runtime& runtime() {
  static Runtime* r = new Runtime;  // leaked: used by atexit and by late destructors
  return *r;
}

// Holds the process-wide MPI mutex when MPI only provides MPI_THREAD_SERIALIZED.
class MpiLock {
 public:
  MpiLock() {
    if (runtime().serialized) lock_ = std::unique_lock(runtime().mu);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

std::string mpi_error_text(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return fmt::format("MPI error {}", rc);
  return std::string(text, static_cast<std::size_t>(len));
}

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

template <ReduceOp kOp>
void user_reduce(void* in, void* inout, int* len, MPI_Datatype* type) {
  const Runtime& rt = runtime();
  for (int d = 0; d < kNumDTypes; ++d) {
    if (rt.types[d] == *type) {
      try {
        algorithms::reduce_into(static_cast<DType>(d), Reduction{kOp}, inout, in, *len);
        return;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "c10d mpi: reduction failed: %s\n", e.what());
        std::abort();  // validated on the caller's thread: cannot happen
      }
    }
  }
  std::fprintf(stderr, "c10d mpi: reduction on a datatype c10d did not create\n");
  std::abort();
}

void finalize_at_exit() {
  runtime().allreduce_algorithm.shutdown();
  if (!mpi_finalized()) MPI_Finalize();
}

void throw_if_error(int rc, std::string_view what) {
  if (rc != MPI_SUCCESS) C10D_THROW(NetworkError, "{} failed: {}", what, mpi_error_text(rc));
}

// MPI's predefined datatype for a dtype, or MPI_DATATYPE_NULL (float16, bfloat16).
MPI_Datatype predefined_type(DType d) {
  switch (d) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt8:
      return MPI_INT8_T;
    case DType::kUInt8:
      return MPI_UINT8_T;
    case DType::kInt16:
      return MPI_INT16_T;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    case DType::kBool:
      return MPI_C_BOOL;
    case DType::kFloat16:
    case DType::kBFloat16:
      break;
  }
  return MPI_DATATYPE_NULL;
}

// Initializes MPI once per process (unless the program did) and creates the datatypes and ops.
// The thread level asked of MPI_Init_thread: C10D_MPI_THREAD_LEVEL=serialized asks for
// MPI_THREAD_SERIALIZED (every MPI call of the process then takes one mutex; for an MPI whose
// MPI_THREAD_MULTIPLE is slow or missing), anything else but "multiple" is refused.
int requested_thread_level() {
  const char* v = std::getenv("C10D_MPI_THREAD_LEVEL");
  const std::string_view level = v == nullptr ? "" : v;
  if (level.empty() || level == "multiple") return MPI_THREAD_MULTIPLE;
  if (level == "serialized") return MPI_THREAD_SERIALIZED;
  C10D_THROW(InvalidArgument,
             "C10D_MPI_THREAD_LEVEL is \"{}\": expected \"multiple\" or \"serialized\"", level);
}

void ensure_runtime() {
  static std::once_flag once;
  std::call_once(once, [] {
    Runtime& rt = runtime();
    int initialized = 0;
    MPI_Initialized(&initialized);
    int provided = MPI_THREAD_SINGLE;
    if (!initialized) {
      C10D_CHECK(!mpi_finalized(), "make_process_group_mpi: MPI was already finalized");
      throw_if_error(MPI_Init_thread(nullptr, nullptr, requested_thread_level(), &provided),
                     "MPI_Init_thread");
      std::atexit(finalize_at_exit);
    } else {
      MPI_Query_thread(&provided);
    }
    if (provided < MPI_THREAD_SERIALIZED) {
      C10D_THROW(Unsupported,
                 "make_process_group_mpi: MPI provides thread level {} but the MPI backend needs "
                 "MPI_THREAD_SERIALIZED or MPI_THREAD_MULTIPLE",
                 provided);
    }
    rt.serialized = provided < MPI_THREAD_MULTIPLE;
    C10D_LOG_INFO("MPI backend: MPI provides {}{}",
                  rt.serialized ? "MPI_THREAD_SERIALIZED" : "MPI_THREAD_MULTIPLE",
                  rt.serialized ? ": every MPI call takes one process-wide mutex" : "");
    rt.allreduce_algorithm.init(provided);
    int* tag_ub = nullptr;
    int found = 0;
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &tag_ub, &found);
    if (found && tag_ub != nullptr) rt.tag_ub = *tag_ub;
    for (int d = 0; d < kNumDTypes; ++d) {
      // MPI's own datatype where it has one of the same size, so the calls match what a raw MPI
      // program passes (a derived datatype may take Open MPI's general convertor; no
      // difference beyond noise was measured at 64 KiB). float16 and bfloat16 (and any type
      // whose size differs) are contiguous bytes. Either way the reduction is ours (user_reduce
      // finds the dtype by its datatype).
      const int bytes = static_cast<int>(element_size(static_cast<DType>(d)));
      const MPI_Datatype own = predefined_type(static_cast<DType>(d));
      int own_bytes = 0;
      if (own != MPI_DATATYPE_NULL && MPI_Type_size(own, &own_bytes) == MPI_SUCCESS &&
          own_bytes == bytes) {
        rt.types[d] = own;
        continue;
      }
      throw_if_error(MPI_Type_contiguous(bytes, MPI_BYTE, &rt.types[d]), "MPI_Type_contiguous");
      throw_if_error(MPI_Type_commit(&rt.types[d]), "MPI_Type_commit");
    }
    throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kSum>, 1, &rt.sum), "MPI_Op_create");
    throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kProduct>, 1, &rt.product),
                   "MPI_Op_create");
    throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kMin>, 1, &rt.min), "MPI_Op_create");
    throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kMax>, 1, &rt.max), "MPI_Op_create");
    throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kBand>, 1, &rt.band), "MPI_Op_create");
    throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kBor>, 1, &rt.bor), "MPI_Op_create");
    throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kBxor>, 1, &rt.bxor), "MPI_Op_create");
  });
}

MPI_Datatype mpi_type(DType d) { return runtime().types[static_cast<int>(d)]; }

MPI_Op mpi_op(ReduceOp op) {
  const Runtime& rt = runtime();
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
    case ReduceOp::kPremulSum:
      return rt.sum;
    case ReduceOp::kProduct:
      return rt.product;
    case ReduceOp::kMin:
      return rt.min;
    case ReduceOp::kMax:
      return rt.max;
    case ReduceOp::kBand:
      return rt.band;
    case ReduceOp::kBor:
      return rt.bor;
    case ReduceOp::kBxor:
      return rt.bxor;
  }
  return rt.sum;
}

// ---- Tensor helpers (caller's thread) ----

// MPI counts are ints.
int as_count(std::int64_t n, std::string_view op) {
  if (n > INT_MAX) {
    C10D_THROW(Unsupported, "{}: {} elements or bytes exceed MPI's int count limit ({})", op, n,
               INT_MAX);
  }
  return static_cast<int>(n);
}

// Names an op in error messages ("rank 0: all_reduce #3 (MPI group g)"). Formatted only when an
// error needs it: the hot path of a small collective is a few microseconds. Holds no pointer to
// the op's Work, so the watchdog may name a call whose Work is gone.
struct Call {
  int rank;
  std::string_view op;  // a string literal
  std::uint64_t sequence;
  const std::string* group;  // the group's name; the group outlives its calls
  std::string str() const {
    return fmt::format("rank {}: {} #{} (MPI group {})", rank, op, sequence, *group);
  }
};

int as_count(std::int64_t n, const Call& call) {
  return n > INT_MAX ? as_count(n, call.str()) : static_cast<int>(n);
}

std::uint8_t* bytes(const Tensor& t) { return static_cast<std::uint8_t*>(t.raw_data()); }

Tensor scratch_bytes(std::size_t n) {
  return Tensor::empty({static_cast<std::int64_t>(n)}, DType::kUInt8);
}

// ---- Ops ----

// The communicators an op runs on, and how its collectives are called.
struct Comms {
  MPI_Comm coll = MPI_COMM_NULL;
  MPI_Comm p2p = MPI_COMM_NULL;
  bool blocking = false;  // blocking MPI collectives (blocking_from_env)
};

// A started op: its MPI requests, its result and what to do once they all completed.
struct Started {
  // A new request slot for one nonblocking call (valid until the next add()).
  MPI_Request* add() { return &requests.emplace_back(MPI_REQUEST_NULL); }
  // Keeps `t` (a buffer MPI only reads: an input or a copy of one) until the op completes; a
  // blocking call is done with it when it returns. Buffers read after completion (`then`) go
  // into `keep` itself.
  void keep_until_done(const Comms& c, Tensor t) {
    if (!c.blocking) keep.push_back(std::move(t));
  }
  // The op's result, after completion (runs `then` first).
  std::vector<Tensor> finish() {
    if (then) then(outputs);
    return std::move(outputs);
  }

  std::vector<MPI_Request> requests;  // none for a blocking collective (Comms::blocking)
  std::vector<Tensor> outputs;        // the op's outputs (for in-place ops its inputs)
  // Whatever else MPI reads or writes until completion (inputs, scratch buffers, count arrays):
  // held as long as the op is, and for the process's life if it is abandoned (abandon()).
  std::vector<Tensor> keep;
  // Optional: runs on the outputs after completion, where the op was tested (AVG's division,
  // copies out of a scratch buffer).
  std::function<void(const std::vector<Tensor>& outputs)> then;
  bool is_recv = false;
  // A recv's sender (set_source_rank once it completed); -1 for one from MPI_ANY_SOURCE, whose
  // status names it. `tag`: the any-source recv's, for its timeout.
  int source = -1;
  int tag = -1;
};

// Started::then for AVG: divides each output by the group size.
auto average(int n) {
  return [n](const std::vector<Tensor>& outputs) {
    for (const auto& t : outputs) algorithms::finish_average(t.dtype(), t.raw_data(), t.numel(), n);
  };
}

// Started::then for gathers into a scratch buffer: copies block r of `all` to output r. (`all`
// must also be in Started::keep.)
auto copy_out(const Tensor& all, std::size_t block) {
  return [data = bytes(all), block](const std::vector<Tensor>& outputs) {
    for (std::size_t r = 0; r < outputs.size(); ++r) {
      if (block > 0) std::memcpy(bytes(outputs[r]), data + r * block, block);
    }
  };
}

// Whether collectives are blocking MPI calls: C10D_MPI_BLOCKING, a flag, default on.
bool blocking_from_env() { return core::env_flag("C10D_MPI_BLOCKING").value_or(true); }

// Calls one collective: the blocking MPI function when the group's collectives block
// (Comms::blocking), else its nonblocking twin, whose request joins the Started `s`. A failure is
// a NetworkError naming the op and the MPI function. The two functions take the same arguments
// but the nonblocking one's trailing request.
#define C10D_MPI_COLLECTIVE(c, s, call, blocking_fn, nonblocking_fn, ...)                       \
  check((c).blocking ? blocking_fn(__VA_ARGS__) : nonblocking_fn(__VA_ARGS__, (s).add()), call, \
        (c).blocking ? #blocking_fn : #nonblocking_fn)

// A queued op: the Work its caller holds, with what the op needs to start. The closure that
// starts it lives in the same allocation (OpWorkOf), so queueing an op allocates once.
class OpWork : public Work {
 public:
  // `op_literal` is a string literal (it names the op for as long as the process runs).
  OpWork(std::string_view op_literal, std::uint64_t sequence, bool is_collective,
         Milliseconds op_timeout)
      : Work(std::string(op_literal), sequence),
        op(op_literal),
        collective(is_collective),
        timeout(op_timeout) {}

  // Posts the op's MPI calls (on the worker, or on the thread that waits for it); called once.
  // `call` prefixes errors ("rank 0: op #3").
  virtual Started start(const Comms& c, const Call& call) = 0;
  // Fails an op that never started, dropping its closure (and the tensors it holds).
  void fail_unstarted(std::exception_ptr error) {
    drop_start();
    finish_with_error(std::move(error));
  }

  const std::string_view op;  // the string literal op_name() copies
  const bool collective;
  const Milliseconds timeout;
  backends::Fingerprint fingerprint;  // compared across ranks under C10D_DEBUG=DETAIL

 private:
  virtual void drop_start() = 0;
};

template <typename Start>
class OpWorkOf final : public OpWork {
 public:
  OpWorkOf(std::string_view op_literal, std::uint64_t sequence, bool is_collective,
           Milliseconds op_timeout, Start start)
      : OpWork(op_literal, sequence, is_collective, op_timeout), start_(std::move(start)) {}

  Started start(const Comms& c, const Call& call) override {
    Started s = (*start_)(c, call);
    // What MPI still reads or writes is in `s`; a Work the caller keeps must not keep the
    // closure's tensors too. (If starting threw, they stay: MPI may hold some of them.)
    start_.reset();
    return s;
  }

 private:
  void drop_start() override { start_.reset(); }

  std::optional<Start> start_;
};

using OpQueue = std::deque<std::shared_ptr<OpWork>>;

struct Active {
  std::shared_ptr<OpWork> work;
  Started started;
  Clock::time_point deadline;
};

// Ops abandoned on timeout, abort or destruction: MPI may still write their buffers, so the
// tensors their closures hold stay alive until the process ends.
void abandon(Active a) {
  static std::mutex mu;
  static auto* kept = new std::vector<Active>;
  std::lock_guard lock(mu);
  kept->push_back(std::move(a));
}

class ProcessGroupMPI final : public ProcessGroup,
                              public std::enable_shared_from_this<ProcessGroupMPI> {
 public:
  // Takes ownership of `comm` (a communicator of its own, freed by the destructor).
  ProcessGroupMPI(MPI_Comm comm, int rank, int size, Milliseconds timeout, std::string name)
      : ProcessGroup(rank, size), checks_(rank, size), timeout_(timeout), name_(std::move(name)) {
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
      throw_if_error(MPI_Comm_set_errhandler(control_, MPI_ERRORS_RETURN),
                     "MPI_Comm_set_errhandler");
    }
    // Blocking collectives need MPI_THREAD_MULTIPLE: under the SERIALIZED lock one group's call
    // that waits for a late peer would stall every other group's MPI calls.
    comms_.blocking = blocking_from_env() && !runtime().serialized;
    if (comms_.blocking) {
      watchdog_.emplace(
          mu_, [this] { return watched_.str(); },
          [](const std::string& what) {
            C10D_LOG_ERROR(
                "{} did not finish within its timeout inside a blocking MPI call, and MPI cannot "
                "cancel a collective: aborting the job (MPI_Abort). C10D_MPI_BLOCKING=0 runs "
                "collectives as nonblocking calls, whose timeouts throw TimeoutError instead",
                what);
            MPI_Abort(MPI_COMM_WORLD, 1);
          });
    }
    worker_ = std::thread([this] { run_worker(); });
  }

  ~ProcessGroupMPI() override {
    const auto reason = std::make_exception_ptr(Error(
        fmt::format("rank {}: MPI group {} was destroyed with this op pending", rank(), name_)));
    OpQueue dropped;
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
      stop_reason_ = reason;
      dropped.swap(queue_);
    }
    for (auto& op : dropped) op->fail_unstarted(reason);
    cv_.notify_all();
    worker_.join();
    // Pending operations on a freed communicator complete normally (MPI_Comm_free), so this is
    // safe even with abandoned collectives in flight.
    if (!mpi_finalized()) {
      MpiLock lock;
      for (MPI_Comm* c : {&comms_.coll, &comms_.p2p, &control_}) {
        if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
      }
    }
  }

  std::string backend_name() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce(std::vector<Tensor> tensors,
                                   const AllreduceOptions& opts) override {
    constexpr std::string_view kOp = "all_reduce";
    checks_.tensors(tensors, kOp, /*same=*/false);
    for (const auto& t : tensors) algorithms::validate_reduction(t.dtype(), opts.reduce.op);
    const Reduction r = opts.reduce;
    // Before the closure takes the tensors.
    const auto fp = fingerprint(kOp, tensors[0], opts.reduce.op, -1, total(tensors));
    return enqueue(
        kOp, fp, opts.timeout,
        [this, tensors = std::move(tensors), r](const Comms& c, const Call& call) mutable {
          Started s;
          for (const auto& t : tensors) {
            if (r.op == ReduceOp::kPremulSum) {
              algorithms::premul_in_place(t.dtype(), r.premul_factor, t.raw_data(), t.numel());
            }
            // libnbc's algorithm, for the nonblocking call only.
            const auto algorithm = c.blocking ? std::unique_lock<std::mutex>()
                                              : runtime().allreduce_algorithm.select(t.nbytes());
            C10D_MPI_COLLECTIVE(c, s, call, MPI_Allreduce, MPI_Iallreduce, MPI_IN_PLACE,
                                t.raw_data(), as_count(t.numel(), call), mpi_type(t.dtype()),
                                mpi_op(r.op), c.coll);
          }
          if (r.op == ReduceOp::kAvg) s.then = average(size());
          s.outputs = std::move(tensors);
          return s;
        });
  }

  std::shared_ptr<Work> broadcast(std::vector<Tensor> tensors,
                                  const BroadcastOptions& opts) override {
    constexpr std::string_view kOp = "broadcast";
    checks_.tensors(tensors, kOp, /*same=*/false);
    checks_.root(kOp, opts.root);
    const auto fp = fingerprint(kOp, tensors[0], std::nullopt, opts.root, total(tensors));
    return enqueue(
        kOp, fp, opts.timeout,
        [tensors = std::move(tensors), root = opts.root](const Comms& c, const Call& call) mutable {
          Started s;
          for (const auto& t : tensors) {
            C10D_MPI_COLLECTIVE(c, s, call, MPI_Bcast, MPI_Ibcast, t.raw_data(),
                                as_count(t.numel(), call), mpi_type(t.dtype()), root, c.coll);
          }
          s.outputs = std::move(tensors);
          return s;
        });
  }

  std::shared_ptr<Work> reduce(Tensor tensor, const ReduceOptions& opts) override {
    constexpr std::string_view kOp = "reduce";
    checks_.defined(tensor, kOp, "the tensor");
    checks_.root(kOp, opts.root);
    algorithms::validate_reduction(tensor.dtype(), opts.reduce.op);
    return enqueue(kOp, fingerprint(kOp, tensor, opts.reduce.op, opts.root, tensor.numel()),
                   opts.timeout, [this, tensor, opts](const Comms& c, const Call& call) {
                     const Reduction r = opts.reduce;
                     if (r.op == ReduceOp::kPremulSum) {
                       algorithms::premul_in_place(tensor.dtype(), r.premul_factor,
                                                   tensor.raw_data(), tensor.numel());
                     }
                     const bool root = rank() == opts.root;
                     Started s;
                     C10D_MPI_COLLECTIVE(c, s, call, MPI_Reduce, MPI_Ireduce,
                                         root ? MPI_IN_PLACE : tensor.raw_data(),
                                         root ? tensor.raw_data() : nullptr,
                                         as_count(tensor.numel(), call), mpi_type(tensor.dtype()),
                                         mpi_op(r.op), opts.root, c.coll);
                     if (root && r.op == ReduceOp::kAvg) s.then = average(size());
                     s.outputs = {tensor};
                     return s;
                   });
  }

  std::shared_ptr<Work> all_gather(std::vector<Tensor> outputs, Tensor input,
                                   const AllgatherOptions& opts) override {
    constexpr std::string_view kOp = "all_gather";
    checks_.defined(input, kOp, "the input");
    checks_.count(kOp, "outputs", outputs.size());
    for (const auto& t : outputs) checks_.like(t, input, kOp, "an output");
    return enqueue(kOp, fingerprint(kOp, input, std::nullopt, -1, input.numel()), opts.timeout,
                   [this, outputs, input](const Comms& c, const Call& call) {
                     const std::size_t block = input.nbytes();
                     Tensor all = scratch_bytes(block * outputs.size());
                     Started s;
                     C10D_MPI_COLLECTIVE(c, s, call, MPI_Allgather, MPI_Iallgather,
                                         input.raw_data(), as_count(block, call), MPI_BYTE,
                                         all.raw_data(), as_count(block, call), MPI_BYTE, c.coll);
                     s.then = copy_out(all, block);
                     s.keep_until_done(c, input);
                     s.keep.push_back(std::move(all));  // copy_out reads it after completion
                     s.outputs = outputs;
                     return s;
                   });
  }

  std::shared_ptr<Work> all_gather_into_tensor(Tensor output, Tensor input,
                                               const AllgatherOptions& opts) override {
    constexpr std::string_view kOp = "all_gather_into_tensor";
    checks_.blocks(kOp, output, "output", input, "input");
    return enqueue(
        kOp, fingerprint(kOp, input, std::nullopt, -1, input.numel()), opts.timeout,
        [this, output, input](const Comms& c, const Call& call) {
          const std::size_t block = input.nbytes();
          const std::uint8_t* in = bytes(input);
          std::uint8_t* out = bytes(output);
          const std::uint8_t* own = out + static_cast<std::size_t>(rank()) * block;
          const bool overlaps = block > 0 && in < out + output.nbytes() && out < in + block;
          Tensor copy;  // the input, when it overlaps the output elsewhere than its own block
          const void* send = in;
          if (overlaps && in == own) {
            send = MPI_IN_PLACE;
          } else if (overlaps) {
            copy = scratch_bytes(block);
            std::memcpy(bytes(copy), in, block);
            send = copy.raw_data();
          }
          Started s;
          C10D_MPI_COLLECTIVE(c, s, call, MPI_Allgather, MPI_Iallgather, send,
                              as_count(block, call), MPI_BYTE, out, as_count(block, call), MPI_BYTE,
                              c.coll);
          s.keep_until_done(c, input);
          if (copy.defined()) s.keep_until_done(c, std::move(copy));
          s.outputs = {output};
          return s;
        });
  }

  std::shared_ptr<Work> reduce_scatter(Tensor output, std::vector<Tensor> inputs,
                                       const ReduceScatterOptions& opts) override {
    constexpr std::string_view kOp = "reduce_scatter";
    checks_.defined(output, kOp, "the output");
    checks_.count(kOp, "inputs", inputs.size());
    for (const auto& t : inputs) checks_.like(t, output, kOp, "an input");
    algorithms::validate_reduction(output.dtype(), opts.reduce.op);
    return enqueue(kOp, fingerprint(kOp, output, opts.reduce.op, -1, output.numel()), opts.timeout,
                   [this, output, inputs, r = opts.reduce](const Comms& c, const Call& call) {
                     const std::size_t block = output.nbytes();
                     Tensor all = scratch_bytes(block * inputs.size());
                     for (std::size_t q = 0; q < inputs.size(); ++q) {
                       if (block > 0) std::memcpy(bytes(all) + q * block, bytes(inputs[q]), block);
                     }
                     return start_reduce_scatter(c, call, all, output, r);
                   });
  }

  std::shared_ptr<Work> reduce_scatter_tensor(Tensor output, Tensor input,
                                              const ReduceScatterOptions& opts) override {
    constexpr std::string_view kOp = "reduce_scatter_tensor";
    checks_.blocks(kOp, input, "input", output, "output");
    algorithms::validate_reduction(output.dtype(), opts.reduce.op);
    return enqueue(kOp, fingerprint(kOp, output, opts.reduce.op, -1, output.numel()), opts.timeout,
                   [this, output, input, r = opts.reduce](const Comms& c, const Call& call) {
                     // A copy: the output may be a view of the input, and PREMUL_SUM must not scale
                     // the input.
                     Tensor all = scratch_bytes(input.nbytes());
                     if (input.nbytes() > 0) std::memcpy(bytes(all), bytes(input), input.nbytes());
                     return start_reduce_scatter(c, call, all, output, r);
                   });
  }

  std::shared_ptr<Work> all_to_all(Tensor output, Tensor input,
                                   const AllToAllOptions& opts) override {
    constexpr std::string_view kOp = "all_to_all";
    // Without split sizes MPI_Alltoall, as raw MPI programs call; with them MPI_Alltoallv. MPI
    // cannot match one with the other, so every rank must pass split sizes, or none (as with
    // PyTorch's MPI backend); the fingerprint tells the two apart (C10D_DEBUG=DETAIL).
    const bool splits = !opts.input_split_sizes.empty() || !opts.output_split_sizes.empty();
    if (!splits) {
      checks_.all_to_all_even(output, input);
      const auto fp = fingerprint(kOp, input, std::nullopt, -1, input.numel());
      const int block = as_count(input.nbytes() / static_cast<std::size_t>(size()), kOp);
      return enqueue(kOp, fp, opts.timeout,
                     [output = std::move(output), input = std::move(input), block](
                         const Comms& c, const Call& call) mutable {
                       Started s;
                       C10D_MPI_COLLECTIVE(c, s, call, MPI_Alltoall, MPI_Ialltoall,
                                           input.raw_data(), block, MPI_BYTE, output.raw_data(),
                                           block, MPI_BYTE, c.coll);
                       s.keep_until_done(c, std::move(input));
                       s.outputs.push_back(std::move(output));
                       return s;
                     });
    }
    const backends::AllToAllLayout l = checks_.all_to_all(output, input, opts);
    auto fp = fingerprint(kOp, input, std::nullopt, -1, -1);
    fp.split_sizes = true;
    // The four count and offset arrays, in one int32 tensor that lives as long as the op.
    const auto n = static_cast<std::size_t>(size());
    Tensor counts = Tensor::empty({static_cast<std::int64_t>(4 * n)}, DType::kInt32);
    int* at = static_cast<int*>(counts.raw_data());
    for (const auto* v : {&l.send_counts, &l.send_offsets, &l.recv_counts, &l.recv_offsets}) {
      for (std::int64_t x : *v) *at++ = as_count(x, kOp);
    }
    return enqueue(kOp, fp, opts.timeout,
                   [output = std::move(output), input = std::move(input),
                    counts = std::move(counts), n](const Comms& c, const Call& call) mutable {
                     const int* a = static_cast<const int*>(counts.raw_data());
                     Started s;
                     C10D_MPI_COLLECTIVE(c, s, call, MPI_Alltoallv, MPI_Ialltoallv,
                                         input.raw_data(), a, a + n, MPI_BYTE, output.raw_data(),
                                         a + 2 * n, a + 3 * n, MPI_BYTE, c.coll);
                     s.keep_until_done(c, std::move(input));
                     s.keep_until_done(c, std::move(counts));
                     s.outputs.push_back(std::move(output));
                     return s;
                   });
  }

  std::shared_ptr<Work> gather(std::vector<Tensor> outputs, Tensor input,
                               const GatherOptions& opts) override {
    constexpr std::string_view kOp = "gather";
    checks_.defined(input, kOp, "the input");
    checks_.root_list(kOp, opts.root, outputs, input, "outputs");
    return enqueue(kOp, fingerprint(kOp, input, std::nullopt, opts.root, input.numel()),
                   opts.timeout,
                   [this, outputs, input, root = opts.root](const Comms& c, const Call& call) {
                     const std::size_t block = input.nbytes();
                     Tensor all = rank() == root ? scratch_bytes(block * outputs.size()) : Tensor();
                     Started s;
                     C10D_MPI_COLLECTIVE(c, s, call, MPI_Gather, MPI_Igather, input.raw_data(),
                                         as_count(block, call), MPI_BYTE,
                                         all.defined() ? all.raw_data() : nullptr,
                                         as_count(block, call), MPI_BYTE, root, c.coll);
                     if (all.defined()) {
                       s.then = copy_out(all, block);
                       s.keep.push_back(std::move(all));  // copy_out reads it after completion
                     }
                     s.keep_until_done(c, input);
                     s.outputs = outputs;
                     return s;
                   });
  }

  std::shared_ptr<Work> scatter(Tensor output, std::vector<Tensor> inputs,
                                const ScatterOptions& opts) override {
    constexpr std::string_view kOp = "scatter";
    checks_.defined(output, kOp, "the output");
    checks_.root_list(kOp, opts.root, inputs, output, "inputs");
    return enqueue(kOp, fingerprint(kOp, output, std::nullopt, opts.root, output.numel()),
                   opts.timeout,
                   [this, output, inputs, root = opts.root](const Comms& c, const Call& call) {
                     const std::size_t block = output.nbytes();
                     Tensor all;
                     if (rank() == root) {
                       all = scratch_bytes(block * inputs.size());
                       for (std::size_t q = 0; q < inputs.size(); ++q) {
                         if (block > 0)
                           std::memcpy(bytes(all) + q * block, bytes(inputs[q]), block);
                       }
                     }
                     Started s;
                     C10D_MPI_COLLECTIVE(c, s, call, MPI_Scatter, MPI_Iscatter,
                                         all.defined() ? all.raw_data() : nullptr,
                                         as_count(block, call), MPI_BYTE, output.raw_data(),
                                         as_count(block, call), MPI_BYTE, root, c.coll);
                     if (all.defined()) s.keep_until_done(c, std::move(all));
                     s.outputs = {output};
                     return s;
                   });
  }

  std::shared_ptr<Work> barrier(const BarrierOptions& opts) override {
    return enqueue("barrier", backends::Fingerprint{}, opts.timeout,
                   [this](const Comms& c, const Call& call) {
                     Started s;
                     C10D_MPI_COLLECTIVE(c, s, call, MPI_Barrier, MPI_Ibarrier, c.coll);
                     return s;
                   });
  }

  std::shared_ptr<Work> send(std::vector<Tensor> tensors, int dst_rank,
                             const SendRecvOptions& opts) override {
    return point_to_point("send", std::move(tensors), dst_rank, opts);
  }

  std::shared_ptr<Work> recv(std::vector<Tensor> tensors, int src_rank,
                             const SendRecvOptions& opts) override {
    return point_to_point("recv", std::move(tensors), src_rank, opts);
  }

  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    checks_.new_group(ranks);
    const auto at = std::find(ranks.begin(), ranks.end(), rank());
    const bool member = at != ranks.end();
    const int key = member ? static_cast<int>(at - ranks.begin()) : 0;
    std::lock_guard split_lock(split_mu_);  // one split at a time on control_
    const std::uint32_t index = next_child_++;
    MPI_Comm child = MPI_COMM_NULL;
    {
      MpiLock lock;
      // Blocking and collective over this group: MPI has no nonblocking split.
      const int rc = MPI_Comm_split(control_, member ? 0 : MPI_UNDEFINED, key, &child);
      if (rc != MPI_SUCCESS) {
        C10D_THROW(NetworkError, "rank {}: new_group of group {}: MPI_Comm_split failed: {}",
                   rank(), name_, mpi_error_text(rc));
      }
    }
    if (!member) return nullptr;
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

  void abort() override {
    fail(std::make_exception_ptr(
        Error(fmt::format("rank {}: MPI group {} was aborted", rank(), name_))));
  }

 private:
  // ---- Starting (worker thread) ----

  static void check(int rc, const Call& call, std::string_view what) {
    if (rc != MPI_SUCCESS)
      C10D_THROW(NetworkError, "{}: {} failed: {}", call.str(), what, mpi_error_text(rc));
  }

  // `all` is this rank's private copy of the size blocks (scaled here for PREMUL_SUM).
  Started start_reduce_scatter(const Comms& c, const Call& call, const Tensor& all,
                               const Tensor& output, const Reduction& r) {
    const DType dtype = output.dtype();
    if (r.op == ReduceOp::kPremulSum) {
      algorithms::premul_in_place(dtype, r.premul_factor, all.raw_data(), output.numel() * size());
    }
    Started s;
    C10D_MPI_COLLECTIVE(c, s, call, MPI_Reduce_scatter_block, MPI_Ireduce_scatter_block,
                        all.raw_data(), output.raw_data(), as_count(output.numel(), call),
                        mpi_type(dtype), mpi_op(r.op), c.coll);
    if (r.op == ReduceOp::kAvg) s.then = average(size());
    s.keep_until_done(c, all);
    s.outputs = {output};
    return s;
  }

  // ---- Queueing (caller's thread) ----

  static std::int64_t total(const std::vector<Tensor>& tensors) {
    std::int64_t n = 0;
    for (const auto& t : tensors) n += t.numel();
    return n;
  }

  // A collective's fingerprint, under C10D_DEBUG=DETAIL only (else empty: not worth its cost
  // on the path of a small collective).
  backends::Fingerprint fingerprint(std::string_view op, const Tensor& t,
                                    std::optional<ReduceOp> reduce_op, int root,
                                    std::int64_t count) const {
    return detail_ ? backends::Fingerprint::of(op, t, reduce_op, root, count)
                   : backends::Fingerprint{};
  }

  // Queues a collective that `start` starts.
  template <typename Start>
  std::shared_ptr<Work> enqueue(std::string_view op, const backends::Fingerprint& fp,
                                std::optional<Milliseconds> timeout, Start&& start) {
    return push(op, /*collective=*/true, fp, timeout, std::forward<Start>(start));
  }

  template <typename Start>
  std::shared_ptr<Work> push(std::string_view op, bool collective, const backends::Fingerprint& fp,
                             std::optional<Milliseconds> timeout, Start&& start) {
    const Milliseconds t = timeout.value_or(timeout_);
    C10D_CHECK(t.count() > 0, "{}: the timeout must be positive, not {} ms", op, t.count());
    std::shared_ptr<OpWork> work;
    std::exception_ptr failed;
    bool wake = false;
    {
      std::lock_guard lock(mu_);
      C10D_CHECK(!stopping_, "{}: the group is being destroyed", op);
      const std::uint64_t seq = collective ? next_sequence_++ : next_p2p_++;
      work = std::make_shared<OpWorkOf<std::decay_t<Start>>>(op, seq, collective, t,
                                                             std::forward<Start>(start));
      if (collective && schedule_.enabled()) {
        if (!wait_hook_)
          wait_hook_ = backends::shared_wait_hook(weak_from_this(), &ProcessGroupMPI::run_inline);
        work->set_wait_hook(wait_hook_);
      }
      if (detail_) {
        work->fingerprint = fp;
        work->fingerprint.set_op(op);
        work->fingerprint.sequence = seq;
      }
      failed = failure_;
      if (!failed) {
        wake = schedule_.enqueued(collective, queue_.empty());
        queue_.push_back(work);
      }
    }
    if (failed) {
      work->fail_unstarted(failed);  // outside mu_: its callbacks may call into the group
    } else if (wake) {
      cv_.notify_all();
    }
    return work;
  }

  // ---- Collectives driven by their waiter ----

  // Work::wait's hook for collectives (not under DETAIL, C10D_INLINE not 0; under
  // MPI_THREAD_SERIALIZED too, each MPI call under MpiLock). When `w` is the next op to start,
  // its waiter starts it and tests it in a tight loop on its own thread, as a program calling
  // MPI itself would: no other thread has to wake, which on these machines costs more than a
  // small collective. Otherwise the worker starts it now.
  // The op keeps its deadline (TimeoutError, and the group fails, as on the worker); when the
  // waiter's own deadline comes first, the worker adopts the op and the waiter returns.
  void run_inline(Work& w, Work::WaitClock& clock) {
    bool wake = false;
    bool wake_watchdog = false;
    // Only collectives' Works have this hook (push), and they are OpWorks.
    const Call call = describe(static_cast<const OpWork&>(w));
    Active a{nullptr, {}, {}};
    {
      std::lock_guard lock(mu_);
      // Ops ahead of it or one in flight: the worker runs it (InlineSchedule::waiter_choice).
      // A blocking call cannot be handed to the worker midway, so only a waiter that waits as
      // long as the op's own timeout runs one.
      const auto may_take = [&](const std::shared_ptr<OpWork>& p) {
        return !coll_running_.load(std::memory_order_acquire) && !failure_ && !stopping_ &&
               (!comms_.blocking ||
                backends::InlineSchedule::waits_long_enough(clock.timeout(), p->timeout));
      };
      switch (schedule_.waiter_choice(queue_, w, may_take, wake)) {
        case backends::InlineSchedule::Choice::kGone:
          return;  // started (or failed) already
        case backends::InlineSchedule::Choice::kTake: {
          const Milliseconds timeout = queue_.front()->timeout;
          // A blocking call's deadline is only the watchdog's, which needs no exact clock.
          a = Active{std::move(queue_.front()),
                     {},
                     comms_.blocking ? mpi::DeadlineWatchdog::deadline_in(timeout)
                                     : clock.start() + timeout};
          queue_.pop_front();
          schedule_.front_taken();
          coll_running_.store(true, std::memory_order_relaxed);
          if (comms_.blocking) wake_watchdog = watch_locked(a.deadline, call);
          break;
        }
        case backends::InlineSchedule::Choice::kDecline:
          break;
      }
    }
    if (!a.work) {
      if (wake) cv_.notify_all();
      return;
    }
    if (wake_watchdog) watchdog_->wake();
    try {
      {
        MpiLock lock;
        a.started = a.work->start(comms_, call);
      }
      // The clock is read every kClockEvery tests: on these guests a read costs about as much
      // as an MPI_Testall (perf: clock_gettime took 15% of an 8-byte all_reduce loop).
      for (unsigned polls = 1; !test(a); ++polls) {
        if (polls % kClockEvery != 0) continue;
        const auto tested = Clock::now();
        if (tested >= a.deadline) C10D_THROW(TimeoutError, "{} timed out", call.str());
        if (tested >= clock.deadline()) {
          {
            std::lock_guard lock(mu_);
            adopted_ = std::move(a);
          }
          cv_.notify_all();
          return;
        }
      }
    } catch (...) {
      const auto error = std::current_exception();
      unwatch();  // the call this thread watched failed (blocking) or is abandoned below
      if (!a.started.requests.empty()) give_up(a);
      fail(error);
      w.finish_with_error(error);
      return;
    }
    collective_done();
    w.finish(a.started.finish());
  }

  std::shared_ptr<Work> point_to_point(std::string_view op, std::vector<Tensor> tensors, int peer,
                                       const SendRecvOptions& opts) {
    checks_.point_to_point(op, tensors, peer, opts.tag);
    const int tag_ub = runtime().tag_ub;
    C10D_CHECK(opts.tag <= tag_ub, "{}: tag {} is above MPI_TAG_UB ({})", op, opts.tag, tag_ub);
    const bool is_send = op == "send";
    auto start = [tensors, peer, is_send, tag = opts.tag](const Comms& c, const Call& call) {
      Started s;
      s.is_recv = !is_send;
      for (const auto& t : tensors) {
        s.requests.emplace_back();
        const int count = as_count(static_cast<std::int64_t>(t.nbytes()), call);
        if (is_send) {
          check(MPI_Isend(t.raw_data(), count, MPI_BYTE, peer, tag, c.p2p, &s.requests.back()),
                call, "MPI_Isend");
        } else {
          check(MPI_Irecv(t.raw_data(), count, MPI_BYTE, peer, tag, c.p2p, &s.requests.back()),
                call, "MPI_Irecv");
        }
      }
      s.outputs = tensors;
      s.source = peer;
      return s;
    };
    return push(op, /*collective=*/false, backends::Fingerprint{}, opts.timeout, std::move(start));
  }

  std::shared_ptr<Work> recv_any_source(std::vector<Tensor> tensors,
                                        const SendRecvOptions& opts) override {
    checks_.recv_any_source(tensors, opts.tag);
    const int tag_ub = runtime().tag_ub;
    C10D_CHECK(opts.tag <= tag_ub, "recv_any_source: tag {} is above MPI_TAG_UB ({})", opts.tag,
               tag_ub);
    auto start = [tensor = tensors.front(), tag = opts.tag](const Comms& c, const Call& call) {
      Started s;
      s.is_recv = true;
      s.tag = tag;
      const int count = as_count(static_cast<std::int64_t>(tensor.nbytes()), call);
      check(MPI_Irecv(tensor.raw_data(), count, MPI_BYTE, MPI_ANY_SOURCE, tag, c.p2p, s.add()),
            call, "MPI_Irecv(MPI_ANY_SOURCE)");
      s.outputs = {tensor};
      return s;
    };
    return push("recv_any_source", /*collective=*/false, backends::Fingerprint{}, opts.timeout,
                std::move(start));
  }

  // ---- Failure ----

  // Records the group's first failure and fails everything still queued. The worker fails what
  // it has started when it next looks.
  void fail(std::exception_ptr e) {
    OpQueue dropped;
    {
      std::lock_guard lock(mu_);
      if (failure_) return;
      failure_ = e;
      dropped.swap(queue_);
    }
    for (auto& op : dropped) op->fail_unstarted(e);
    cv_.notify_all();
  }

  // Gives up on a started op: a recv is cancelled (MPI can cancel those), anything else is
  // abandoned with its buffers kept alive.
  static void give_up(Active& a) {
    if (a.started.is_recv) {
      MpiLock lock;
      bool all_done = true;
      for (auto& req : a.started.requests) {
        if (req == MPI_REQUEST_NULL) continue;
        MPI_Cancel(&req);
        // A cancelled recv completes locally (or it matched and completes with the data).
        if (MPI_Wait(&req, MPI_STATUS_IGNORE) != MPI_SUCCESS) all_done = false;
      }
      if (all_done) return;
    }
    abandon(std::move(a));
  }

  // C10D_DEBUG=DETAIL: all-gathers the fingerprints on the collectives' communicator (so they
  // match in order with the collectives themselves) and compares them with rank 0's; the
  // InvalidArgument naming the calls, or null. Times out like the op it guards.
  std::exception_ptr check_fingerprints(const std::shared_ptr<OpWork>& op,
                                        Clock::time_point deadline, const Call& call) {
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
      check(
          MPI_Iallgather(bytes(buffer), static_cast<int>(kBytes), MPI_BYTE, bytes(buffer) + kBytes,
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

  // Tests a started op: true once every request completed. Throws NetworkError on an MPI error.
  static bool test(Active& a) {
    if (a.started.requests.empty()) return true;  // a blocking call, returned
    // Statuses, for MPI_ERR_IN_STATUS: which error a request completed with is only there. On
    // the stack for the few requests an op has.
    const std::size_t n = a.started.requests.size();
    std::array<MPI_Status, 4> few;
    std::vector<MPI_Status> many(n > few.size() ? n : 0);
    MPI_Status* statuses = many.empty() ? few.data() : many.data();
    int flag = 0;
    int rc;
    const bool any_source = a.started.is_recv && a.started.source < 0;
    int got = 0;  // an any-source recv's bytes
    {
      MpiLock lock;
      rc = MPI_Testall(static_cast<int>(n), a.started.requests.data(), &flag, statuses);
      if (rc == MPI_SUCCESS && flag != 0 && any_source) MPI_Get_count(&statuses[0], MPI_BYTE, &got);
    }
    if (rc == MPI_ERR_IN_STATUS) {
      for (std::size_t i = 0; i < n; ++i) {
        const int e = statuses[i].MPI_ERROR;
        if (any_source && e == MPI_ERR_TRUNCATE) {
          C10D_THROW(InvalidArgument,
                     "{} #{}: size mismatch: the message from rank {} is longer than the "
                     "{}-byte tensor",
                     a.work->op_name(), a.work->sequence(), statuses[i].MPI_SOURCE,
                     a.started.outputs.front().nbytes());
        }
        if (e != MPI_SUCCESS && e != MPI_ERR_PENDING) {
          C10D_THROW(NetworkError, "{} #{}: an MPI request failed: {}", a.work->op_name(),
                     a.work->sequence(), mpi_error_text(e));
        }
      }
    }
    if (rc != MPI_SUCCESS) {
      C10D_THROW(NetworkError, "{} #{}: MPI_Testall failed: {}", a.work->op_name(),
                 a.work->sequence(), mpi_error_text(rc));
    }
    if (flag != 0 && any_source) {
      // transport.h's size rule, which MPI does not make: a shorter message fails too.
      const auto want = a.started.outputs.front().nbytes();
      if (static_cast<std::size_t>(got) != want) {
        C10D_THROW(InvalidArgument,
                   "{} #{}: size mismatch: the message from rank {} has {} bytes, the tensor {}",
                   a.work->op_name(), a.work->sequence(), statuses[0].MPI_SOURCE, got, want);
      }
    }
    if (flag != 0 && a.started.is_recv) {
      a.work->set_source_rank(a.started.source >= 0 ? a.started.source : statuses[0].MPI_SOURCE);
    }
    return flag != 0;
  }

  // ---- The worker ----

  // Under mu_: moves the queued ops that may start now into `start`, in issue order. A
  // collective waits for the one in flight (the worker's or an inline one) and, while callers
  // wait for their collectives at once, for the schedule's grace after it could start, so that
  // its waiter can run it inline (InlineSchedule::worker_may_start).
  void take_startable_locked(OpQueue& start) {
    const auto now = Clock::now();
    while (!queue_.empty()) {
      if (queue_.front()->collective) {
        if (coll_running_.load(std::memory_order_acquire) || !schedule_.worker_may_start(now)) {
          return;
        }
        coll_running_.store(true, std::memory_order_relaxed);
      }
      start.push_back(std::move(queue_.front()));
      queue_.pop_front();
      schedule_.front_taken();
    }
  }

  // Under mu_, with nothing of the worker's in flight: sleeps until there is something to start
  // (or the grace above ends), an op a waiter gave up on, a failure to apply, or the destructor
  // (backends::InlineSchedule::idle_wait).
  void idle_wait_locked(std::unique_lock<std::mutex>& lock, bool failure_handled) {
    schedule_.idle_wait(
        lock, cv_,
        [&] { return stopping_ || (failure_ && !failure_handled) || adopted_.has_value(); },
        [&] {
          using Front = backends::InlineSchedule::Front;
          if (queue_.empty()) return Front::kEmpty;
          if (!queue_.front()->collective) return Front::kOther;
          return coll_running_.load(std::memory_order_acquire) ? Front::kBlocked
                                                               : Front::kStartable;
        });
  }

  // The worker thread's body. The loop catches what its ops throw; anything that still escapes
  // it (a Work callback that throws, say) fails the group, and the loop starts again to give up
  // what it holds (worker_coll_, worker_p2p_: MPI may still use their buffers) and to serve the
  // destructor, instead of std::terminate ending the process.
  void run_worker() {
    for (;;) {
      try {
        work_loop();
        return;
      } catch (...) {
        const std::string what = what_of(std::current_exception());
        C10D_LOG_ERROR("rank {}: the worker thread of MPI group {} failed: {}", rank(), name_,
                       what);
        try {
          fail(std::make_exception_ptr(Error(fmt::format(
              "rank {}: the worker thread of MPI group {} failed: {}", rank(), name_, what))));
        } catch (...) {  // a callback threw again: the group has failed all the same
        }
      }
    }
  }

  void work_loop() {
    // Members, not locals: what the worker holds outlives an exception (run_worker).
    std::optional<Active>& coll = worker_coll_;  // the collective it started and tests
    std::list<Active>& p2p = worker_p2p_;        // posted sends and recvs
    auto nap = std::chrono::microseconds(0);
    auto last_progress = Clock::now();
    bool failure_handled = false;  // the failure_ seen has been applied to what this loop holds
    const auto wake = [&] {
      return stopping_ || !queue_.empty() || adopted_ || (failure_ && !failure_handled);
    };
    for (;;) {
      OpQueue start;  // ops to start now, in issue order
      std::exception_ptr failed;
      bool stop = false;
      {
        std::unique_lock lock(mu_);
        if (!coll && p2p.empty()) idle_wait_locked(lock, failure_handled);
        if (adopted_) {
          coll = std::move(adopted_);
          adopted_.reset();
        }
        stop = stopping_;
        failed = stopping_ ? stop_reason_ : failure_;
        if (!failed) take_startable_locked(start);
      }
      if (failed) {
        // Destroyed or failed: everything this worker holds fails with the reason (each op
        // given up and dropped before its callbacks run, which may throw).
        if (coll) {
          auto work = coll->work;
          give_up(*coll);
          coll.reset();
          work->finish_with_error(failed);
        }
        while (!p2p.empty()) {
          Active a = std::move(p2p.front());
          p2p.pop_front();
          auto work = a.work;
          give_up(a);
          work->finish_with_error(failed);
        }
        if (stop) return;
        failure_handled = true;
        continue;  // sleeps until more work or the destructor
      }
      bool progressed = false;
      std::shared_ptr<OpWork> op;  // the op being started
      try {
        while (!start.empty()) {
          op = std::move(start.front());
          start.pop_front();
          const Call call = describe(*op);
          Active a{op, {}, Clock::now() + op->timeout};
          progressed = true;
          if (op->collective && detail_) {
            // Every rank sees the same fingerprints and skips this op alike, so the
            // communicator's collectives stay matched and the group stays usable.
            if (auto mismatch = check_fingerprints(op, a.deadline, call)) {
              op->fail_unstarted(mismatch);
              op.reset();
              collective_done();
              continue;
            }
          }
          {
            // A blocking call is watched while it runs here.
            std::optional<WatchGuard> watch;
            if (comms_.blocking && op->collective) watch.emplace(*this, a.deadline, call);
            MpiLock lock;
            a.started = op->start(comms_, call);
          }
          if (op->collective) {
            coll = std::move(a);
          } else {
            p2p.push_back(std::move(a));
          }
          op.reset();
        }
        if (coll && test(*coll)) {
          auto done = std::move(*coll);
          coll.reset();
          collective_done();
          done.work->finish(done.started.finish());
          progressed = true;
        } else if (coll && Clock::now() >= coll->deadline) {
          C10D_THROW(TimeoutError, "{} timed out", describe(*coll->work).str());
        }
        for (auto it = p2p.begin(); it != p2p.end();) {
          if (test(*it)) {
            auto done = std::move(*it);
            it = p2p.erase(it);
            done.work->finish(done.started.finish());
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
      } catch (...) {
        // The op whose start threw, and those taken but not started, fail with the group
        // (fail() only sees the queue). The first keeps its closure: MPI may hold some of its
        // buffers.
        const auto error = std::current_exception();
        fail(error);
        if (op) op->finish_with_error(error);
        for (auto& taken : start) taken->fail_unstarted(error);
        continue;
      }
      // Progress happens only inside MPI calls: poll hard right after progress, then back off
      // (yielding first, sleeping up to 200 us) so idle ranks leave the cores to busy ones.
      const auto now = Clock::now();
      if (progressed) {
        last_progress = now;
        nap = std::chrono::microseconds(0);
      } else if (now - last_progress < std::chrono::milliseconds(2)) {
        std::this_thread::yield();
      } else {
        nap = std::min(std::max(nap * 2, std::chrono::microseconds(10)),
                       std::chrono::microseconds(200));
        std::unique_lock lock(mu_);
        cv_.wait_for(lock, nap, wake);
      }
    }
  }

  // Under mu_: watches the blocking collective about to start (the watchdog ends the job past
  // `deadline`) until unwatched; the Work `call` names must live until then. True when the
  // watchdog must be woken. A waiter arms it while it takes the op and collective_done()
  // disarms it, both in critical sections the op needs anyway; the worker uses a WatchGuard.
  bool watch_locked(Clock::time_point deadline, const Call& call) {
    watched_ = call;
    return watchdog_->watch_locked(deadline);
  }

  // The worker's watch of one blocking call, for the call's scope.
  class WatchGuard {
   public:
    WatchGuard(ProcessGroupMPI& g, Clock::time_point deadline, const Call& call) : g_(g) {
      bool wake = false;
      {
        std::lock_guard lock(g_.mu_);
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

  // How errors name an op: "rank 0: all_reduce #3 (MPI group world)".
  Call describe(const OpWork& w) const { return Call{rank(), w.op, w.sequence(), &name_}; }

  static constexpr unsigned kClockEvery = 16;

  // The blocking collective this thread watched returned (or failed).
  void unwatch() {
    if (watchdog_) watchdog_->unwatch();
  }

  // The collective in flight ended (the worker's or a waiter's): the next may start. Without
  // mu_ (one lock less per op): whoever starts the next collective reads coll_running_ under
  // mu_ anyway, and the worker looks at a blocked queue every InlineSchedule::kGrace, which
  // restarts the next collective's grace when it finds it startable.
  void collective_done() {
    unwatch();
    coll_running_.store(false, std::memory_order_release);
  }

  const backends::OpChecks checks_;
  const Milliseconds timeout_;
  const std::string name_;
  const bool detail_ = backends::detail_from_env();
  Comms comms_;  // after construction, read by the worker and by waiters (run_inline)
  MPI_Comm control_ = MPI_COMM_NULL;  // new_group's splits, on the caller's thread
  std::mutex split_mu_;               // serializes new_group
  std::uint32_t next_child_ = 0;      // GUARDED_BY(split_mu_)

  std::mutex mu_;
  std::condition_variable cv_;       // queue_, failure_ or stopping_ changed; waits on mu_
  OpQueue queue_;                    // GUARDED_BY(mu_)
  std::uint64_t next_sequence_ = 0;  // GUARDED_BY(mu_); collectives
  std::uint64_t next_p2p_ = 0;       // GUARDED_BY(mu_); sends and recvs
  std::exception_ptr failure_;       // GUARDED_BY(mu_)
  std::exception_ptr stop_reason_;   // GUARDED_BY(mu_)
  bool stopping_ = false;            // GUARDED_BY(mu_)
  // Inline collectives (run_inline) and the worker's part in them; GUARDED_BY(mu_).
  backends::InlineSchedule schedule_{!detail_ && backends::inline_from_env()};
  // A collective is in flight, the worker's or inline; set under mu_, cleared without it.
  std::atomic<bool> coll_running_{false};
  std::optional<Active> adopted_;  // started by a waiter that stopped waiting
  // The worker thread's alone (work_loop).
  std::optional<Active> worker_coll_;
  std::list<Active> worker_p2p_;
  // Work's wait hook for collectives (run_inline), shared by every Work.
  std::shared_ptr<const Work::WaitHook> wait_hook_;
  // Watches blocking collectives (comms_.blocking); destroyed after the worker is joined.
  std::optional<mpi::DeadlineWatchdog> watchdog_;
  Call watched_{};  // GUARDED_BY(mu_); the call watchdog_ watches, named if it expires
  std::thread worker_;
};

}  // namespace

std::shared_ptr<ProcessGroup> make_process_group_mpi(Milliseconds timeout) {
  ensure_runtime();
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 0;
  {
    MpiLock lock;
    throw_if_error(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "make_process_group_mpi: MPI_Comm_dup");
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  return std::make_shared<ProcessGroupMPI>(comm, rank, size, timeout, "world");
}

}  // namespace c10d::inline v1
