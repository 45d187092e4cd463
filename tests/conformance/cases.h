// The conformance cases (conformance.h lists what each covers), and the single-op checks they
// are made of, which large_counts reuses with the large count. Every function runs on every
// rank of `pg` with the same arguments.
#pragma once

#include <cstdint>

#include "c10d/process_group.h"
#include "c10d/types.h"
#include "check.h"
#include "conformance.h"

namespace c10d::inline v1::conformance {

// ---- Single ops (reduction_cases.cc) ----
// `view`: the tensor is a view into a larger one whose other elements must stay untouched.
void all_reduce_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                     ReduceOp op, std::int64_t count, bool view);
void reduce_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype, ReduceOp op,
                 std::int64_t count, int root, bool view);
void reduce_scatter_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                         ReduceOp op, std::int64_t count, bool in_place);
void reduce_scatter_tensor_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                                ReduceOp op, std::int64_t count, bool in_place);

// ---- Single ops (movement_cases.cc) ----
void broadcast_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                    std::int64_t count, int root, bool view);
void all_gather_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                     std::int64_t count, bool in_place);
void all_gather_into_tensor_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                                 std::int64_t count, bool in_place);
void all_to_all_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                     std::int64_t count);
// Rank s sends ((s + 2 d + 1) mod 3) * unit rows of 3 elements to rank d: uneven, some empty.
void all_to_all_split_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                           std::int64_t unit);
void gather_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                 std::int64_t count, int root, bool in_place);
void scatter_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                  std::int64_t count, int root, bool in_place);
// A ring exchange: two tensors to the next rank on tags 1 and 2, the receiver posting tag 2
// first. Needs two ranks or more.
void send_recv_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                    std::int64_t count);

// ---- Cases ----
void all_reduce_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void reduce_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void reduce_scatter_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void reduce_scatter_tensor_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void nan_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void tensor_lists_case(ProcessGroup& pg, const Config& config, Reporter& rep);

void broadcast_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void all_gather_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void all_gather_into_tensor_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void all_to_all_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void all_to_all_split_sizes_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void gather_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void scatter_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void send_recv_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void recv_any_source_case(ProcessGroup& pg, const Config& config, Reporter& rep);

void barrier_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void work_semantics_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void in_order_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void subgroups_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void bad_arguments_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void large_counts_case(ProcessGroup& pg, const Config& config, Reporter& rep);
void errors_case(ProcessGroup& pg, const Config& config, Reporter& rep);

}  // namespace c10d::inline v1::conformance
