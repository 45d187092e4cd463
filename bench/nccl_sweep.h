// nccl_sweep: the nccl-tests bandwidth sweep, written once for c10d-bench (the ProcessGroup
// API) and c10d-mpi-reference (plain MPI calls). A program parses its flags here, wraps its
// communication library in a SweepBackend, and calls run_sweep().
//
// Flags: sweep_args.h.
//
// What a size means, as in nccl-tests: `size` is the larger of the send and receive buffer in
// bytes; `count` the per-rank element count of the call (all_gather: elements each rank sends;
// reduce_scatter: each rank receives; all_to_all: each pair exchanges). algbw = size / time;
// busbw = algbw * factor, factor 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
// reduce_scatter and all_to_all, 1 for broadcast and reduce.
//
// Timing: a barrier, then `iters` calls issued back to back, then a wait for all of them; time
// = elapsed / iters, and the row shows the largest time over the ranks (an all-reduce MAX over
// the group itself), so every rank computes the same row and rank 0 prints it. Each timed
// batch is preceded by one untimed call. Checking (-c 1) refills the inputs, runs one call and
// counts wrong elements on every rank (sweep_data.h), summed over the ranks.
//
// In place, as nccl-tests means it: all_reduce, broadcast, reduce and all_to_all use one buffer
// for input and output; all_gather's input is this rank's block of the output; reduce_scatter's
// output is this rank's block of the input. A backend that cannot express one of the two forms
// of a collective says why (SweepBackend::unsupported); its columns then print N/A, the reason
// is printed once above the table, and its rows are left out of the JSON.
//
// Simulated time: a backend whose library simulates its interconnect (the ICI backend) says so
// with simulated_time(); the time column is then the simulated duration of the timed calls
// (summed by simulated_seconds(), divided by the iterations, largest over the ranks) instead of
// wall time, and the header says which.
//
// Memory: each rank allocates a send and a receive buffer for the largest call, zeroed (so
// physical pages). Before allocating, the ranks compare what the ranks of each host need with
// that host's available memory (MemAvailable) and refuse together, naming -e and the memory,
// when it does not fit.
//
// Exit status of run_sweep: 0, or 1 when any element was wrong, or 2 for an argument that is
// only checkable once the world size is known (the root, a split collective whose -e is under
// one element per rank) or buffers that do not fit the host's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "c10d/types.h"
#include "sweep_args.h"
#include "sweep_data.h"

namespace c10d::inline v1::bench {

// nccl-tests' bus-bandwidth factor.
double bus_factor(Collective collective, int world_size);

// What run_sweep needs from a communication library. Every method but unsupported() and
// prepare() is collective: every rank calls it, in the same order.
class SweepBackend {
 public:
  virtual ~SweepBackend() = default;
  virtual std::string name() const = 0;  // the backend column of the JSON: "tcp", "mpi", ...
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Empty when this backend runs `collective` out of place (in_place false) or in place;
  // otherwise why it cannot, for the note above the table. The same on every rank.
  virtual std::string unsupported(Collective collective, bool in_place) const = 0;
  // Binds the buffers of `call` for the start() calls that follow; returns where this rank's
  // result lands (call.recv unless the library puts it elsewhere).
  virtual const void* prepare(const OpCall& call) = 0;
  // Issues one call of what prepare() bound; complete() waits for every call issued.
  virtual void start() = 0;
  virtual void complete() = 0;

  virtual void barrier() = 0;
  virtual double max_over_ranks(double value) = 0;
  virtual std::int64_t sum_over_ranks(std::int64_t value) = 0;
  // Concatenates every rank's `mine` (same length everywhere) into `all`, in rank order.
  virtual void all_gather_bytes(std::span<const char> mine, std::span<char> all) = 0;

  // True when the time column is simulated (the same on every rank).
  virtual bool simulated_time() const { return false; }
  // With simulated_time(): the simulated seconds of the calls the last complete() waited for,
  // summed. Local, not collective.
  virtual double simulated_seconds() { return 0; }
};

// Pieces of the sweep for programs that print its table without a SweepBackend (c10d-icisim):
// the size after `size` (nullopt past -e), the per-rank count of a call of `size` bytes, the
// `size count type redop root` columns, one `time algbw busbw #wrong` cell (an empty `wrong`
// prints N/A), and nccl-tests' number format.
std::optional<std::size_t> next_sweep_size(const SweepArgs& args, std::size_t size);
// A split collective (all_gather, reduce_scatter, all_to_all) gives each rank size / n bytes:
// sizes under one element per rank move nothing, so the sweep skips them, saying so in the
// header (skipped_sizes_note), and starts at first_sweep_size (nullopt when no size is large
// enough; size_error then says why, for an exit status of 2).
std::optional<std::size_t> first_sweep_size(const SweepArgs& args, int world_size);
std::string size_error(const SweepArgs& args, int world_size);
std::string skipped_sizes_note(const SweepArgs& args, int world_size);
std::int64_t sweep_count(const SweepArgs& args, std::size_t size, int world_size);
std::string row_prefix(const SweepArgs& args, std::int64_t bytes, std::int64_t count);
std::string cell_text(double time_us, double algbw, double busbw, const std::string& wrong);
std::string float_str(double value, int width);

// Runs the sweep of `args` on `backend` and prints it from rank 0. Returns the exit status.
int run_sweep(const SweepArgs& args, SweepBackend& backend);

}  // namespace c10d::inline v1::bench
