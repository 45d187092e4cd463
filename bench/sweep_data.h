// sweep_data: the values the nccl-tests sweep (nccl_sweep.h) puts into its buffers and the
// closed forms it checks the results against. Shared by c10d-bench and c10d-mpi-reference.
//
// Words used here:
//  - count: nccl-tests' per-rank element count of a call (its "paramcount"): the elements one
//    rank contributes to all_gather, receives in reduce_scatter, sends to each peer in
//    all_to_all, or the whole buffer of all_reduce, broadcast and reduce.
//  - index: the position of an element in a rank's send buffer (all_reduce, reduce,
//    reduce_scatter) or its position inside its block (the copying collectives).
//  - reduction pattern: what rank r puts at index i for a reduction, chosen per (op, dtype,
//    world size) so that every partial result of any reduction order is an integer (or, for
//    prod, a power of two) the dtype holds exactly. The result then does not depend on the
//    order or grouping of the reduction, and its closed form is exact:
//      sum, avg   (r + i) mod k, k = 1 + min(63, L / n), L the largest integer below which the
//                 dtype holds every integer (127 for int8, 256 for bfloat16, 2048 for half, ...)
//      min, max   (r + i) mod 64
//      prod       2 when r < t and (r + i) mod 3 == 0, else 1; t caps the number of factors 2
//                 so the product fits (6 for int8, 15 for half, 127 for float, ...)
//    avg is the exact sum divided once at the end, in float32 (float64 for double), rounded to
//    the dtype: what c10d's finish_average does, and what finish_average() below does for MPI.
//  - copy pattern: (13 k + i) mod 127 for block k, used by broadcast, all_gather and
//    all_to_all; every value fits every dtype exactly.
//  - sentinel: -1 (255 for uint8), written over every output element before a checked call
//    so that an element the collective never wrote is counted wrong.
//
// Pure functions over caller-owned memory; thread-safe for disjoint buffers.
#pragma once

#include <cstdint>

#include "c10d/types.h"

namespace c10d::inline v1::bench {

enum class Collective { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAllToAll };
// all_reduce, reduce and reduce_scatter: the collectives that take a reduce op.
bool is_reduction(Collective collective);

// One call of a collective as nccl-tests lays it out. For in place, `send` points into the
// receive buffer at nccl-tests' offset for this rank (all_gather: this rank's block of the
// output; the others: the start of the buffer) and `recv` at where nccl-tests expects the
// result (reduce_scatter: this rank's block of the input; the others: the start).
struct OpCall {
  Collective collective = Collective::kAllReduce;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool in_place = false;
  std::int64_t count = 0;  // per-rank elements (see "count" above)
  void* send = nullptr;
  void* recv = nullptr;
};

// Elements of the send buffer and of the receive buffer of one call.
std::int64_t send_elements(const OpCall& call, int world_size);
std::int64_t recv_elements(const OpCall& call, int world_size);

// Writes the sentinel over the `recv_buffer_elements` elements at `recv_buffer`, then this
// rank's inputs for `call` at call.send (which, in place, lies inside the receive buffer).
void fill_buffers(const OpCall& call, int rank, int world_size, void* recv_buffer,
                  std::int64_t recv_buffer_elements);

// The number of elements of this rank's result at `output` that differ from the closed form
// (0 on ranks that receive nothing: every rank but the root of a reduce).
std::int64_t count_wrong(const OpCall& call, int rank, int world_size, const void* output);

// data[i] = data[i] / world_size for a floating dtype, rounded as c10d's AVG rounds (float32
// arithmetic for float, half and bfloat16; float64 for double). For backends without an AVG.
void finish_average(DType dtype, void* data, std::int64_t count, int world_size);

}  // namespace c10d::inline v1::bench
