// Test helpers for tests that run real programs: a scratch directory, the build's binaries, and
// ChildProcess, a program started with fork+exec whose stdout and stderr go to files.
//
// Output goes to files rather than pipes so a chatty child can never block on a full pipe while
// the test waits for it. A ChildProcess that is still running when destroyed is killed and
// reaped, and every child dies with the test process (PR_SET_PDEATHSIG), so a failing test never
// leaves processes behind. Not thread-safe: one test thread drives its children.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

extern char** environ;

namespace c10d::inline v1::test {

using Clock = std::chrono::steady_clock;

// How many times `part` occurs in `text` (a child's output), overlaps included.
inline std::size_t occurrences(std::string_view text, std::string_view part) {
  std::size_t n = 0;
  for (auto at = text.find(part); at != std::string_view::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "c10d_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// The build directory: C10D_TEST_BIN_DIR (ctest sets it), else two levels above this test
// binary (build/tests/<test> -> build), so the test also runs when started by hand.
inline std::filesystem::path build_dir() {
  if (const char* dir = std::getenv("C10D_TEST_BIN_DIR"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return std::filesystem::read_symlink("/proc/self/exe").parent_path().parent_path();
}

inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// How a child ended.
struct ChildExit {
  bool exited = false;     // returned from main or called exit
  int code = -1;           // its exit status, when exited
  int signal = 0;          // the signal that killed it, otherwise
  bool timed_out = false;  // wait()'s deadline passed and the test killed it
};

// Environment changes for a child: a value sets the variable, nullopt removes it.
using EnvChanges = std::map<std::string, std::optional<std::string>>;

class ChildProcess {
 public:
  // Starts argv[0] (a path) with this process's environment changed by `env`; stdout and
  // stderr go to files in `output_dir` named after `name`.
  ChildProcess(std::vector<std::string> argv, const EnvChanges& env,
               const std::filesystem::path& output_dir, const std::string& name)
      : argv_(std::move(argv)),
        out_path_(output_dir / (name + ".out")),
        err_path_(output_dir / (name + ".err")) {
    // Everything the child needs is built before fork: between fork and exec only
    // async-signal-safe calls are allowed, since other threads may hold locks.
    std::map<std::string, std::string> vars;
    for (char** entry = environ; *entry != nullptr; ++entry) {
      std::string item = *entry;
      const std::size_t eq = item.find('=');
      if (eq != std::string::npos) vars[item.substr(0, eq)] = item.substr(eq + 1);
    }
    for (const auto& [key, value] : env) {
      if (value) {
        vars[key] = *value;
      } else {
        vars.erase(key);
      }
    }
    std::vector<std::string> env_strings;
    for (const auto& [key, value] : vars) env_strings.push_back(key + "=" + value);
    std::vector<char*> envp;
    for (std::string& item : env_strings) envp.push_back(item.data());
    envp.push_back(nullptr);
    std::vector<char*> argvp;
    for (std::string& arg : argv_) argvp.push_back(arg.data());
    argvp.push_back(nullptr);

    const int out_fd = ::open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err_fd = ::open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0 || err_fd < 0) {
      if (out_fd >= 0) ::close(out_fd);
      if (err_fd >= 0) ::close(err_fd);
      throw std::runtime_error("cannot create output files in " + output_dir.string());
    }
    const pid_t parent = ::getpid();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(126);  // the test died before prctl took effect
      sigset_t none;
      sigemptyset(&none);
      ::sigprocmask(SIG_SETMASK, &none, nullptr);
      ::dup2(out_fd, STDOUT_FILENO);
      ::dup2(err_fd, STDERR_FILENO);
      ::execve(argvp[0], argvp.data(), envp.data());
      static constexpr char kMessage[] = "child_process: execve failed\n";
      ssize_t ignored = ::write(STDERR_FILENO, kMessage, sizeof(kMessage) - 1);
      (void)ignored;
      ::_exit(127);
    }
    ::close(out_fd);
    ::close(err_fd);
    if (pid_ < 0) throw std::runtime_error("fork failed");
  }

  ~ChildProcess() {
    if (!reaped_) {
      ::kill(pid_, SIGKILL);
      int status = 0;
      ::waitpid(pid_, &status, 0);  // SIGKILL cannot be ignored: this returns promptly
    }
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  bool running() { return !reaped_ && !try_reap(); }
  void send_signal(int signal) {
    if (!reaped_) ::kill(pid_, signal);
  }

  // Waits until the child ends or the deadline passes; then kills it (timed_out set).
  ChildExit wait(Clock::time_point deadline) {
    while (!reaped_ && !try_reap()) {
      if (Clock::now() >= deadline) {
        ::kill(pid_, SIGKILL);
        int status = 0;
        ::waitpid(pid_, &status, 0);
        reaped_ = true;
        exit_ = ChildExit{false, -1, SIGKILL, true};
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return exit_;
  }

  std::string out() const { return read_file(out_path_); }
  std::string err() const { return read_file(err_path_); }

  // For assertion messages: the command, how it ended, and what it printed.
  std::string describe() const {
    std::string text = "command:";
    for (const std::string& arg : argv_) text += " " + arg;
    text += "\n  pid " + std::to_string(pid_);
    if (!reaped_) {
      text += " still running";
    } else if (exit_.timed_out) {
      text += " killed at the deadline";
    } else if (exit_.exited) {
      text += " exited " + std::to_string(exit_.code);
    } else {
      text += " killed by signal " + std::to_string(exit_.signal);
    }
    return text + "\n  stdout: " + out() + "\n  stderr: " + err();
  }

 private:
  bool try_reap() {
    int status = 0;
    const pid_t done = ::waitpid(pid_, &status, WNOHANG);
    if (done != pid_) return false;
    reaped_ = true;
    if (WIFEXITED(status)) {
      exit_ = ChildExit{true, WEXITSTATUS(status), 0, false};
    } else {
      exit_ = ChildExit{false, -1, WIFSIGNALED(status) ? WTERMSIG(status) : 0, false};
    }
    return true;
  }

  std::vector<std::string> argv_;
  std::filesystem::path out_path_;
  std::filesystem::path err_path_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  ChildExit exit_;
};

}  // namespace c10d::inline v1::test
