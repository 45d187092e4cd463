#include "launcher/launch_options.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "core/parse.h"

namespace c10d::inline v1::launcher {
namespace {

constexpr std::string_view kUsage = R"(usage:
  c10drun [--nproc-per-node N] [--nnodes M --node-rank R --master-addr A --master-port P]
          [--grace-period-ms G] [--max-restarts K] [--trace-dir DIR] [--hang-timeout S]
          [--bind-to auto|core|none] [--] PROGRAM [ARGS...]

Starts N copies of PROGRAM (found through PATH) on this node, as ranks R*N .. R*N+N-1 of a
world of M*N, and hosts the rendezvous store they meet in (on node 0).

  --nproc-per-node N   processes on this node (default 1, at most 4096)
  --nnodes M           nodes in the job (default 1); each node runs its own c10drun
  --node-rank R        this node, 0 .. M-1 (default 0); node 0 hosts the store
  --master-addr A      the store's host (default 127.0.0.1); node 0 listens on it
  --master-port P      the store's port; needed with --nnodes > 1 (default: a free port)
  --grace-period-ms G  after a failure or a stop signal, how long the processes get to
                       exit before SIGKILL (default 5000)
  --max-restarts K     when a process fails, stop the others and start the whole job
                       again, up to K times (default 0); every node gives the same K
  --trace-dir DIR      the flight recorder's directory: every process gets C10D_TRACE_DIR=DIR
                       (default: C10D_TRACE_DIR when set). When a process fails, the others
                       are asked to dump (SIGUSR1) before they are stopped, and the verdict
                       on the dumps is printed (docs/tracing.md)
  --hang-timeout S     when no process completes an op for S seconds, the job has failed
                       (with a trace directory, dumps and verdict as above); default: never
  --bind-to B          the CPUs each process may run on, out of the launcher's own: auto
                       (default) an equal contiguous share each when the processes are no
                       more than the CPUs, else as core; core one CPU each, in turn; none
                       all of the launcher's CPUs
  --help               this text

Each process gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, GROUP_RANK, MASTER_ADDR,
MASTER_PORT and C10D_STORE_EXTERNAL=1, so c10d::rendezvous("env://") finds the store.
C10D_STORE_TOKEN passes through (the hosted store requires it, and the ranks' connections
are keyed by it). With one node and no token the launcher makes up a random one for its
store and its processes, so the job is closed to strangers; with --nnodes > 1 set the same
C10D_STORE_TOKEN on every node (e.g. openssl rand -hex 32), or the job is open. An empty
one is refused. Every line a process prints is prefixed with "[rank R]: " (stdout to
stdout, stderr to stderr). SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every
process. When one fails, the others get SIGTERM (a stopped one SIGCONT too). The launcher
reports as the cause the process that made no progress rather than the first one that gave
up waiting for it: one that is stopped, or that the ranks' timed-out ops waited for.
Each process also gets C10D_RESTART_COUNT, the attempt (0 first; 1 after the first restart),
and each attempt meets in a fresh part of the store, so nothing from an earlier one is read.
A stop signal ends the job without a restart.

exit status: 0 every process exited 0 (in the last attempt); 1 a process failed and no
restart was left (or the launcher could not start them); 2 usage error; 128+S the launcher
was stopped by signal S
)";

enum class Flag {
  kNprocPerNode,
  kNnodes,
  kNodeRank,
  kMasterAddr,
  kMasterPort,
  kGracePeriodMs,
  kMaxRestarts,
  kTraceDir,
  kHangTimeout,
  kBindTo,
};

const std::map<std::string, Flag, std::less<>>& flag_names() {
  static const std::map<std::string, Flag, std::less<>> kNames = {
      {"nproc-per-node", Flag::kNprocPerNode}, {"nnodes", Flag::kNnodes},
      {"node-rank", Flag::kNodeRank},          {"master-addr", Flag::kMasterAddr},
      {"master-port", Flag::kMasterPort},      {"grace-period-ms", Flag::kGracePeriodMs},
      {"max-restarts", Flag::kMaxRestarts},    {"trace-dir", Flag::kTraceDir},
      {"hang-timeout", Flag::kHangTimeout},    {"bind-to", Flag::kBindTo},
  };
  return kNames;
}

// A decimal integer in [lo, hi]; `flag` ("--nnodes") names it in the error.
long long parse_integer(std::string_view flag, const std::string& text, long long lo,
                        long long hi) {
  const auto parsed = core::parse_int(text, lo, hi);
  if (!parsed.value) throw UsageError(fmt::format("{} {}", flag, parsed.error));
  return *parsed.value;
}

// Applies one flag's value to `options`.
void apply(Flag flag, std::string_view spelled, const std::string& value, LaunchOptions& options) {
  switch (flag) {
    case Flag::kNprocPerNode:
      options.nproc_per_node = static_cast<int>(parse_integer(spelled, value, 1, kMaxProcsPerNode));
      break;
    case Flag::kNnodes:
      options.nnodes = static_cast<int>(parse_integer(spelled, value, 1, kMaxNodes));
      break;
    case Flag::kNodeRank:
      options.node_rank = static_cast<int>(parse_integer(spelled, value, 0, kMaxNodes - 1));
      break;
    case Flag::kMasterAddr:
      if (value.empty()) throw UsageError(fmt::format("{} is empty", spelled));
      options.master_addr = value;
      break;
    case Flag::kMasterPort:
      options.master_port = static_cast<std::uint16_t>(parse_integer(spelled, value, 0, 65535));
      break;
    case Flag::kGracePeriodMs:
      options.grace_period = Milliseconds(parse_integer(spelled, value, 0, 24LL * 3600 * 1000));
      break;
    case Flag::kMaxRestarts:
      options.max_restarts = static_cast<int>(parse_integer(spelled, value, 0, kMaxRestarts));
      break;
    case Flag::kTraceDir:
      if (value.empty()) throw UsageError(fmt::format("{} is empty", spelled));
      options.trace_dir = value;
      break;
    case Flag::kHangTimeout:
      options.hang_timeout =
          std::chrono::seconds(parse_integer(spelled, value, 1, 7LL * 24 * 3600));
      break;
    case Flag::kBindTo:
      if (value == "auto") {
        options.bind_to = CpuBinding::kAuto;
      } else if (value == "core") {
        options.bind_to = CpuBinding::kCore;
      } else if (value == "none") {
        options.bind_to = CpuBinding::kNone;
      } else {
        throw UsageError(fmt::format("{} '{}': expected auto, core or none", spelled, value));
      }
      break;
  }
}

// The checks that involve more than one flag.
void check_consistent(const LaunchOptions& options) {
  if (options.node_rank >= options.nnodes) {
    throw UsageError(fmt::format("--node-rank {} is out of range [0, {}] for --nnodes {}",
                                 options.node_rank, options.nnodes - 1, options.nnodes));
  }
  if (options.nnodes > 1 && !options.master_port) {
    throw UsageError(
        "--master-port is required with --nnodes > 1 (every node must know where the store is)");
  }
  if (options.nnodes > 1 && *options.master_port == 0) {
    throw UsageError("--master-port 0 (a free port) only works with --nnodes 1");
  }
  if (options.program.empty()) throw UsageError("missing the program to run");
}

}  // namespace

LaunchOptions parse_launch_options(const std::vector<std::string>& args) {
  LaunchOptions options;
  std::set<Flag> seen;  // to catch a flag given twice
  std::size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') break;  // the program
    if (arg == "-h" || arg == "--help") {
      options.help = true;
      return options;
    }
    if (arg[1] != '-') throw UsageError(fmt::format("unknown flag '{}'", arg));
    const std::size_t eq = arg.find('=');
    std::string name = arg.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    std::replace(name.begin(), name.end(), '_', '-');
    const auto it = flag_names().find(name);
    if (it == flag_names().end()) {
      throw UsageError(fmt::format("unknown flag '{}'", arg.substr(0, eq)));
    }
    const std::string spelled = "--" + name;
    std::string value;
    if (eq != std::string::npos) {
      value = arg.substr(eq + 1);
    } else {
      if (i + 1 >= args.size()) throw UsageError(fmt::format("{} needs a value", spelled));
      value = args[++i];
    }
    if (!seen.insert(it->second).second) {
      throw UsageError(fmt::format("{} is given twice", spelled));
    }
    apply(it->second, spelled, value, options);
  }
  options.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  check_consistent(options);
  return options;
}

std::string_view launch_usage() { return kUsage; }

}  // namespace c10d::inline v1::launcher
