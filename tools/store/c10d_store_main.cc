// c10d-store: the TCP store server as a standalone program (`serve`), and an operator's client
// for any running store (`get`, `set`, `add`, `wait`, `check`, `delete`, `keys`).
//
// Exit codes: 0 success; 1 the store failed (the error's what() on stderr); 2 bad usage (a
// one-line error naming the flag or argument, then the usage, on stderr).
//
// `serve` blocks SIGINT and SIGTERM before the server thread starts, so the signals reach only
// the sigwait in main and the server is stopped from one place, cleanly.
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "c10d/store.h"
#include "core/auth.h"
#include "core/logging.h"
#include "core/parse.h"
#include "store/store_util.h"
#include "store/tcp_store_server.h"

namespace {

constexpr int kExitStoreError = 1;
constexpr int kExitUsage = 2;
// An operator's call should fail fast when the server is not there, not after 30 minutes.
constexpr long long kDefaultClientTimeoutMs = 30'000;

constexpr std::string_view kUsage = R"(usage:
  c10d-store serve --port P [--host H] [--port-file F] [--token T]
                   [--max-key-bytes N] [--max-value-bytes N] [--max-keys-per-op N]
                   [--max-frame-bytes N] [--max-response-bytes N] [--max-connections N]
                   [--max-pending-output-bytes N] [--max-pending-input-bytes N]
                   [--read-timeout-ms N] [--write-timeout-ms N] [--log-level L]
      Serve a TCP store on H:P (H defaults to 127.0.0.1; P 0 picks a free port) until
      SIGINT or SIGTERM. --port-file F receives the bound port (written atomically).
      The token defaults to $C10D_STORE_TOKEN; without one, anyone who reaches the port
      can read and write every key. --max-connections defaults to the open-file limit
      less an eighth; --max-pending-output-bytes (unread answers, all connections) and
      --max-pending-input-bytes (large requests being read) to four answers or requests
      of the largest size; --read-timeout-ms and --write-timeout-ms to 30000.
  c10d-store get    --addr HOST:PORT [common flags] KEY          print the value
  c10d-store set    --addr HOST:PORT [common flags] KEY VALUE
  c10d-store add    --addr HOST:PORT [common flags] KEY DELTA    print the new value
  c10d-store wait   --addr HOST:PORT [common flags] KEY...       until every key exists
  c10d-store check  --addr HOST:PORT [common flags] KEY...       print true or false
  c10d-store delete --addr HOST:PORT [common flags] KEY          print whether it existed
  c10d-store keys   --addr HOST:PORT [common flags]              print the number of keys
      common flags: --timeout-ms N (default 30000) --token T (default $C10D_STORE_TOKEN)
                    --log-level L (trace, debug, info, warn, error, off)
      HOST may be an IPv6 literal in brackets: --addr [::1]:29500
  c10d-store --help
exit status: 0 ok, 1 store error, 2 usage error
)";

// Bad command line: reported with the usage and exit status 2.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct Command {
  std::string name;
  std::size_t min_args;
  std::size_t max_args;
  std::string_view arg_names;  // for "needs ..." messages
};

const std::vector<Command>& commands() {
  static const std::vector<Command> kCommands = {
      {"serve", 0, 0, ""},
      {"get", 1, 1, "KEY"},
      {"set", 2, 2, "KEY VALUE"},
      {"add", 2, 2, "KEY DELTA"},
      {"wait", 1, SIZE_MAX, "KEY..."},
      {"check", 1, SIZE_MAX, "KEY..."},
      {"delete", 1, 1, "KEY"},
      {"keys", 0, 0, ""},
  };
  return kCommands;
}

const std::set<std::string>& flags_of(const std::string& command) {
  static const std::set<std::string> kServe = {"host",
                                               "port",
                                               "port-file",
                                               "token",
                                               "max-key-bytes",
                                               "max-value-bytes",
                                               "max-keys-per-op",
                                               "max-frame-bytes",
                                               "max-response-bytes",
                                               "max-connections",
                                               "max-pending-output-bytes",
                                               "max-pending-input-bytes",
                                               "read-timeout-ms",
                                               "write-timeout-ms",
                                               "log-level"};
  static const std::set<std::string> kClient = {"addr", "timeout-ms", "token", "log-level"};
  return command == "serve" ? kServe : kClient;
}

struct Args {
  const Command* command = nullptr;
  std::map<std::string, std::string> flags;
  std::vector<std::string> positional;

  const std::string* flag(const std::string& name) const {
    auto it = flags.find(name);
    return it == flags.end() ? nullptr : &it->second;
  }
};

bool wants_help(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h" || (i == 1 && arg == "help")) return true;
  }
  return false;
}

// "--name value", "--name=value", and "--" ending the flags (for keys that start with "--").
Args parse_args(int argc, char** argv) {
  if (argc < 2) throw UsageError("missing subcommand");
  Args args;
  const std::string name = argv[1];
  for (const Command& command : commands()) {
    if (command.name == name) args.command = &command;
  }
  if (args.command == nullptr) throw UsageError("unknown subcommand '" + name + "'");
  const std::set<std::string>& allowed = flags_of(name);
  bool flags_done = false;
  for (int i = 2; i < argc; ++i) {
    std::string arg = argv[i];
    if (flags_done || arg.size() < 2 || arg.compare(0, 2, "--") != 0) {
      args.positional.push_back(std::move(arg));
      continue;
    }
    if (arg == "--") {
      flags_done = true;
      continue;
    }
    std::string flag = arg.substr(2);
    std::string value;
    const std::size_t eq = flag.find('=');
    if (!allowed.contains(flag.substr(0, eq))) {
      throw UsageError("unknown flag '--" + flag.substr(0, eq) + "' for '" + name + "'");
    }
    if (eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag.resize(eq);
    } else {
      if (i + 1 >= argc) throw UsageError("flag --" + flag + " needs a value");
      value = argv[++i];
    }
    if (!args.flags.emplace(flag, value).second) {
      throw UsageError("flag --" + flag + " given twice");
    }
  }
  const Command& command = *args.command;
  if (args.positional.size() < command.min_args) {
    throw UsageError(name + " needs " + std::string(command.arg_names));
  }
  if (args.positional.size() > command.max_args) {
    throw UsageError(
        name + " takes " +
        (command.max_args == 0 ? std::string("no arguments") : std::string(command.arg_names)) +
        ", got extra '" + args.positional[command.max_args] + "'");
  }
  return args;
}

// An integer in [lo, hi]; `what` names the flag or argument in the error.
long long parse_integer(const std::string& text, long long lo, long long hi,
                        const std::string& what) {
  const auto parsed = c10d::core::parse_int(text, lo, hi);
  if (!parsed.value) throw UsageError(what + " " + parsed.error);
  return *parsed.value;
}

std::size_t parse_size(const Args& args, const std::string& flag, std::size_t fallback) {
  const std::string* text = args.flag(flag);
  if (text == nullptr) return fallback;
  return static_cast<std::size_t>(parse_integer(*text, 1, 1LL << 40, "--" + flag));
}

// A timeout in milliseconds, at most what a poll() or a socket timeout holds.
c10d::Milliseconds parse_timeout(const Args& args, const std::string& flag,
                                 c10d::Milliseconds fallback) {
  const std::string* text = args.flag(flag);
  if (text == nullptr) return fallback;
  return c10d::Milliseconds(parse_integer(*text, 1, c10d::core::kMaxTimeout.count(), "--" + flag));
}

// Whether every address `host` names is a loopback one (127.0.0.0/8, ::1), so that only
// processes of this host can reach a server bound there. A name that does not resolve counts as not
// loopback;
// "" and the wildcards bind every interface.
bool loopback_only(const std::string& host) {
  if (host.empty()) return false;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  bool all = found != nullptr;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    if (a->ai_family == AF_INET) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(a->ai_addr);
      all &= (ntohl(in->sin_addr.s_addr) >> 24) == 127;
    } else if (a->ai_family == AF_INET6) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(a->ai_addr);
      const bool v4_mapped =
          IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr) && in6->sin6_addr.s6_addr[12] == 127;
      all &= IN6_IS_ADDR_LOOPBACK(&in6->sin6_addr) || v4_mapped;
    } else {
      all = false;
    }
  }
  ::freeaddrinfo(found);
  return all;
}

// "host:port" or "[v6]:port".
std::pair<std::string, std::uint16_t> parse_addr(const std::string& addr) {
  std::string host;
  std::string port;
  if (!addr.empty() && addr.front() == '[') {
    const std::size_t close = addr.find("]:");
    if (close == std::string::npos) throw UsageError("--addr '" + addr + "' is not [HOST]:PORT");
    host = addr.substr(1, close - 1);
    port = addr.substr(close + 2);
  } else {
    const std::size_t colon = addr.rfind(':');
    if (colon == std::string::npos || addr.find(':') != colon) {
      throw UsageError("--addr '" + addr + "' is not HOST:PORT (IPv6 hosts go in brackets)");
    }
    host = addr.substr(0, colon);
    port = addr.substr(colon + 1);
  }
  if (host.empty()) throw UsageError("--addr '" + addr + "' has no host");
  return {host, static_cast<std::uint16_t>(parse_integer(port, 1, 65535, "--addr port"))};
}

void apply_log_level(const Args& args) {
  const std::string* level = args.flag("log-level");
  if (level == nullptr) return;
  try {
    c10d::core::set_log_level(c10d::core::parse_log_level(*level));
  } catch (const c10d::InvalidArgument&) {
    throw UsageError("--log-level '" + *level +
                     "' is not one of trace, debug, info, warn, "
                     "error, off");
  }
}

// --token, else C10D_STORE_TOKEN, else none. An empty one is refused: it would turn
// authentication off without a word.
std::string token_of(const Args& args) {
  if (const std::string* token = args.flag("token")) {
    if (token->empty()) throw UsageError(c10d::core::empty_token_message("--token"));
    return *token;
  }
  try {
    return c10d::core::token_from_env().value_or(std::string());
  } catch (const c10d::InvalidArgument& e) {  // set but empty: the user's to fix
    throw UsageError(e.what());
  }
}

std::string host_port(const std::string& host, std::uint16_t port) {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

int serve(const Args& args) {
  const std::string* port_text = args.flag("port");
  if (port_text == nullptr) throw UsageError("serve needs --port P (0 picks a free port)");
  c10d::store::ServerOptions options;
  options.port = static_cast<std::uint16_t>(parse_integer(*port_text, 0, 65535, "--port"));
  if (const std::string* host = args.flag("host")) options.host = *host;
  options.token = token_of(args);
  options.limits.max_key_bytes = parse_size(args, "max-key-bytes", options.limits.max_key_bytes);
  options.limits.max_value_bytes =
      parse_size(args, "max-value-bytes", options.limits.max_value_bytes);
  options.limits.max_keys_per_op =
      parse_size(args, "max-keys-per-op", options.limits.max_keys_per_op);
  options.limits.max_frame_bytes =
      parse_size(args, "max-frame-bytes", options.limits.max_frame_bytes);
  options.limits.max_response_bytes =
      parse_size(args, "max-response-bytes", options.limits.max_response_bytes);
  options.max_connections = parse_size(args, "max-connections", options.max_connections);
  options.max_pending_output_bytes =
      parse_size(args, "max-pending-output-bytes", options.max_pending_output_bytes);
  options.max_pending_input_bytes =
      parse_size(args, "max-pending-input-bytes", options.max_pending_input_bytes);
  options.read_timeout = parse_timeout(args, "read-timeout-ms", options.read_timeout);
  options.write_timeout = parse_timeout(args, "write-timeout-ms", options.write_timeout);
  const std::string* port_file = args.flag("port-file");
  if (port_file != nullptr && port_file->empty()) throw UsageError("--port-file is empty");

  // Blocked before the server thread exists, so that thread inherits the mask and only the
  // sigwait below ever takes these signals.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (int rc = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr); rc != 0) {
    throw c10d::Error("pthread_sigmask failed: " + std::to_string(rc));
  }

  c10d::store::raise_open_file_limit();  // one descriptor per rank
  c10d::TCPStoreServer server(options);
  if (port_file != nullptr) {
    // A reader sees either no file or the whole port.
    c10d::store::write_file_atomically(*port_file, std::to_string(server.port()) + "\n", 0644,
                                       "c10d-store serve --port-file");
  }
  std::cout << "c10d-store: serving on " << host_port(server.host(), server.port()) << std::endl;
  if (options.token.empty()) {
    // One line, on stderr, where an operator looks: an open store is the job's keys and its TCP
    // transport's secret for whoever finds the port; on loopback, for every user of this host.
    const bool local = loopback_only(options.host);
    std::cerr << "c10d-store: warning: serving on " << host_port(server.host(), server.port())
              << " without a token: "
              << (local ? "any process on this host" : "anyone who can reach this port")
              << " can read and write every key, including the job secret the TCP transport "
                 "authenticates ranks with; set --token or C10D_STORE_TOKEN (docs/security.md)"
              << std::endl;
  }

  // No deadline on purpose: serving until told to stop is this command's job.
  int signal_number = 0;
  while (sigwait(&stop_signals, &signal_number) != 0) {
  }
  C10D_LOG_INFO("c10d-store: {} received, stopping", strsignal(signal_number));
  server.stop();
  if (port_file != nullptr) {
    std::error_code ignored;
    std::filesystem::remove(*port_file, ignored);  // a stale port would mislead the next reader
  }
  std::cout << "c10d-store: stopped on " << strsignal(signal_number) << std::endl;
  return 0;
}

int run_client(const Args& args) {
  const std::string* addr = args.flag("addr");
  const std::string& name = args.command->name;
  if (addr == nullptr) throw UsageError(name + " needs --addr HOST:PORT");
  c10d::TCPStoreOptions options;
  std::tie(options.host, options.port) = parse_addr(*addr);
  long long timeout_ms = kDefaultClientTimeoutMs;
  if (const std::string* text = args.flag("timeout-ms")) {
    timeout_ms = parse_integer(*text, 1, c10d::core::kMaxTimeout.count(), "--timeout-ms");
  }
  options.timeout = c10d::Milliseconds(timeout_ms);
  options.token = token_of(args);
  const std::vector<std::string>& pos = args.positional;
  // Parse every argument before connecting, so usage errors never wait on the network.
  long long delta = name == "add" ? parse_integer(pos[1], LLONG_MIN, LLONG_MAX, "DELTA") : 0;

  c10d::TCPStore store(options);
  if (name == "get") {
    c10d::Bytes value = store.get(pos[0]);
    std::cout.write(reinterpret_cast<const char*>(value.data()),
                    static_cast<std::streamsize>(value.size()));
    std::cout << '\n';
  } else if (name == "set") {
    store.set(pos[0], std::string_view(pos[1]));
    // A set is answered only when it fails; any call after it reports that, so exit 0 means
    // the value landed.
    store.check(std::vector<std::string>{pos[0]});
  } else if (name == "add") {
    std::cout << store.add(pos[0], delta) << '\n';
  } else if (name == "wait") {
    store.wait(pos, options.timeout);
  } else if (name == "check") {
    std::cout << (store.check(pos) ? "true" : "false") << '\n';
  } else if (name == "delete") {
    std::cout << (store.delete_key(pos[0]) ? "true" : "false") << '\n';
  } else if (name == "keys") {
    std::cout << store.num_keys() << '\n';
  }
  std::cout.flush();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (wants_help(argc, argv)) {
    std::cout << kUsage;
    return 0;
  }
  try {
    Args args = parse_args(argc, argv);
    apply_log_level(args);
    return args.command->name == "serve" ? serve(args) : run_client(args);
  } catch (const UsageError& e) {
    std::cerr << "c10d-store: " << e.what() << "\n\n" << kUsage;
    return kExitUsage;
  } catch (const std::exception& e) {
    std::cerr << "c10d-store: " << e.what() << '\n';
    return kExitStoreError;
  }
}
