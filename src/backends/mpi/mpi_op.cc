#include "backends/mpi/mpi_op.h"

#include <array>
#include <mutex>

#include "core/work_control.h"

namespace c10d::inline v1::mpi {
namespace {

// Ops abandoned on timeout, abort or destruction: MPI may still write their buffers, so the
// tensors their closures hold stay alive until the process ends.
void abandon(Active a) {
  static std::mutex mu;
  static auto* kept = new std::vector<Active>;
  std::lock_guard lock(mu);
  kept->push_back(std::move(a));
}

}  // namespace

void give_up(Active& a) {
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

bool test_requests(Active& a) {
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
    core::WorkControl::set_source_rank(
        *a.work, a.started.source >= 0 ? a.started.source : statuses[0].MPI_SOURCE);
  }
  return flag != 0;
}

}  // namespace c10d::inline v1::mpi
