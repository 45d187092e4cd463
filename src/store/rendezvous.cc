// c10d::rendezvous(): parses an init method URL (tcp://, env://, file://), works out this
// process's rank and world size, and opens the store the ranks meet in.
//
// The value parsers (integers, booleans) return a value or the words of the error; the URL-level
// helpers add the context (which URL piece, which variable) and throw InvalidArgument. Every
// check runs before anything touches the network or the file system.
#include "c10d/rendezvous.h"

#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"
#include "store/attempt_store.h"
#include "store/mpirun_store.h"

namespace c10d::inline v1 {
namespace {

// Numbers and flags parse strictly (core/parse.h: the whole text, within its bounds).
using core::parse_flag;
using core::parse_int;

// A variable set but empty counts as unset, as everywhere in c10d (core/parse.h): an empty
// MASTER_ADDR under mpirun leaves the store to rank 0, an empty RANK defers to mpirun's.
using core::env_text;

// The pieces of an init method URL: scheme "://" body ["?" query].
struct InitUrl {
  std::string text;  // the whole URL, for messages
  std::string scheme;
  std::string body;
  std::optional<int> rank;
  std::optional<int> world_size;
  std::optional<bool> external;
};

constexpr int kMaxWorldSize = std::numeric_limits<int>::max();

InitUrl parse_url(std::string_view text) {
  InitUrl url;
  url.text = std::string(text);
  const std::size_t sep = text.find("://");
  C10D_CHECK(sep != std::string_view::npos && sep > 0,
             "init method '{}' has no scheme (expected tcp://host:port, env:// or file:///path)",
             text);
  url.scheme = std::string(text.substr(0, sep));
  std::string_view rest = text.substr(sep + 3);
  const std::size_t question = rest.find('?');
  url.body = std::string(rest.substr(0, question));
  if (question == std::string_view::npos) return url;

  std::string_view query = rest.substr(question + 1);
  while (!query.empty()) {
    const std::size_t amp = query.find('&');
    std::string_view item = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
    if (item.empty()) continue;  // "?a=1&&b=2" and a trailing '&' are harmless
    const std::size_t eq = item.find('=');
    C10D_CHECK(eq != std::string_view::npos,
               "init method '{}': query parameter '{}' has no value (expected name=value)", text,
               item);
    std::string_view name = item.substr(0, eq);
    std::string_view value = item.substr(eq + 1);
    if (name == "rank" || name == "world_size") {
      auto& slot = name == "rank" ? url.rank : url.world_size;
      C10D_CHECK(!slot, "init method '{}': query parameter '{}' given twice", text, name);
      auto parsed = parse_int(value, 0, kMaxWorldSize);
      C10D_CHECK(parsed.value, "init method '{}': query parameter {}: {}", text, name,
                 parsed.error);
      slot = static_cast<int>(*parsed.value);
    } else if (name == "external") {
      C10D_CHECK(!url.external, "init method '{}': query parameter 'external' given twice", text);
      auto parsed = parse_flag(value);
      C10D_CHECK(parsed.value, "init method '{}': query parameter external: {}", text,
                 parsed.error);
      url.external = *parsed.value;
    } else {
      C10D_THROW(InvalidArgument,
                 "init method '{}': unknown query parameter '{}' (known: rank, world_size, "
                 "external)",
                 text, name);
    }
  }
  return url;
}

// "host:port" or "[v6-literal]:port". `where` names the source in messages.
std::pair<std::string, std::uint16_t> parse_host_port(std::string_view hp, std::string_view where) {
  std::string_view host;
  std::string_view port_text;
  bool has_port = false;
  if (!hp.empty() && hp.front() == '[') {
    const std::size_t close = hp.find(']');
    C10D_CHECK(close != std::string_view::npos, "{}: IPv6 host '{}' has no closing ']'", where, hp);
    host = hp.substr(1, close - 1);
    std::string_view after = hp.substr(close + 1);
    if (!after.empty()) {
      C10D_CHECK(after.front() == ':', "{}: expected ':port' after ']' but found '{}'", where,
                 after);
      has_port = true;
      port_text = after.substr(1);
    }
  } else {
    const std::size_t colon = hp.find(':');
    C10D_CHECK(colon == std::string_view::npos || hp.find(':', colon + 1) == std::string_view::npos,
               "{}: IPv6 hosts go in brackets, as tcp://[::1]:29500", where);
    host = hp.substr(0, colon);
    if (colon != std::string_view::npos) {
      has_port = true;
      port_text = hp.substr(colon + 1);
    }
  }
  C10D_CHECK(!host.empty(), "{}: missing host (expected tcp://host:port)", where);
  C10D_CHECK(has_port, "{}: missing port (expected tcp://host:port)", where);
  auto port = parse_int(port_text, 0, 65535);
  C10D_CHECK(port.value, "{}: port {}", where, port.error);
  return {std::string(host), static_cast<std::uint16_t>(*port.value)};
}

// One of rank/world_size, from the first source that has it: the argument, the URL's query, the
// primary variable, then mpirun's variable.
int resolve_count(std::string_view what, int argument, std::optional<int> from_query,
                  const char* primary_env, const char* mpi_env, std::string_view url) {
  if (argument >= 0) return argument;
  if (from_query) return *from_query;
  for (const char* name : {primary_env, mpi_env}) {
    auto value = env_text(name);
    if (!value) continue;
    auto parsed = parse_int(*value, 0, kMaxWorldSize);
    C10D_CHECK(parsed.value, "{} for init method '{}': {} {}", what, url, name, parsed.error);
    return static_cast<int>(*parsed.value);
  }
  C10D_THROW(InvalidArgument,
             "init method '{}' needs {}: pass it, add ?{}=, or set {} (or {}) (unset or empty)",
             url, what, what, primary_env, mpi_env);
}

bool resolve_external(const InitUrl& url) {
  if (url.external) return *url.external;
  auto value = env_text("C10D_STORE_EXTERNAL");
  if (!value) return false;
  auto parsed = parse_flag(*value);
  C10D_CHECK(parsed.value, "C10D_STORE_EXTERNAL {}", parsed.error);
  return *parsed.value;
}

// What tells this job from another started on the same file:// path at the same time: C10D_RUN_ID,
// else Slurm's job and step ids, else mpirun's job id; empty when none is set.
std::string run_id() {
  if (auto id = env_text("C10D_RUN_ID")) return *id;
  const auto slurm_job = env_text("SLURM_JOB_ID");
  const auto slurm_step = env_text("SLURM_STEP_ID");
  if (slurm_job && slurm_step) return "slurm:" + *slurm_job + "." + *slurm_step;
  for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"}) {
    if (auto id = env_text(name)) return "mpirun:" + *id;
  }
  return "";
}

std::string bracket_if_v6(const std::string& host) {
  return host.find(':') == std::string::npos ? host : "[" + host + "]";
}

// tcp:// and env:// meet at a TCP store: rank 0 hosts it unless told a server already runs.
std::shared_ptr<Store> open_tcp_store(const std::string& host, std::uint16_t port, int rank,
                                      bool external, Milliseconds timeout, std::string_view url) {
  const bool hosts = rank == 0 && !external;
  // Port 0 asks the hosting rank for an ephemeral port; a connecting rank cannot know it.
  C10D_CHECK(hosts || port != 0,
             "init method '{}': port 0 only works for rank 0 hosting the store; rank {} needs the "
             "server's real port{}",
             url, rank, external ? " (external server)" : "");
  C10D_LOG_INFO("rendezvous: rank {} {} the store at {}:{} ({})", rank,
                hosts ? "hosts" : "connects to", bracket_if_v6(host), port, url);
  TCPStoreOptions options;
  options.host = host;
  options.port = port;
  options.is_server = hosts;
  options.timeout = timeout;
  return std::make_shared<TCPStore>(std::move(options));
}

}  // namespace

RendezvousResult rendezvous(std::string_view init_method, int rank, int world_size,
                            Milliseconds timeout) {
  C10D_CHECK(timeout.count() > 0, "rendezvous timeout must be positive, got {} ms",
             timeout.count());
  const InitUrl url = parse_url(init_method);
  C10D_CHECK(url.scheme == "tcp" || url.scheme == "env" || url.scheme == "file",
             "unsupported init method scheme '{}' in '{}' (expected tcp://, env:// or file://)",
             url.scheme, init_method);

  // The address comes first so that a malformed URL is reported before a missing rank.
  std::string host;
  std::uint16_t port = 0;
  std::optional<store::MpirunJob> mpirun;  // env:// under mpirun, with no address given
  if (url.scheme == "env" && url.body.empty() && !env_text("MASTER_ADDR") &&
      !env_text("MASTER_PORT")) {
    mpirun = store::mpirun_job();
  }
  if (mpirun) {
    host = "127.0.0.1";
  } else if (url.scheme == "tcp") {
    std::tie(host, port) = parse_host_port(url.body, fmt::format("init method '{}'", init_method));
  } else if (url.scheme == "env") {
    C10D_CHECK(url.body.empty(),
               "init method '{}': env:// takes no address ('{}'); set MASTER_ADDR and MASTER_PORT",
               init_method, url.body);
    auto addr = env_text("MASTER_ADDR");
    C10D_CHECK(addr, "env:// needs MASTER_ADDR (unset or empty)");
    host = *addr;
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
    }
    C10D_CHECK(!host.empty(), "env:// needs MASTER_ADDR ('{}' names no host)", *addr);
    auto port_text = env_text("MASTER_PORT");
    C10D_CHECK(port_text, "env:// needs MASTER_PORT (unset or empty)");
    auto parsed = parse_int(*port_text, 0, 65535);
    C10D_CHECK(parsed.value, "env:// MASTER_PORT {}", parsed.error);
    port = static_cast<std::uint16_t>(*parsed.value);
  } else {
    C10D_CHECK(!url.body.empty(), "init method '{}': file:// needs a path, as file:///tmp/store",
               init_method);
    C10D_CHECK(url.body.front() == '/',
               "init method '{}': file:// path '{}' must be absolute (file:///path, three "
               "slashes)",
               init_method, url.body);
  }

  RendezvousResult result;
  result.store_host = host;
  result.rank = resolve_count("rank", rank, url.rank, "RANK", "OMPI_COMM_WORLD_RANK", init_method);
  result.world_size = resolve_count("world_size", world_size, url.world_size, "WORLD_SIZE",
                                    "OMPI_COMM_WORLD_SIZE", init_method);
  C10D_CHECK(result.world_size >= 1, "world_size {} must be at least 1 (init method '{}')",
             result.world_size, init_method);
  C10D_CHECK(result.rank < result.world_size, "rank {} out of range for world_size {}", result.rank,
             result.world_size);
  // A restarted job's attempt (c10drun --max-restarts) keeps to its own keys (attempt_store.h).
  const int attempt = store::restart_count_from_env();

  if (url.scheme == "file") {
    C10D_CHECK(!url.external, "init method '{}': ?external applies to tcp:// only", init_method);
    C10D_LOG_INFO("rendezvous: rank {} of {} opens the file store {}", result.rank,
                  result.world_size, url.body);
    result.store = std::make_shared<FileStore>(
        url.body, timeout, FileStoreJob{result.rank, result.world_size, run_id()});
  } else if (mpirun) {
    result.store = store::open_mpirun_store(*mpirun, result.rank, timeout);
  } else {
    result.store =
        open_tcp_store(host, port, result.rank, resolve_external(url), timeout, init_method);
  }
  result.store = store::store_for_attempt(std::move(result.store), attempt);
  return result;
}

}  // namespace c10d::inline v1
