// c10d-bench: nccl-tests-compatible bandwidth sweep of one collective over a c10d
// ProcessGroup.
//
//   c10d-bench all_reduce|broadcast|reduce|all_gather|reduce_scatter|all_to_all
//              [-b 8] [-e 64M] [-f 2 | -i 1M] [-n 20] [-w 5] [-c 1] [-d float] [-o sum]
//              [-r 0] [--json FILE] [--backend tcp|mpi|ici]
//
// Every rank runs this program, started by the launcher (c10drun --nproc-per-node N c10d-bench
// ...) or by mpirun; the group comes from c10d::init_process_group, which takes rank, world
// size and rendezvous from the environment (RANK/WORLD_SIZE or OMPI_COMM_WORLD_*,
// C10D_INIT_METHOD, C10D_BACKEND when --backend is not given). Flags, sizes, timing and
// checking are nccl-tests' (flags in bench/sweep_args.h, the rest in bench/nccl_sweep.h).
//
// Output (rank 0): a header naming the backend and every rank's host, then one row per size
// with `size count type redop root` and, out of place then in place, `time algbw busbw
// #wrong`, then "# Out of bounds values : N OK|FAILED" and "# Avg bus bandwidth : X". --json
// writes the same rows as a JSON array.
//
// The c10d API has one tensor for all_reduce, broadcast and reduce (reduced or copied in place,
// as torch.distributed does), so their out-of-place columns are N/A; all_gather and
// reduce_scatter run in place with the input or output a narrow_rows view of the other tensor;
// all_to_all has no in-place form (input and output must not overlap), so its in-place
// columns are N/A.
//
// With --backend ici the time column is the simulated interconnect time (each Work's duration on
// its chip's virtual clock, docs/ici.md), not wall time; the header says so. The chips are
// processes of this host sharing memory; the slice comes from C10D_ICI_TOPOLOGY and friends.
//
// Exit status: 0; 1 when a value was wrong or a collective failed; 2 for a bad flag (each is
// checked whole, sweep_args.h), an unknown or unsupported backend, a missing or bad environment,
// or buffers larger than the host's available memory (nccl_sweep.h).
#include <fmt/format.h>

#include <cstdio>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/process_group.h"
#include "c10d/tensor.h"
#include "c10d/work.h"
#include "nccl_sweep.h"

namespace {

using c10d::Tensor;
using c10d::bench::Collective;
using c10d::bench::OpCall;

// The sweep's calls as ProcessGroup calls: prepare() makes the tensors (views of the sweep's
// buffers, no copies), start() issues one op and keeps its Work, complete() waits for them all.
class ProcessGroupBackend : public c10d::bench::SweepBackend {
 public:
  explicit ProcessGroupBackend(std::shared_ptr<c10d::ProcessGroup> pg) : pg_(std::move(pg)) {}

  std::string name() const override { return pg_->backend_name(); }
  int rank() const override { return pg_->rank(); }
  int size() const override { return pg_->size(); }

  std::string unsupported(Collective collective, bool in_place) const override {
    const bool single_tensor = collective == Collective::kAllReduce ||
                               collective == Collective::kBroadcast ||
                               collective == Collective::kReduce;
    if (single_tensor && !in_place) {
      return "the c10d API takes one tensor for this collective and works in place";
    }
    if (collective == Collective::kAllToAll && in_place) {
      return "c10d's all_to_all needs an output that does not overlap its input";
    }
    return "";
  }

  const void* prepare(const OpCall& call) override {
    call_ = call;
    const std::int64_t c = call.count;
    const std::int64_t n = size();
    const auto blob = [&](void* data, std::int64_t elements) {
      return Tensor::from_blob(data, {elements}, call.dtype);
    };
    switch (call.collective) {
      case Collective::kAllReduce:
      case Collective::kBroadcast:
      case Collective::kReduce:
        output_ = blob(call.recv, c);
        break;
      case Collective::kAllGather:
        output_ = blob(call.recv, n * c);
        input_ =
            call.in_place ? output_.narrow_rows(rank() * c, (rank() + 1) * c) : blob(call.send, c);
        break;
      case Collective::kReduceScatter:
        input_ = blob(call.send, n * c);
        output_ =
            call.in_place ? input_.narrow_rows(rank() * c, (rank() + 1) * c) : blob(call.recv, c);
        break;
      case Collective::kAllToAll:
        input_ = blob(call.send, n * c);
        output_ = blob(call.recv, n * c);
        break;
    }
    return call.recv;
  }

  void start() override {
    const c10d::Reduction reduction{.op = call_.op};
    switch (call_.collective) {
      case Collective::kAllReduce:
        return issue(pg_->all_reduce({output_}, {.reduce = reduction}));
      case Collective::kBroadcast:
        return issue(pg_->broadcast({output_}, {.root = call_.root}));
      case Collective::kReduce:
        return issue(pg_->reduce(output_, {.reduce = reduction, .root = call_.root}));
      case Collective::kAllGather:
        return issue(pg_->all_gather_into_tensor(output_, input_));
      case Collective::kReduceScatter:
        return issue(pg_->reduce_scatter_tensor(output_, input_, {.reduce = reduction}));
      case Collective::kAllToAll:
        return issue(pg_->all_to_all(output_, input_));
    }
  }

  void complete() override {
    simulated_ = 0;
    for (const auto& work : pending_) {
      work->wait();
      // Only the ICI backend's Works carry a simulated time (a dynamic_cast: not on the timed
      // path of the others).
      if (simulated_time_) simulated_ += c10d::ici_simulated_seconds(*work).value_or(0);
    }
    pending_.clear();
  }

  // The ICI backend simulates its interconnect: its Works carry their simulated duration.
  bool simulated_time() const override { return simulated_time_; }
  double simulated_seconds() override { return simulated_; }

  void barrier() override { pg_->barrier()->wait(); }

  double max_over_ranks(double value) override {
    Tensor t = Tensor::from_vector(std::vector<double>{value}, c10d::DType::kFloat64);
    pg_->all_reduce({t}, {.reduce = {.op = c10d::ReduceOp::kMax}})->wait();
    return t.data<double>()[0];
  }

  std::int64_t sum_over_ranks(std::int64_t value) override {
    Tensor t = Tensor::from_vector(std::vector<std::int64_t>{value}, c10d::DType::kInt64);
    pg_->all_reduce({t})->wait();
    return t.data<std::int64_t>()[0];
  }

  void all_gather_bytes(std::span<const char> mine, std::span<char> all) override {
    const auto bytes = static_cast<std::int64_t>(mine.size());
    // The op only reads its input; from_blob takes a non-const pointer.
    Tensor input = Tensor::from_blob(const_cast<char*>(mine.data()), {bytes}, c10d::DType::kUInt8);
    Tensor output = Tensor::from_blob(all.data(), {bytes * size()}, c10d::DType::kUInt8);
    pg_->all_gather_into_tensor(output, input)->wait();
  }

 private:
  void issue(std::shared_ptr<c10d::Work> work) { pending_.push_back(std::move(work)); }

  std::shared_ptr<c10d::ProcessGroup> pg_;
  const bool simulated_time_ = pg_->backend_name() == "ici";
  OpCall call_;
  Tensor input_;
  Tensor output_;
  std::vector<std::shared_ptr<c10d::Work>> pending_;
  double simulated_ = 0;  // of the calls the last complete() waited for
};

}  // namespace

int main(int argc, char** argv) {
  constexpr std::string_view kProgram = "c10d-bench";
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // rows appear as they are measured, even in a pipe
  const auto parsed = c10d::bench::parse_sweep_args(
      kProgram, std::span<char* const>(argv + 1, static_cast<std::size_t>(argc - 1)), true);
  if (!parsed.error.empty()) {
    fmt::print(stderr, "{}: {}\n{}", kProgram, parsed.error, c10d::bench::usage(kProgram, true));
    return 2;
  }
  const c10d::bench::SweepArgs& args = parsed.args;
  if (args.help) {
    fmt::print("{}", c10d::bench::usage(kProgram, true));
    return 0;
  }
  if (!args.backend.empty() && args.backend != "tcp" && args.backend != "mpi" &&
      args.backend != "ici") {
    fmt::print(stderr, "{}: unknown backend '{}' (tcp, mpi, ici)\n", kProgram, args.backend);
    return 2;
  }

  std::shared_ptr<c10d::ProcessGroup> pg;
  try {
    pg = c10d::init_process_group({.backend = args.backend});
  } catch (const c10d::Unsupported& e) {
    fmt::print(stderr, "{}: {}\n", kProgram, e.what());
    return 2;
  } catch (const c10d::InvalidArgument& e) {
    fmt::print(stderr, "{}: {}\n", kProgram, e.what());
    return 2;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: setting up the process group: {}\n", kProgram, e.what());
    return 1;
  }

  try {
    ProcessGroupBackend backend(std::move(pg));
    return c10d::bench::run_sweep(args, backend);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", kProgram, e.what());
    return 1;
  }
}
