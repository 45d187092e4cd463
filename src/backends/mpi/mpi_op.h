// The MPI group's op state: how an op names itself in errors (Call), the communicators it runs
// on (Comms), the queued op (OpWork: the Work its caller holds, with the closure that starts it),
// a started op (Started: its requests, outputs and the buffers MPI uses until completion), and
// testing, cancelling or abandoning one (Active).
//
// How a collective is called (Comms::blocking, C10D_MPI_BLOCKING): the blocking MPI function
// (MPI_Allreduce, ...: what raw MPI programs call, and Open MPI's fastest path; its nonblocking
// collectives, libnbc, are a schedule interpreter, measured up to 1.8x slower over TCP,
// docs/benchmarks.md), or with C10D_MPI_BLOCKING=0 its nonblocking twin (MPI_Iallreduce, ...),
// tested until it completes or its deadline passes. Every rank must choose alike (MPI never
// matches a blocking collective with a nonblocking one); the thread that calls never matters.
//
// MPI cannot cancel a collective, so an op abandoned on timeout, abort or destruction keeps its
// buffers (and scratch) alive for the rest of the process (abandon).
#pragma once

#include <mpi.h>

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "algorithms/reduce_kernels.h"
#include "backends/common/fingerprint.h"
#include "backends/common/op_runner.h"
#include "backends/mpi/mpi_runtime.h"
#include "c10d/errors.h"
#include "c10d/work.h"
#include "core/check.h"
#include "core/parse.h"

namespace c10d::inline v1::mpi {

using Clock = std::chrono::steady_clock;

// MPI counts are ints.
inline int as_count(std::int64_t n, std::string_view op) {
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

inline int as_count(std::int64_t n, const Call& call) {
  return n > INT_MAX ? as_count(n, call.str()) : static_cast<int>(n);
}

// NetworkError "<call>: <what> failed: <MPI's text>" unless `rc` is MPI_SUCCESS.
inline void check(int rc, const Call& call, std::string_view what) {
  if (rc != MPI_SUCCESS)
    C10D_THROW(NetworkError, "{}: {} failed: {}", call.str(), what, mpi_error_text(rc));
}

inline std::uint8_t* bytes(const Tensor& t) { return static_cast<std::uint8_t*>(t.raw_data()); }

inline Tensor scratch_bytes(std::size_t n) {
  return Tensor::empty({static_cast<std::int64_t>(n)}, DType::kUInt8);
}

// Whether collectives are blocking MPI calls: C10D_MPI_BLOCKING, a flag, default on.
inline bool blocking_from_env() { return core::env_flag("C10D_MPI_BLOCKING").value_or(true); }

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
  // A recv's sender (WorkControl::set_source_rank once it completed); -1 for one from
  // MPI_ANY_SOURCE, whose status names it. `tag`: the any-source recv's, for its timeout.
  int source = -1;
  int tag = -1;
};

// Started::then for AVG: divides each output by the group size.
inline auto average(int n) {
  return [n](const std::vector<Tensor>& outputs) {
    for (const auto& t : outputs) algorithms::finish_average(t.dtype(), t.raw_data(), t.numel(), n);
  };
}

// Started::then for gathers into a scratch buffer: copies block r of `all` to output r. (`all`
// must also be in Started::keep.)
inline auto copy_out(const Tensor& all, std::size_t block) {
  return [data = bytes(all), block](const std::vector<Tensor>& outputs) {
    for (std::size_t r = 0; r < outputs.size(); ++r) {
      if (block > 0) std::memcpy(bytes(outputs[r]), data + r * block, block);
    }
  };
}

// Calls one collective: the blocking MPI function when the group's collectives block
// (Comms::blocking), else its nonblocking twin, whose request joins the Started `s`. A failure is
// a NetworkError naming the op and the MPI function. The two functions take the same arguments
// but the nonblocking one's trailing request.
#define C10D_MPI_COLLECTIVE(c, s, call, blocking_fn, nonblocking_fn, ...)                       \
  check((c).blocking ? blocking_fn(__VA_ARGS__) : nonblocking_fn(__VA_ARGS__, (s).add()), call, \
        (c).blocking ? #blocking_fn : #nonblocking_fn)

// A queued op: the Work its caller holds and the runner's op (record, timeout), with what the op
// needs to start. The closure that starts it lives in the same allocation (OpWorkOf), so queueing
// an op allocates once.
class OpWork : public Work, public backends::RunnerOp {
 public:
  OpWork(const backends::OpRecord& record, Milliseconds timeout)
      : Work(std::string(record.op), record.sequence),
        RunnerOp(static_cast<Work&>(*this), record, timeout) {}

  // Posts the op's MPI calls (on the worker, or on the thread that waits for it); called once.
  // `call` prefixes errors ("rank 0: op #3").
  virtual Started start(const Comms& c, const Call& call) = 0;
  // Fails an op that never started, dropping its closure (and the tensors it holds).
  void fail_unstarted(std::exception_ptr error) override {
    drop_start();
    fail(std::move(error));
  }

  backends::Fingerprint fingerprint;  // compared across ranks under C10D_DEBUG=DETAIL

 private:
  virtual void drop_start() = 0;
};

template <typename Start>
class OpWorkOf final : public OpWork {
 public:
  OpWorkOf(const backends::OpRecord& record, Milliseconds timeout, Start start)
      : OpWork(record, timeout), start_(std::move(start)) {}

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

// An op in flight: started, tested until done or its deadline.
struct Active {
  std::shared_ptr<OpWork> work;
  Started started;
  Clock::time_point deadline;
};

// Tests a started op: true once every request completed (and then a recv's source rank is set).
// Throws NetworkError on an MPI error, InvalidArgument when an any-source message's size differs
// from the tensor's.
bool test_requests(Active& a);
inline bool test(Active& a) {
  return a.started.requests.empty() || test_requests(a);  // none: a blocking call, returned
}
// Gives up on a started op: a recv is cancelled (MPI can cancel those), anything else is
// abandoned with its buffers kept alive for the process's life.
void give_up(Active& a);

}  // namespace c10d::inline v1::mpi
