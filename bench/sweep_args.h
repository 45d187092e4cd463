// sweep_args: the command line of the nccl-tests sweep (nccl_sweep.h), shared by c10d-bench
// and c10d-mpi-reference, and the names it uses for collectives and dtypes.
//
//   PROGRAM COLLECTIVE [flags]
//   COLLECTIVE: all_reduce | broadcast | reduce | all_gather | reduce_scatter | all_to_all
//
// Flags (as nccl-tests; sizes take K, M, G suffixes, powers of 1024; a value may follow the
// flag as the next argument, or be attached: -b8, --minbytes=8):
//   -b, --minbytes SIZE      first size (default 32M)
//   -e, --maxbytes SIZE      last size (default 32M)
//   -f, --stepfactor N       multiply the size by N each step (default 1: add -i instead)
//   -i, --stepbytes SIZE     add SIZE each step when -f is 1 (default 1M)
//   -n, --iters N            timed iterations per size, 1 or more (default 20)
//   -w, --warmup_iters N     untimed iterations at the largest and smallest size (default 5)
//   -c, --check 0|1          1: check the results of one more call after the timed ones
//                            (default 1)
//   -d, --datatype NAME      float|half|bfloat16|double|int32|int64|int8|uint8 (default float)
//   -o, --op NAME            sum|prod|min|max|avg (default sum; avg needs a floating type)
//   -r, --root N             root of broadcast and reduce (default 0)
//   -z, --blocking 0|1       1: wait for each call before issuing the next, as a program
//                            that calls all_reduce(...)->wait() does (default 0: issue the -n
//                            calls back to back, then wait for them all)
//   --json FILE              also write every measured row as a JSON array (rank 0)
//   --backend NAME           only where the program accepts it (c10d-bench: tcp|mpi|ici)
//   -h, --help
//
// Every value is checked whole: a number with anything after it ("1Q", "5x"), out of its range
// ("-n -1", "-c 7") or past 10^18 bytes is an error naming the flag and what it takes. A size is
// a whole number of bytes; a call moves whole elements (the size rounded down, as nccl-tests),
// so -b under one element, or -i under one element when -f is 1, is refused rather than
// rounded to nothing; -b above -e is refused. Whether the buffers fit in memory, and which
// sizes give every rank of a split collective an element, are settled by run_sweep
// (nccl_sweep.h), which knows the world.
//
// Parsing is a pure function of the arguments: it never throws and never exits.
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "c10d/types.h"
#include "sweep_data.h"

namespace c10d::inline v1::bench {

struct SweepArgs {
  std::string program;  // for messages and the header
  Collective collective = Collective::kAllReduce;
  std::size_t min_bytes = std::size_t{32} << 20;
  std::size_t max_bytes = std::size_t{32} << 20;
  std::size_t step_bytes = std::size_t{1} << 20;
  std::size_t step_factor = 1;
  int iters = 20;
  int warmup_iters = 5;
  bool check = true;
  DType dtype = DType::kFloat32;
  ReduceOp op = ReduceOp::kSum;
  int root = 0;
  bool blocking = false;
  std::string json_path;
  std::string backend;  // --backend, when the program takes it
  bool help = false;
};

// Parses `args` (argv without the program name): the collective, then flags in any order. On
// an error the result has `error` set, and the caller prints it with usage() and exits with
// status 2.
struct ParsedArgs {
  SweepArgs args;
  std::string error;
};
ParsedArgs parse_sweep_args(std::string_view program, std::span<char* const> args,
                            bool accept_backend);
std::string usage(std::string_view program, bool accept_backend);

std::string_view collective_name(Collective collective);  // "all_reduce", ...
std::optional<Collective> parse_collective(std::string_view name);
// The nccl-tests name of a dtype ("float", "half", ...): the `type` column.
std::string_view type_name(DType dtype);

}  // namespace c10d::inline v1::bench
