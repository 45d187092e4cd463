#include "launcher/supervisor.h"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <utility>

#include "c10d/errors.h"
#include "core/logging.h"
#include "core/progress_file.h"

namespace c10d::inline v1::launcher {
namespace {

constexpr std::size_t kReadChunk = 64 * 1024;
// Reads of one stream per wake-up, so a child that floods its pipe cannot starve the others
// (or the signals) of the launcher's attention.
constexpr int kMaxReadsPerDrain = 16;
// How long children that got SIGKILL may take to be reaped before the launcher gives up.
constexpr auto kReapAfterKill = std::chrono::seconds(5);
// How often the launcher looks for the dumps it asked for.
constexpr auto kDumpPoll = std::chrono::milliseconds(20);

// Writes all of `data` to `fd`, waiting when the descriptor is full. Output nobody reads any
// more (EPIPE, a closed terminal) is dropped: the children must still be supervised.
void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n >= 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
    } else if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd writable{fd, POLLOUT, 0};
      ::poll(&writable, 1, -1);
    } else if (errno != EINTR) {
      return;
    }
  }
}

std::string signal_name(int signal) {
  const char* abbrev = ::sigabbrev_np(signal);
  return abbrev != nullptr ? fmt::format("SIG{}", abbrev) : fmt::format("signal {}", signal);
}

// "exited with code 3", "killed by signal 9 (SIGKILL)".
std::string describe_status(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return fmt::format("killed by signal {} ({}){}", signal, signal_name(signal),
                       WCOREDUMP(status) ? ", core dumped" : "");
  }
  return fmt::format("ended with wait status {:#x}", status);
}

int milliseconds_until(std::chrono::steady_clock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::max<std::chrono::milliseconds::rep>(left.count(), 0));
}

}  // namespace

Supervisor::Supervisor(const LaunchOptions& options, std::map<std::string, std::string> env,
                       const InheritedState& inherited, int signal_fd,
                       std::function<std::string()> stall_records)
    : options_(options),
      env_(std::move(env)),
      inherited_(inherited),
      signal_fd_(signal_fd),
      stall_records_(std::move(stall_records)),
      cpus_(rank_cpus(options.bind_to, options.nproc_per_node, allowed_cpus())),
      read_buffer_(kReadChunk) {
  if (options_.trace_dir) {
    std::vector<int> ranks;
    for (int r = 0; r < options_.nproc_per_node; ++r) ranks.push_back(options_.global_rank(r));
    verdict_.emplace(*options_.trace_dir, ranks);
  }
  if (options_.hang_timeout.count() > 0) {
    progress_ = std::make_unique<ProgressWatch>(options_.hang_timeout, options_.nproc_per_node);
  }
}

int Supervisor::run() {
  start_all();
  while (running_ > 0) {
    if (phase_ == Phase::kRunning && progress_ && progress_->hung(Clock::now())) on_hang();
    if (phase_ == Phase::kDumping &&
        (Clock::now() >= verdict_->deadline() || verdict_->ready(process_views()))) {
      give_verdict();
      stop_after_failure();
    }
    if (phase_ == Phase::kStopping && Clock::now() >= kill_at_) kill_survivors();
    if (phase_ == Phase::kKilling && Clock::now() >= give_up_at_) {
      for (const Child& child : children_) {
        if (!child.running) continue;
        report(fmt::format("c10drun: rank {} (pid {}) did not exit after SIGKILL; leaving it",
                           child.rank, child.pid));
      }
      failed_ = true;
      break;
    }
    wait_for_events();
    reap();
  }
  if (phase_ == Phase::kDumping) give_verdict();  // every child ended meanwhile
  finish_output();
  if (failed_) return 1;
  return stop_signal_ != 0 ? 128 + stop_signal_ : 0;
}

void Supervisor::start_all() {
  children_.reserve(static_cast<std::size_t>(options_.nproc_per_node));
  for (int local_rank = 0; local_rank < options_.nproc_per_node; ++local_rank) {
    const int rank = options_.global_rank(local_rank);
    std::map<std::string, std::string> env = env_;
    env["RANK"] = std::to_string(rank);
    env["LOCAL_RANK"] = std::to_string(local_rank);
    if (verdict_) env["C10D_TRACE_DIR"] = verdict_->dir();
    if (progress_) env[core::progress::kFileEnv] = progress_->file_of(local_rank);
    const std::vector<int>& cpus = cpus_[static_cast<std::size_t>(local_rank)];
    SpawnedChild spawned;
    try {
      spawned = spawn_child(options_.program, environment_with(env), inherited_, cpus);
    } catch (const Error& e) {
      report(fmt::format("c10drun: cannot start rank {}: {}", rank, e.what()));
      record_failure(fmt::format("cannot start rank {}: {}", rank, e.what()));
      failed_ = true;
      stop_after_failure();
      return;
    }
    const std::string prefix = fmt::format("[rank {}]: ", rank);
    children_.push_back(Child{rank, spawned.pid, true,
                              Stream{std::move(spawned.out), LinePrefixer(prefix), STDOUT_FILENO},
                              Stream{std::move(spawned.err), LinePrefixer(prefix), STDERR_FILENO}});
    index_of_pid_[spawned.pid] = children_.size() - 1;
    ++running_;
    C10D_LOG_INFO("c10drun: started rank {} (pid {}), CPUs {}", rank, spawned.pid,
                  cpus.empty() ? std::string("unbound") : fmt::format("{}", fmt::join(cpus, ",")));
  }
}

// One poll() over the signalfd and every open pipe, then the work it found.
void Supervisor::wait_for_events() {
  std::vector<pollfd> fds;
  std::vector<Stream*> streams;  // streams[i] goes with fds[i + 1]
  fds.push_back(pollfd{signal_fd_, POLLIN, 0});
  for (Child& child : children_) {
    for (Stream* stream : {&child.out, &child.err}) {
      if (!stream->fd.valid()) continue;
      fds.push_back(pollfd{stream->fd.get(), POLLIN, 0});
      streams.push_back(stream);
    }
  }
  const std::size_t job_stop_at = fds.size();
  if (hooks_.stop_fd >= 0) fds.push_back(pollfd{hooks_.stop_fd, POLLIN, 0});
  int timeout_ms = -1;  // running children are the user's business: no deadline
  if (phase_ == Phase::kRunning && progress_) {
    timeout_ms = milliseconds_until(progress_->next_look());
  }
  if (phase_ == Phase::kDumping) {
    timeout_ms = milliseconds_until(std::min(verdict_->deadline(), Clock::now() + kDumpPoll));
  }
  if (phase_ == Phase::kStopping) timeout_ms = milliseconds_until(kill_at_);
  if (phase_ == Phase::kKilling) timeout_ms = milliseconds_until(give_up_at_);
  if (::poll(fds.data(), fds.size(), timeout_ms) < 0) {
    if (errno == EINTR) return;
    throw Error(fmt::format("poll failed: {}", strerror(errno)));
  }
  for (std::size_t i = 1; i < job_stop_at; ++i) {
    if (fds[i].revents != 0) drain(*streams[i - 1]);
  }
  if (fds[0].revents != 0) read_signals();
  if (job_stop_at < fds.size() && fds[job_stop_at].revents != 0) on_job_stop();
}

void Supervisor::read_signals() {
  signalfd_siginfo info{};
  while (::read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int signal = static_cast<int>(info.ssi_signo);
    if (signal != SIGCHLD) on_stop_signal(signal);  // exits are reaped by the caller
  }
}

// Collects every child that has ended (SIGCHLDs coalesce, so one may stand for several).
void Supervisor::reap() {
  while (true) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) return;
    const auto it = index_of_pid_.find(pid);
    if (it != index_of_pid_.end()) on_exit(children_[it->second], status);
  }
}

void Supervisor::on_exit(Child& child, int status) {
  // Everything it wrote is in its pipes now; relay it before the verdict.
  drain(child.out);
  drain(child.err);
  child.running = false;
  --running_;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
    C10D_LOG_INFO("c10drun: rank {} (pid {}) exited with code 0", child.rank, child.pid);
    return;
  }
  const std::string how = describe_status(status);
  child.ended = (WIFSIGNALED(status) ? "it was " : "it ") + how;
  if (phase_ != Phase::kRunning) {
    report(fmt::format("c10drun: rank {} (pid {}) stopped: {}", child.rank, child.pid, how));
    return;
  }
  const Cause cause = find_cause_of(child.rank);
  if (cause.rank >= 0) {
    const std::string where =
        cause.pid > 0 ? fmt::format("pid {}", cause.pid) : std::string("on another node");
    report_cause(cause);
    // A rank on another node may have stopped, or its node may be cut off: from here the two
    // look alike.
    report(fmt::format("c10drun: rank {} (pid {}) failed: {}, after rank {} made no progress{}",
                       child.rank, child.pid, how, cause.rank,
                       cause.pid > 0 ? "" : " or became unreachable"));
    record_failure(fmt::format("rank {} ({}) made no progress; rank {} (pid {}): {}", cause.rank,
                               where, child.rank, child.pid, how));
  } else {
    report(fmt::format("c10drun: rank {} (pid {}) failed: {}", child.rank, child.pid, how));
    record_failure(fmt::format("rank {} (pid {}): {}", child.rank, child.pid, how));
  }
  fail_job();
}

void Supervisor::report_cause(const Cause& cause) const {
  report(fmt::format("c10drun: rank {} ({}) is the cause: {}", cause.rank,
                     cause.pid > 0 ? fmt::format("pid {}", cause.pid) : "on another node",
                     cause.evidence));
}

std::vector<ProcessView> Supervisor::process_views() const {
  std::vector<ProcessView> processes;
  for (const Child& c : children_) {
    processes.push_back({c.rank, c.pid, c.running, c.running ? process_state(c.pid) : '?'});
  }
  return processes;
}

Cause Supervisor::find_cause_of(int failed_rank) {
  const std::vector<ProcessView> processes = process_views();
  std::vector<transport::StallRecord> records;
  if (stall_records_) {
    try {
      records = transport::decode_stall_records(stall_records_(), options_.world_size());
    } catch (const std::exception& e) {
      C10D_LOG_INFO("c10drun: cannot read the ranks' stall records: {}", e.what());
    }
  }
  return find_cause(processes, failed_rank, records);
}

void Supervisor::fail_job() {
  failed_ = true;
  if (verdict_ && running_ > 0) {
    // Before the SIGTERM: a rank stopped first could not say where it was.
    verdict_->request(process_views());
    phase_ = Phase::kDumping;
    return;  // run() gives the verdict and stops the others once the dumps are in
  }
  if (verdict_) give_verdict();
  stop_after_failure();
}

void Supervisor::give_verdict() {
  if (verdict_given_) return;
  verdict_given_ = true;
  std::map<int, std::string> ended;
  for (const Child& c : children_) {
    if (!c.running && !c.ended.empty()) ended[c.rank] = c.ended;
  }
  report(fmt::format("c10drun: the flight recorder's verdict (the dumps in {}):", verdict_->dir()));
  for (const std::string& line : verdict_->lines(ended)) report("c10drun:   " + line);
}

void Supervisor::on_hang() {
  report(
      fmt::format("c10drun: no process completed an op for {} s ({} ops before that): the job "
                  "is hung",
                  progress_->timeout().count(), progress_->completed()));
  const Cause cause = find_cause_of(-1);
  if (cause.rank >= 0) report_cause(cause);
  record_failure(fmt::format("no process completed an op for {} s", progress_->timeout().count()));
  fail_job();
}

void Supervisor::on_stop_signal(int signal) {
  if (stop_signal_ == 0) {
    stop_signal_ = signal;
    if (hooks_.on_stop)
      hooks_.on_stop(fmt::format("the launcher received {}", signal_name(signal)));
  }
  report(fmt::format("c10drun: received {}; forwarding it to {} running process{}",
                     signal_name(signal), running_, running_ == 1 ? "" : "es"));
  for (const Child& child : children_) {
    if (child.running) ::kill(child.pid, signal);
  }
  if (phase_ == Phase::kDumping) give_verdict();  // with what the dumps say so far
  if (phase_ == Phase::kRunning || phase_ == Phase::kDumping) {
    phase_ = Phase::kStopping;
    kill_at_ = Clock::now() + options_.grace_period;
  }
}

void Supervisor::stop_after_failure() {
  phase_ = Phase::kStopping;
  kill_at_ = Clock::now() + options_.grace_period;
  if (running_ == 0) return;
  report(fmt::format("c10drun: sending SIGTERM to the {} running process{}; SIGKILL after {} ms",
                     running_, running_ == 1 ? "" : "es", options_.grace_period.count()));
  for (const Child& child : children_) {
    if (!child.running) continue;
    ::kill(child.pid, SIGTERM);
    // A stopped process acts on nothing but SIGKILL and SIGCONT: let it act on the SIGTERM.
    const char state = process_state(child.pid);
    if (state == 'T') {
      report(fmt::format("c10drun: rank {} (pid {}) is stopped; sending SIGCONT", child.rank,
                         child.pid));
      ::kill(child.pid, SIGCONT);
    }
  }
}

void Supervisor::record_failure(const std::string& what) {
  if (!failure_.empty()) return;
  failure_ = what;
  if (hooks_.on_stop) hooks_.on_stop(what);
}

void Supervisor::on_job_stop() {
  std::uint64_t count = 0;  // an eventfd: reading resets it, so poll() does not wake again
  const ssize_t ignored = ::read(hooks_.stop_fd, &count, sizeof(count));
  (void)ignored;
  if (phase_ != Phase::kRunning) return;  // stopping already (this node's own failure, say)
  failure_ = hooks_.stop_reason ? hooks_.stop_reason() : std::string("another node stopped");
  report(fmt::format("c10drun: stopping this node's processes: {}", failure_));
  fail_job();
}

void Supervisor::kill_survivors() {
  for (const Child& child : children_) {
    if (!child.running) continue;
    report(
        fmt::format("c10drun: rank {} (pid {}) still running after the {} ms grace period; "
                    "sending SIGKILL",
                    child.rank, child.pid, options_.grace_period.count()));
    ::kill(child.pid, SIGKILL);
  }
  phase_ = Phase::kKilling;
  give_up_at_ = Clock::now() + kReapAfterKill;
}

// Reads what the pipe holds, without blocking, and writes the lines it completes.
void Supervisor::drain(Stream& stream) {
  std::string lines;
  for (int reads = 0; stream.fd.valid() && reads < kMaxReadsPerDrain; ++reads) {
    const ssize_t n = ::read(stream.fd.get(), read_buffer_.data(), read_buffer_.size());
    if (n > 0) {
      stream.lines.feed(std::string_view(read_buffer_.data(), static_cast<std::size_t>(n)), lines);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    stream.lines.finish(lines);  // end of stream (or a broken pipe): flush the last line
    stream.fd.reset();
  }
  write_all(stream.target, lines);
}

// Every child has been reaped: relay what is left in the pipes and close them. A pipe that a
// grandchild still holds open is not waited for.
void Supervisor::finish_output() {
  for (Child& child : children_) {
    for (Stream* stream : {&child.out, &child.err}) {
      drain(*stream);
      std::string rest;
      stream->lines.finish(rest);
      write_all(stream->target, rest);
      stream->fd.reset();
    }
  }
}

void Supervisor::report(const std::string& line) const { write_all(STDERR_FILENO, line + "\n"); }

}  // namespace c10d::inline v1::launcher
