// The command line of c10drun: what the launcher was asked to run and how, checked before
// anything starts.
//
// Flags come first, as "--name value" or "--name=value" ('_' may stand for '-', as torchrun
// spells them); the first argument that is not a flag (or everything after "--") is the
// program, and the rest are its arguments, passed on untouched. A bad command line is a
// UsageError whose message names the flag. Plain values; no threads, no state.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "c10d/types.h"
#include "launcher/cpu_binding.h"

namespace c10d::inline v1::launcher {

inline constexpr int kMaxProcsPerNode = 4096;
inline constexpr int kMaxNodes = 100'000;  // with kMaxProcsPerNode, the world size fits an int
inline constexpr int kMaxRestarts = 1'000'000;

struct LaunchOptions {
  int nproc_per_node = 1;
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  // Unset: node 0 hosts the store on an ephemeral port (a single node only).
  std::optional<std::uint16_t> master_port;
  Milliseconds grace_period{5000};
  // When a process fails, stop the rest and start the whole job again, this many times at most
  // (restarts.h). 0: the first failure ends the job.
  int max_restarts = 0;
  // The flight recorder's directory (--trace-dir, else C10D_TRACE_DIR): the launcher gives it to
  // every process and, when the job fails, prints the verdict of their dumps (verdict.h).
  std::optional<std::string> trace_dir;
  // --hang-timeout: no op completing on any local process for this long fails the job
  // (progress_watch.h); zero: off.
  std::chrono::seconds hang_timeout{0};
  // --bind-to: the CPUs each process may run on (cpu_binding.h).
  CpuBinding bind_to = CpuBinding::kAuto;
  std::vector<std::string> program;  // the program (looked up in PATH) and its arguments
  bool help = false;                 // --help: print the usage, run nothing

  int world_size() const { return nnodes * nproc_per_node; }
  int global_rank(int local_rank) const { return node_rank * nproc_per_node + local_rank; }
  // Node 0 hosts the store; the other nodes' processes connect to it.
  bool hosts_store() const { return node_rank == 0; }
};

// A bad command line; main prints it with the usage and exits 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Parses the arguments after the program name. Throws UsageError.
LaunchOptions parse_launch_options(const std::vector<std::string>& args);

// The --help text.
std::string_view launch_usage();

}  // namespace c10d::inline v1::launcher
