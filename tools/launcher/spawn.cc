#include "launcher/spawn.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sched.h>
#include <string.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <utility>

#include "c10d/errors.h"
#include "core/check.h"

extern char** environ;

namespace c10d::inline v1::launcher {
namespace {

// A pipe whose ends close on exec; the read end is non-blocking, the write end (the child's
// stdout or stderr) stays blocking, as programs expect.
std::pair<UniqueFd, UniqueFd> make_output_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw Error(fmt::format("cannot create a pipe: {}", strerror(errno)));
  }
  UniqueFd read_end(fds[0]);
  UniqueFd write_end(fds[1]);
  const int flags = ::fcntl(read_end.get(), F_GETFL);
  if (flags < 0 || ::fcntl(read_end.get(), F_SETFL, flags | O_NONBLOCK) != 0) {
    throw Error(fmt::format("cannot make a pipe non-blocking: {}", strerror(errno)));
  }
  return {std::move(read_end), std::move(write_end)};
}

void write_all_signal_safe(int fd, const char* text) {
  std::size_t left = ::strlen(text);
  while (left > 0) {
    const ssize_t n = ::write(fd, text, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    text += n;
    left -= static_cast<std::size_t>(n);
  }
}

// Makes `fd` the descriptor `target` of this process, kept across exec.
void move_to(int fd, int target) {
  if (fd == target) {
    ::fcntl(fd, F_SETFD, 0);  // dup2 onto itself would leave close-on-exec set
  } else {
    ::dup2(fd, target);
  }
}

// Runs in the child between fork and exec: async-signal-safe calls only, and no return.
[[noreturn]] void exec_child(pid_t parent, int out_fd, int err_fd, char* const* argv,
                             char* const* envp, const char* exec_error_prefix,
                             const InheritedState& inherited, const cpu_set_t* cpus) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the launcher died before prctl took effect
  move_to(out_fd, STDOUT_FILENO);
  move_to(err_fd, STDERR_FILENO);
  if (cpus != nullptr && ::sched_setaffinity(0, sizeof(cpu_set_t), cpus) != 0) {
    const char* reason = ::strerrordesc_np(errno);
    write_all_signal_safe(STDERR_FILENO, "c10drun: cannot bind to the CPUs --bind-to chose (");
    write_all_signal_safe(STDERR_FILENO, reason != nullptr ? reason : "unknown error");
    write_all_signal_safe(STDERR_FILENO, "); running on the launcher's CPUs\n");
  }
  if (::close_range(STDERR_FILENO + 1, ~0U, 0) != 0) {
    rlimit current{};
    const long long limit =
        ::getrlimit(RLIMIT_NOFILE, &current) == 0 && current.rlim_cur != RLIM_INFINITY
            ? static_cast<long long>(current.rlim_cur)
            : 65536;
    for (long long fd = STDERR_FILENO + 1; fd < limit; ++fd) ::close(static_cast<int>(fd));
  }
  ::setrlimit(RLIMIT_NOFILE, &inherited.open_files);
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  ::sigaction(SIGPIPE, &default_action, nullptr);
  ::sigprocmask(SIG_SETMASK, &inherited.signal_mask, nullptr);
  ::execvpe(argv[0], argv, envp);
  const int error = errno;
  write_all_signal_safe(STDERR_FILENO, exec_error_prefix);
  const char* reason = ::strerrordesc_np(error);  // a static table: safe here, unlike strerror
  write_all_signal_safe(STDERR_FILENO, reason != nullptr ? reason : "unknown error");
  write_all_signal_safe(STDERR_FILENO, "\n");
  ::_exit(127);
}

}  // namespace

std::vector<std::string> environment_with(const std::map<std::string, std::string>& overrides) {
  std::vector<std::string> env;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string_view item = *entry;
    const std::string name(item.substr(0, item.find('=')));
    if (!overrides.contains(name)) env.emplace_back(item);
  }
  for (const auto& [name, value] : overrides) env.push_back(name + "=" + value);
  return env;
}

SpawnedChild spawn_child(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const InheritedState& inherited, const std::vector<int>& cpus) {
  C10D_CHECK(!argv.empty(), "spawn_child needs a program");
  cpu_set_t cpu_set;
  CPU_ZERO(&cpu_set);
  for (const int cpu : cpus) {
    C10D_CHECK(cpu >= 0 && cpu < CPU_SETSIZE, "CPU {} is outside the kernel's CPU set", cpu);
    CPU_SET(cpu, &cpu_set);
  }
  // Everything the child touches is built before the fork.
  std::vector<char*> argv_ptrs;
  for (const std::string& arg : argv) argv_ptrs.push_back(const_cast<char*>(arg.c_str()));
  argv_ptrs.push_back(nullptr);
  std::vector<char*> env_ptrs;
  for (const std::string& item : env) env_ptrs.push_back(const_cast<char*>(item.c_str()));
  env_ptrs.push_back(nullptr);
  const std::string exec_error_prefix = "c10drun: cannot run '" + argv[0] + "': ";

  auto [out_read, out_write] = make_output_pipe();
  auto [err_read, err_write] = make_output_pipe();
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("cannot fork: {}", strerror(errno)));
  if (pid == 0) {
    exec_child(parent, out_write.get(), err_write.get(), argv_ptrs.data(), env_ptrs.data(),
               exec_error_prefix.c_str(), inherited, cpus.empty() ? nullptr : &cpu_set);
  }
  SpawnedChild child;
  child.pid = pid;
  child.out = std::move(out_read);
  child.err = std::move(err_read);
  return child;  // the write ends close here: the child holds the only copies
}

}  // namespace c10d::inline v1::launcher
