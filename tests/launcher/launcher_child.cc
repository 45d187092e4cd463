// launcher_child: the program c10drun starts in its tests. It runs its arguments as steps, in
// order; a step written "@R:STEP" runs only on the process whose RANK is R, and "#A:STEP" only
// in attempt A (C10D_RESTART_COUNT, 0 when unset); the two combine, as "@1:#0:exit=3".
//
//   env             print "env RANK=.. LOCAL_RANK=.. WORLD_SIZE=.. LOCAL_WORLD_SIZE=..
//                   GROUP_RANK=.. MASTER_ADDR=.. MASTER_PORT=.. C10D_STORE_EXTERNAL=..
//                   C10D_STORE_TOKEN=.." ("-" for a variable that is not set)
//   lines=N         print N lines "out RANK I xxx..." to stdout and N lines "err RANK I xxx..."
//                   to stderr (I from 0; 10 + I % 50 x's), each line in three write()s
//   tail            write "tail RANK" to stdout without a newline
//   ready           print "ready"
//   barrier         c10d::rendezvous("env://") and a store barrier of WORLD_SIZE processes
//                   (key "launcher_child/arrived" counts them, the last one sets
//                   "launcher_child/open"); then print "rank R of W passed the barrier"
//   wait-key=KEY    wait (up to 10 s) until KEY exists in the store, joining it first if need be
//   set-key=KEY     set KEY to "1" in the store (joined through env:// like the others)
//   check-key=KEY   print "key KEY present" or "key KEY absent"
//   attempt         print "attempt C10D_RESTART_COUNT" ("-" when it is not set)
//   cpus            print "cpus RANK C1,C2,..": the CPUs it may run on (sched_getaffinity)
//   ignore-term     ignore SIGTERM
//   report-signals  on SIGINT or SIGTERM, print "got SIGINT" / "got SIGTERM" and exit 0
//   sleep=MS        sleep
//   exit=CODE       exit with CODE
//   kill=SIGNAL     kill itself with the signal number SIGNAL
//   stop            stop itself (SIGSTOP)
//   stall=A:S       append a stall record to the store (transport/stall_record.h): this rank's
//                   "test op #1" timed out waiting for rank A, and the waits led to rank S
// Exit status 0 when the steps run out; 1 with a message on stderr when a step fails.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "c10d/rendezvous.h"
#include "c10d/store.h"
#include "launcher/cpu_binding.h"
#include "transport/stall_record.h"

namespace {

constexpr c10d::Milliseconds kStoreTimeout{10000};

std::string env_or_dash(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? "-" : value;
}

void write_all(int fd, std::string_view text) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n <= 0) std::exit(1);
    text.remove_prefix(static_cast<std::size_t>(n));
  }
}

int parse_int(std::string_view step, const std::string& text) {
  try {
    std::size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  throw std::runtime_error(fmt::format("step '{}': '{}' is not an integer", step, text));
}

void print_env() {
  std::string line = "env";
  for (const char* name :
       {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
        "MASTER_PORT", "C10D_STORE_EXTERNAL", "C10D_STORE_TOKEN"}) {
    line += fmt::format(" {}={}", name, env_or_dash(name));
  }
  write_all(STDOUT_FILENO, line + "\n");
}

void print_cpus() {
  const std::vector<int> cpus = c10d::launcher::allowed_cpus();
  if (cpus.empty()) throw std::runtime_error("sched_getaffinity failed");
  write_all(STDOUT_FILENO, fmt::format("cpus {} {}\n", env_or_dash("RANK"), fmt::join(cpus, ",")));
}

// Each line goes out in three writes, with a yield between, so that lines of different ranks
// would interleave if the launcher relayed bytes rather than lines.
void print_lines(int rank, int count) {
  for (int i = 0; i < count; ++i) {
    const std::string payload(static_cast<std::size_t>(10 + i % 50), 'x');
    for (auto [fd, tag] : {std::pair{STDOUT_FILENO, "out"}, std::pair{STDERR_FILENO, "err"}}) {
      write_all(fd, fmt::format("{} {} {} ", tag, rank, i));
      std::this_thread::yield();
      write_all(fd, payload);
      std::this_thread::yield();
      write_all(fd, "\n");
    }
  }
}

// The store, joined through env:// by the first step that needs it.
c10d::RendezvousResult& rendezvous() {
  static c10d::RendezvousResult rv = c10d::rendezvous("env://", -1, -1, kStoreTimeout);
  return rv;
}

void barrier() {
  c10d::RendezvousResult& rv = rendezvous();
  if (rv.store->add("launcher_child/arrived", 1) == rv.world_size) {
    rv.store->set("launcher_child/open", std::string_view("1"));
  }
  const std::vector<std::string> open = {"launcher_child/open"};
  rv.store->wait(open, kStoreTimeout);
  write_all(STDOUT_FILENO,
            fmt::format("rank {} of {} passed the barrier\n", rv.rank, rv.world_size));
}

extern "C" void report_signal(int signal) {
  // Async-signal-safe: fixed strings, write and _exit.
  static constexpr char kInt[] = "got SIGINT\n";
  static constexpr char kTerm[] = "got SIGTERM\n";
  const char* text = signal == SIGINT ? kInt : kTerm;
  const std::size_t size = signal == SIGINT ? sizeof(kInt) - 1 : sizeof(kTerm) - 1;
  ssize_t ignored = ::write(STDOUT_FILENO, text, size);
  (void)ignored;
  ::_exit(0);
}

void install(int signal, void (*handler)(int)) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  ::sigaction(signal, &action, nullptr);
}

void run_step(std::string_view step, int rank) {
  const std::size_t eq = step.find('=');
  const std::string_view name = step.substr(0, eq);
  const std::string arg = eq == std::string_view::npos ? "" : std::string(step.substr(eq + 1));
  if (name == "env") {
    print_env();
  } else if (name == "lines") {
    print_lines(rank, parse_int(step, arg));
  } else if (name == "tail") {
    write_all(STDOUT_FILENO, fmt::format("tail {}", rank));
  } else if (name == "ready") {
    write_all(STDOUT_FILENO, "ready\n");
  } else if (name == "barrier") {
    barrier();
  } else if (name == "wait-key") {
    rendezvous().store->wait(std::vector<std::string>{arg}, kStoreTimeout);
  } else if (name == "set-key") {
    auto& store = *rendezvous().store;
    store.set(arg, std::string_view("1"));
    store.check(std::vector<std::string>{arg});  // landed before this process goes on
  } else if (name == "check-key") {
    const bool present = rendezvous().store->check(std::vector<std::string>{arg});
    write_all(STDOUT_FILENO, fmt::format("key {} {}\n", arg, present ? "present" : "absent"));
  } else if (name == "cpus") {
    print_cpus();
  } else if (name == "attempt") {
    write_all(STDOUT_FILENO, fmt::format("attempt {}\n", env_or_dash("C10D_RESTART_COUNT")));
  } else if (name == "ignore-term") {
    install(SIGTERM, SIG_IGN);
  } else if (name == "report-signals") {
    install(SIGINT, report_signal);
    install(SIGTERM, report_signal);
  } else if (name == "sleep") {
    std::this_thread::sleep_for(std::chrono::milliseconds(parse_int(step, arg)));
  } else if (name == "exit") {
    std::exit(parse_int(step, arg));
  } else if (name == "stop") {
    ::raise(SIGSTOP);
  } else if (name == "stall") {
    const std::size_t colon = arg.find(':');
    if (colon == std::string::npos) throw std::runtime_error("stall=A:S needs a ':'");
    const std::string line = c10d::transport::encode_stall_record(
        {rank, parse_int(step, arg.substr(0, colon)), parse_int(step, arg.substr(colon + 1)),
         "test op #1"});
    auto& store = *rendezvous().store;
    const std::string key(c10d::transport::kStallRecordsKey);
    store.append(key, std::span<const std::uint8_t>(
                          reinterpret_cast<const std::uint8_t*>(line.data()), line.size()));
    store.check(std::span<const std::string>(&key, 1));  // landed before this process goes on
  } else if (name == "kill") {
    ::kill(::getpid(), parse_int(step, arg));
    std::this_thread::sleep_for(std::chrono::seconds(10));  // a blocked signal: do not go on
    std::exit(1);
  } else {
    throw std::runtime_error(fmt::format("unknown step '{}'", step));
  }
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string rank_text = env_or_dash("RANK");
    const int rank = rank_text == "-" ? -1 : parse_int("RANK", rank_text);
    const std::string attempt_text = env_or_dash("C10D_RESTART_COUNT");
    const int attempt = attempt_text == "-" ? 0 : parse_int("C10D_RESTART_COUNT", attempt_text);
    for (int i = 1; i < argc; ++i) {
      std::string_view step = argv[i];
      bool runs = true;
      // "@R:" and "#A:" prefixes, in any order.
      while (step.starts_with('@') || step.starts_with('#')) {
        const std::size_t colon = step.find(':');
        if (colon == std::string_view::npos) {
          throw std::runtime_error(fmt::format("step '{}' has no ':'", step));
        }
        const int only = parse_int(step, std::string(step.substr(1, colon - 1)));
        runs = runs && only == (step.front() == '@' ? rank : attempt);
        step.remove_prefix(colon + 1);
      }
      if (runs) run_step(step, rank);
    }
    return 0;
  } catch (const std::exception& e) {
    write_all(STDERR_FILENO, fmt::format("launcher_child: {}\n", e.what()));
    return 1;
  }
}
