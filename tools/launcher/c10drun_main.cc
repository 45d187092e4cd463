// c10drun: the launcher (like torchrun). Starts N processes of one program on this node, gives
// each its rank through the environment, hosts the rendezvous store they meet in, relays their
// output line by line, and stops them all when one fails.
//
//   c10drun [--nproc-per-node N] [--nnodes M --node-rank R --master-addr A --master-port P]
//           [--grace-period-ms G] [--max-restarts K] [--] PROGRAM [ARGS...]
//
// Flags (launch_options.h; "--name=value" works too, and '_' for '-'):
//   --nproc-per-node N   processes on this node (default 1)
//   --nnodes M           nodes in the job, each running its own c10drun (default 1)
//   --node-rank R        this node, 0..M-1 (default 0)
//   --master-addr A      where the store listens (default 127.0.0.1)
//   --master-port P      the store's port; required with M > 1. With one node and no port, the
//                        store takes a free port.
//   --grace-period-ms G  after a failure or a stop signal, how long before SIGKILL (5000)
//   --max-restarts K     after a failure, start the whole job again, K times at most (0;
//                        restarts.h)
//   --trace-dir DIR      the flight recorder's directory (default: C10D_TRACE_DIR when set)
//   --hang-timeout S     no op completing on any process for S seconds fails the job
// PROGRAM is looked up in PATH.
//
// The store: node 0 hosts a TCPStoreServer in this process, listening on A:P; other nodes host
// nothing. It lives until every local process has ended. Its token (which also keys the ranks'
// TCP connections, tcp_handshake.h) is C10D_STORE_TOKEN when set; with one node and none set,
// the launcher makes up a random one and hands it to its processes, so a single-node job is
// closed to strangers by default. With several nodes and none set it warns once: the store and
// the connections are then open. An empty C10D_STORE_TOKEN is refused.
//
// Environment of local process i (every other variable is inherited, C10D_STORE_TOKEN too):
//   RANK=R*N+i  LOCAL_RANK=i  WORLD_SIZE=M*N  LOCAL_WORLD_SIZE=N  GROUP_RANK=R
//   MASTER_ADDR=A  MASTER_PORT=<the store's port>  C10D_STORE_EXTERNAL=1
//   C10D_STORE_TOKEN=<the token the launcher made up>, when it made one
//   C10D_RESTART_COUNT=<the attempt: 0, then 1 after the first restart...>
//   C10D_TRACE_DIR=<DIR, absolute>, with a trace directory
//   C10D_PROGRESS_FILE=<its progress counter's file>, with --hang-timeout (progress_watch.h)
// so c10d::rendezvous("env://") connects every rank, rank 0 included, to the launcher's store
// (attempt k > 0 to its own part of it, store/attempt_store.h).
//
// Output: each line a process writes is prefixed with "[rank RANK]: " and written whole, its
// stdout to the launcher's stdout and its stderr to the launcher's stderr. The launcher's own
// messages go to stderr, starting with "c10drun: ".
//
// Signals: SIGINT, SIGTERM, SIGHUP and SIGQUIT are forwarded to every process; then, as after a
// failure, processes still running after the grace period get SIGKILL. A process that fails
// (non-zero exit, or killed by a signal) is reported, e.g.
//   c10drun: rank 2 (pid 1234) failed: exited with code 3
// and the others get SIGTERM (a stopped one SIGCONT too); those that then end abnormally are
// reported as "stopped". When the failed process only gave up waiting for another, the other
// is reported first as the cause (supervisor.h, blame.h): a process that is stopped, or that the
// ranks' timed-out ops found they waited for (their stall records in the store), e.g.
//   c10drun: rank 2 (pid 1236) is the cause: it was stopped (state T) and made no progress;
//            ranks 0, 3 timed out waiting for it
//   c10drun: rank 1 (pid 1235) failed: exited with code 3, after rank 2 made no progress
// With a trace directory, the launcher then asks the others to dump (SIGUSR1), waits for the
// dumps (at most 3 s), and prints the flight recorder's verdict before it stops them (verdict.h):
//   c10drun: the flight recorder's verdict (the dumps in /tmp/traces):
//   c10drun:   rank 2 never called all_reduce #3 of group world; its last op was ...
// With --hang-timeout S, no op completing on any process for S seconds fails the job the same
// way ("c10drun: no process completed an op for S s ...: the job is hung").
//
// With --max-restarts K, a failure is followed by a restart of every process, K times at most,
// each announced on one line naming the attempt and what failed (restarts.h); the launchers of
// several nodes agree on it through the store (node_sync.h).
//
// Exit status: 0 every process exited 0 (in the last attempt); 1 one failed and no restart was
// left (or one could not be started, or the store could not listen); 2 bad usage (the error
// names the flag, then the usage); 128+S stopped by signal S.
//
// Threads: the main thread does everything (supervisor.h: one poll() loop over a signalfd and
// the children's pipes); the hosted store runs on its own io thread (tcp_store_server.h). The
// handled signals are blocked before that thread starts, so only the signalfd sees them and no
// signal handler runs anywhere.
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "core/auth.h"
#include "core/logging.h"
#include "core/parse.h"
#include "launcher/launch_options.h"
#include "launcher/node_sync.h"
#include "launcher/restarts.h"
#include "launcher/spawn.h"
#include "launcher/supervisor.h"
#include "store/attempt_store.h"
#include "store/tcp_store_server.h"
#include "transport/stall_record.h"

namespace c10d::inline v1::launcher {
namespace {

constexpr int kExitFailure = 1;
constexpr int kExitUsage = 2;
// How long the launcher gives its own store to answer when it looks for the cause of a failure.
constexpr Milliseconds kStallRecordsTimeout{1000};

// Makes sure descriptors 0, 1 and 2 are open (on /dev/null if need be), so that no pipe of the
// launcher's lands on them and gets mistaken for a standard stream.
void ensure_standard_fds() {
  for (int fd = 0; fd <= 2; ++fd) {
    // open() returns the lowest free descriptor, which is this one: the lower ones are open.
    if (::fcntl(fd, F_GETFD) < 0 && errno == EBADF) ::open("/dev/null", O_RDWR);
  }
}

// Blocks the signals the supervisor handles in this thread (and so in every thread started
// later) and returns a signalfd that reads them. `previous` receives the mask before.
UniqueFd take_over_signals(sigset_t& previous) {
  sigset_t handled;
  sigemptyset(&handled);
  for (int signal : {SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT}) sigaddset(&handled, signal);
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &handled, &previous); rc != 0) {
    throw Error(fmt::format("pthread_sigmask failed: {}", std::strerror(rc)));
  }
  UniqueFd fd(::signalfd(-1, &handled, SFD_NONBLOCK | SFD_CLOEXEC));
  if (!fd.valid()) throw Error(fmt::format("signalfd failed: {}", std::strerror(errno)));
  // A reader of our output that goes away must not kill the launcher (and orphan the
  // children); writes then fail with EPIPE instead. Children get the default back (spawn.h).
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, nullptr);
  return fd;
}

// The trace directory: --trace-dir, else C10D_TRACE_DIR; absolute, so that a process that
// changes its directory still finds it.
std::optional<std::string> trace_dir_of(const LaunchOptions& options) {
  std::optional<std::string> dir = options.trace_dir;
  if (!dir) dir = core::env_text("C10D_TRACE_DIR");
  if (!dir) return std::nullopt;
  return std::filesystem::absolute(*dir).lexically_normal().string();
}

int launch(LaunchOptions options) {
  ensure_standard_fds();
  options.trace_dir = trace_dir_of(options);
  InheritedState inherited{};
  UniqueFd signals = take_over_signals(inherited.signal_mask);
  ::getrlimit(RLIMIT_NOFILE, &inherited.open_files);

  // The job's secret: the store's token, which the ranks' connections are keyed by too.
  std::optional<std::string> token = core::token_from_env();
  const bool made_token = !token && options.nnodes == 1;
  if (made_token) {
    // One node: the launcher is the only one who needs to hand it out.
    token = core::random_hex(32);
  } else if (!token) {
    std::cerr << "c10drun: warning: C10D_STORE_TOKEN is not set, so the store and the ranks' "
                 "connections are open to anyone who can reach them (a token the launcher made "
                 "up could not reach the other nodes); set C10D_STORE_TOKEN to the same secret "
                 "on every node, e.g. export C10D_STORE_TOKEN=$(openssl rand -hex 32)\n";
  }

  std::unique_ptr<TCPStoreServer> server;
  std::uint16_t port = options.master_port.value_or(0);
  if (options.hosts_store()) {
    store::raise_open_file_limit();  // one connection per rank of the whole job
    store::ServerOptions server_options;
    server_options.host = options.master_addr;
    server_options.port = port;
    server_options.token = token.value_or(std::string());
    server = std::make_unique<TCPStoreServer>(server_options);
    port = server->port();
    C10D_LOG_INFO("c10drun: store listening on {}:{}", options.master_addr, port);
  }

  std::map<std::string, std::string> env = {
      {"WORLD_SIZE", std::to_string(options.world_size())},
      {"LOCAL_WORLD_SIZE", std::to_string(options.nproc_per_node)},
      {"GROUP_RANK", std::to_string(options.node_rank)},
      {"MASTER_ADDR", options.master_addr},
      {"MASTER_PORT", std::to_string(port)},
      {"C10D_STORE_EXTERNAL", "1"},
  };
  if (made_token) env["C10D_STORE_TOKEN"] = *token;
  // A client of the job's store (node 0's), for what the launcher reads and writes there.
  const StoreFactory connect = [&options, port, token](Milliseconds timeout) {
    TCPStoreOptions client;
    client.host = options.master_addr;
    client.port = port;
    client.token = token.value_or(std::string());
    client.timeout = timeout;
    return std::unique_ptr<Store>(std::make_unique<TCPStore>(client));
  };

  // One attempt of this node's processes; restarts.h runs them again after a failure.
  const RunAttempt run_attempt = [&](int attempt, const JobHooks& hooks) {
    std::map<std::string, std::string> attempt_env = env;
    attempt_env["C10D_RESTART_COUNT"] = std::to_string(attempt);
    // Read when a rank fails: which rank the others' timed-out ops were waiting for (blame.h).
    std::function<std::string()> stall_records;
    if (server) {
      stall_records = [&connect, attempt]() -> std::string {
        const std::unique_ptr<Store> store = connect(kStallRecordsTimeout);
        const std::string key = store::attempt_key(attempt, transport::kStallRecordsKey);
        if (!store->check(std::span<const std::string>(&key, 1))) return {};
        return store->get_string(key);
      };
    }
    Supervisor supervisor(options, std::move(attempt_env), inherited, signals.get(),
                          std::move(stall_records));
    supervisor.set_job_hooks(hooks);
    AttemptResult result;
    result.status = supervisor.run();
    result.failure = supervisor.failure();
    return result;
  };
  int status = 0;
  if (options.max_restarts == 0) {
    status = run_attempt(0, JobHooks{}).status;
  } else {
    std::unique_ptr<NodeSync> sync;
    if (options.nnodes > 1)
      sync = std::make_unique<NodeSync>(options.node_rank, options.nnodes, connect);
    status = run_with_restarts(options, run_attempt, sync.get(), signals.get());
  }
  if (server) server->stop();
  return status;
}

}  // namespace
}  // namespace c10d::inline v1::launcher

int main(int argc, char** argv) {
  namespace launcher = c10d::launcher;
  launcher::LaunchOptions options;
  try {
    options = launcher::parse_launch_options(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const launcher::UsageError& e) {
    std::cerr << "c10drun: " << e.what() << "\n\n" << launcher::launch_usage();
    return launcher::kExitUsage;
  }
  if (options.help) {
    std::cout << launcher::launch_usage();
    return 0;
  }
  try {
    return launcher::launch(options);
  } catch (const std::exception& e) {
    std::cerr << "c10drun: " << e.what() << '\n';
    return launcher::kExitFailure;
  }
}
