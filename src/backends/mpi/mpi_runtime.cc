#include "backends/mpi/mpi_runtime.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "algorithms/reduce_kernels.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "core/logging.h"

namespace c10d::inline v1::mpi {
namespace {

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

void create_types_and_ops(Runtime& rt) {
  for (int d = 0; d < kNumDTypes; ++d) {
    // MPI's own datatype where it has one of the same size (see the header); either way the
    // reduction is ours (user_reduce finds the dtype by its datatype).
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
  throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kProduct>, 1, &rt.product), "MPI_Op_create");
  throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kMin>, 1, &rt.min), "MPI_Op_create");
  throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kMax>, 1, &rt.max), "MPI_Op_create");
  throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kBand>, 1, &rt.band), "MPI_Op_create");
  throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kBor>, 1, &rt.bor), "MPI_Op_create");
  throw_if_error(MPI_Op_create(&user_reduce<ReduceOp::kBxor>, 1, &rt.bxor), "MPI_Op_create");
}

}  // namespace

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

void throw_if_error(int rc, std::string_view what) {
  if (rc != MPI_SUCCESS) C10D_THROW(NetworkError, "{} failed: {}", what, mpi_error_text(rc));
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
    create_types_and_ops(rt);
  });
}

}  // namespace c10d::inline v1::mpi
