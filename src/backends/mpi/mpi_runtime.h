// The MPI runtime the MPI group runs on, once per process: initialization at a thread level,
// the serialization mutex, c10d's datatypes and reduce ops, and MPI's error text.
//
// MPI lifetime: the first group initializes MPI with MPI_Init_thread(MPI_THREAD_MULTIPLE, or
// MPI_THREAD_SERIALIZED under C10D_MPI_THREAD_LEVEL=serialized) unless the program already did;
// MPI_Finalize then runs at exit (atexit), only if we initialized it. With MPI_THREAD_SERIALIZED
// every MPI call of every group, the worker's and an inline waiter's alike, takes one
// process-wide mutex (MpiLock), which is all that level asks: calls from several threads, never
// two at once. Below SERIALIZED the backend refuses (Unsupported).
//
// Reductions: every reduce op is a user-defined, commutative MPI_Op over per-dtype datatypes
// that calls algorithms::reduce_into, so the arithmetic is exactly the TCP backend's (integer
// wraparound, NaN propagation, bool as logical ops, float16/bfloat16 rounding). MPI's own ops
// differ in places: Open MPI 4.1's AVX sum of MPI_INT8_T and MPI_UINT8_T saturates (200 + 100
// gives 255: the conformance suite caught it when MPI_SUM was tried), and for float32 sums they
// measured no faster (docs/benchmarks.md). AVG and PREMUL_SUM use the sum (the group finishes
// them). Datatypes are MPI's own where one has the dtype's size, so the calls match what a raw
// MPI program passes (a derived datatype may take Open MPI's general convertor; no difference
// beyond noise was measured at 64 KiB); float16 and bfloat16 are contiguous bytes.
//
// Thread-safety: ensure_runtime() once before anything else (any thread); the rest from any
// thread after it.
#pragma once

#include <mpi.h>

#include <mutex>
#include <string>
#include <string_view>

#include "backends/mpi/nbc_allreduce_choice.h"
#include "c10d/types.h"

namespace c10d::inline v1::mpi {

struct Runtime {
  bool serialized = false;  // provided == MPI_THREAD_SERIALIZED: lock every call
  std::mutex mu;            // taken around every MPI call when `serialized`
  MPI_Datatype types[kNumDTypes] = {};
  MPI_Op sum = MPI_OP_NULL, product = MPI_OP_NULL, min = MPI_OP_NULL, max = MPI_OP_NULL,
         band = MPI_OP_NULL, bor = MPI_OP_NULL, bxor = MPI_OP_NULL;
  NbcAllreduceChoice allreduce_algorithm;
  int tag_ub = 32767;  // MPI_TAG_UB; 32767 is the least the standard allows
};

// The process's runtime (leaked: used by atexit and by late destructors).
inline Runtime& runtime() {
  static Runtime* r = new Runtime;
  return *r;
}

// Initializes MPI once per process (unless the program did) and creates the datatypes and ops.
void ensure_runtime();

// Holds the process-wide MPI mutex when MPI only provides MPI_THREAD_SERIALIZED.
class MpiLock {
 public:
  MpiLock() {
    if (runtime().serialized) lock_ = std::unique_lock(runtime().mu);
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

std::string mpi_error_text(int rc);
bool mpi_finalized();
// NetworkError "`what` failed: <MPI's text>" unless `rc` is MPI_SUCCESS.
void throw_if_error(int rc, std::string_view what);

inline MPI_Datatype mpi_type(DType d) { return runtime().types[static_cast<int>(d)]; }

inline MPI_Op mpi_op(ReduceOp op) {
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

}  // namespace c10d::inline v1::mpi
