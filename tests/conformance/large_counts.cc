// The large count (Config::large_count, 1 << 20 by default) for a representative subset of
// dtypes and ops, through the same single-op checks as the full sweeps.
#include <algorithm>

#include "cases.h"

namespace c10d::inline v1::conformance {

// The large count, for a representative subset only (the whole sweep at 1 << 20 elements
// would take minutes): all_reduce (the ring path) for float32 and bfloat16 x SUM/AVG/MAX and
// int64 x SUM/MAX, one view; broadcast (the chain path) float32 from the last rank and
// bfloat16 from 0; reduce float32 SUM; send/recv float32. The ops whose buffers hold one block
// per rank use blocks of large_count / world elements: all_gather float32, all_gather_into_tensor
// bfloat16 in place, reduce_scatter bfloat16 AVG, reduce_scatter_tensor float32 SUM and int64
// SUM in place, all_to_all int64, gather float32 at the last rank, scatter float32 from 0.
void large_counts_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const std::int64_t big = config.large_count;
  if (big <= 0) return;
  const int n = pg.size();
  const std::int64_t block = std::max<std::int64_t>(1, big / n);
  const DType f32 = DType::kFloat32;
  const DType bf16 = DType::kBFloat16;
  const DType i64 = DType::kInt64;
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax}) {
    all_reduce_once(pg, config, rep, f32, op, big, false);
    all_reduce_once(pg, config, rep, bf16, op, big, false);
    if (op != ReduceOp::kAvg) all_reduce_once(pg, config, rep, i64, op, big, false);
  }
  all_reduce_once(pg, config, rep, f32, ReduceOp::kSum, big, true);
  broadcast_once(pg, config, rep, f32, big, n - 1, false);
  broadcast_once(pg, config, rep, bf16, big, 0, true);
  reduce_once(pg, config, rep, f32, ReduceOp::kSum, big, n - 1, false);
  all_gather_once(pg, config, rep, f32, block, false);
  all_gather_into_tensor_once(pg, config, rep, bf16, block, true);
  reduce_scatter_once(pg, config, rep, bf16, ReduceOp::kAvg, block, false);
  reduce_scatter_tensor_once(pg, config, rep, f32, ReduceOp::kSum, block, false);
  reduce_scatter_tensor_once(pg, config, rep, i64, ReduceOp::kSum, block, true);
  all_to_all_once(pg, config, rep, i64, block);
  gather_once(pg, config, rep, f32, block, n - 1, false);
  scatter_once(pg, config, rep, f32, block, 0, false);
  if (n >= 2) send_recv_once(pg, config, rep, f32, big);
}

}  // namespace c10d::inline v1::conformance
