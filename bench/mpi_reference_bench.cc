// c10d-mpi-reference: the c10d-bench sweep run straight on MPI calls, as the reference that
// c10d's backends are measured against.
//
//   mpirun -np N c10d-mpi-reference all_reduce|broadcast|reduce|all_gather|reduce_scatter|
//              all_to_all [-b 8] [-e 64M] [-f 2 | -i 1M] [-n 20] [-w 5] [-c 1]
//              [-d float|double|int32|int64|int8|uint8] [-o sum|prod|min|max|avg] [-r 0]
//              [--json FILE]
//
// Flags, sizes, timing, checking and output are c10d-bench's (bench/sweep_args.h,
// bench/nccl_sweep.h); only the calls differ: MPI_Allreduce, MPI_Bcast, MPI_Reduce, MPI_Allgather,
// MPI_Reduce_scatter_block and MPI_Alltoall on MPI_COMM_WORLD, blocking. In place is MPI_IN_PLACE:
// all_reduce and all_to_all on the receive buffer; all_gather with this rank's block already in
// place; reduce on the root; reduce_scatter with the input in the receive buffer, where MPI puts
// the result at the start of the buffer (nccl-tests expects it at this rank's block; we check where
// MPI puts it). MPI_Bcast has a single buffer, so broadcast's out-of-place columns are N/A.
//
// MPI has no AVG: avg runs MPI_SUM and divides the result locally, inside the timed call, as
// c10d does once at the end. MPI has no 16-bit float types either: half and bfloat16 are
// refused.
//
// Exit status: 0; 1 when a value was wrong; 2 for a bad flag or datatype.
#include <fmt/format.h>
#include <mpi.h>

#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <span>
#include <string>
#include <string_view>

#include "c10d/errors.h"
#include "nccl_sweep.h"

namespace {

using c10d::DType;
using c10d::ReduceOp;
using c10d::bench::Collective;
using c10d::bench::OpCall;

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return MPI_FLOAT;
    case DType::kFloat64:
      return MPI_DOUBLE;
    case DType::kInt8:
      return MPI_INT8_T;
    case DType::kUInt8:
      return MPI_UINT8_T;
    case DType::kInt32:
      return MPI_INT32_T;
    case DType::kInt64:
      return MPI_INT64_T;
    default:
      return MPI_DATATYPE_NULL;  // half, bfloat16: refused in main
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    default:
      return MPI_SUM;  // sum, and avg before its division
  }
}

class MpiBackend : public c10d::bench::SweepBackend {
 public:
  MpiBackend() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }

  std::string name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  std::string unsupported(Collective collective, bool in_place) const override {
    if (collective == Collective::kBroadcast && !in_place) return "MPI_Bcast has one buffer";
    return "";
  }

  const void* prepare(const OpCall& call) override {
    if (call.count > INT_MAX) {
      throw c10d::InvalidArgument(
          fmt::format("count {} does not fit an MPI count (int)", call.count));
    }
    call_ = call;
    type_ = mpi_type(call.dtype);
    op_ = mpi_op(call.op);
    count_ = static_cast<int>(call.count);
    if (call.in_place && call.collective == Collective::kReduceScatter) return call.send;
    return call.recv;
  }

  void start() override {
    const OpCall& c = call_;
    const bool root = rank_ == c.root;
    void* recv = c.recv;
    switch (c.collective) {
      case Collective::kAllReduce:
        MPI_Allreduce(in_place_or(c.send), recv, count_, type_, op_, MPI_COMM_WORLD);
        break;
      case Collective::kBroadcast:
        MPI_Bcast(recv, count_, type_, c.root, MPI_COMM_WORLD);
        break;
      case Collective::kReduce:
        // In place only the root names MPI_IN_PLACE; the others send from the one buffer.
        MPI_Reduce(c.in_place && root ? MPI_IN_PLACE : c.send, recv, count_, type_, op_, c.root,
                   MPI_COMM_WORLD);
        break;
      case Collective::kAllGather:
        MPI_Allgather(in_place_or(c.send), count_, type_, recv, count_, type_, MPI_COMM_WORLD);
        break;
      case Collective::kReduceScatter:
        recv = c.in_place ? c.send : c.recv;  // in place: input and result in the buffer
        MPI_Reduce_scatter_block(in_place_or(c.send), recv, count_, type_, op_, MPI_COMM_WORLD);
        break;
      case Collective::kAllToAll:
        MPI_Alltoall(in_place_or(c.send), count_, type_, recv, count_, type_, MPI_COMM_WORLD);
        break;
    }
    const bool has_result = c.collective != Collective::kReduce || root;
    if (c.op == ReduceOp::kAvg && has_result && c.collective != Collective::kBroadcast &&
        c.collective != Collective::kAllGather && c.collective != Collective::kAllToAll) {
      c10d::bench::finish_average(c.dtype, recv, c.count, size_);
    }
  }

  void complete() override {}  // every call above is blocking

  void barrier() override { MPI_Barrier(MPI_COMM_WORLD); }

  double max_over_ranks(double value) override {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return value;
  }

  std::int64_t sum_over_ranks(std::int64_t value) override {
    MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
    return value;
  }

  void all_gather_bytes(std::span<const char> mine, std::span<char> all) override {
    const auto bytes = static_cast<int>(mine.size());
    MPI_Allgather(mine.data(), bytes, MPI_BYTE, all.data(), bytes, MPI_BYTE, MPI_COMM_WORLD);
  }

 private:
  const void* in_place_or(const void* send) const { return call_.in_place ? MPI_IN_PLACE : send; }

  int rank_ = 0;
  int size_ = 1;
  OpCall call_;
  MPI_Datatype type_ = MPI_DATATYPE_NULL;
  MPI_Op op_ = MPI_SUM;
  int count_ = 0;
};

// MPI_Init and MPI_Finalize around main's body. C10D_REF_THREAD_MULTIPLE=1 initializes with
// MPI_THREAD_MULTIPLE, the level c10d's MPI backend asks for, under which Open MPI takes locks
// in every call: bench/compare_mpi.py --backend mpi compares against both.
struct MpiSession {
  MpiSession(int* argc, char*** argv) {
    const char* multiple = std::getenv("C10D_REF_THREAD_MULTIPLE");
    if (multiple != nullptr && std::string_view(multiple) == "1") {
      int provided = 0;
      MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
    } else {
      MPI_Init(argc, argv);
    }
  }
  ~MpiSession() { MPI_Finalize(); }
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;
};

int run(int argc, char** argv) {
  constexpr std::string_view kProgram = "c10d-mpi-reference";
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const auto parsed = c10d::bench::parse_sweep_args(
      kProgram, std::span<char* const>(argv + 1, static_cast<std::size_t>(argc - 1)), false);
  std::string error = parsed.error;
  if (error.empty() && mpi_type(parsed.args.dtype) == MPI_DATATYPE_NULL) {
    error = "MPI has no half or bfloat16 datatype; use float, double, int32, int64, int8, uint8";
  }
  if (!error.empty()) {
    if (rank == 0) {
      fmt::print(stderr, "{}: {}\n{}", kProgram, error, c10d::bench::usage(kProgram, false));
    }
    return 2;
  }
  if (parsed.args.help) {
    if (rank == 0) fmt::print("{}", c10d::bench::usage(kProgram, false));
    return 0;
  }
  MpiBackend backend;
  return c10d::bench::run_sweep(parsed.args, backend);
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured, even in a pipe
  MpiSession mpi(&argc, &argv);
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "c10d-mpi-reference: {}\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);  // the other ranks may be waiting in a collective
    return 1;
  }
}
