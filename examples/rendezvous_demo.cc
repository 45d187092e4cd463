// rendezvous_demo: N processes find each other through c10d::rendezvous and list who they met.
//
//   MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 WORLD_SIZE=4 RANK=r rendezvous_demo [INIT_METHOD]
//
// INIT_METHOD defaults to env:// (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, and
// C10D_STORE_EXTERNAL=1 when a `c10d-store serve` is already listening); tcp:// and file:// URLs
// work too. C10D_DEMO_TIMEOUT_MS bounds every wait (default 60000, at most a day). Each rank
// publishes "<hostname>:<pid>", waits for everyone's, prints
//   rank r of N found: 0=host:pid 1=host:pid ...
// and then meets the others at a store-based barrier. Exit status 0 on success, 1 on error, 2
// for a flag or a second argument (it takes none but the init method).
#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>
#include <system_error>
#include <vector>

#include "c10d/errors.h"
#include "c10d/rendezvous.h"
#include "c10d/store.h"

namespace {

constexpr long long kMaxTimeoutMs = 24LL * 3600 * 1000;  // a day: far past any real wait

c10d::Milliseconds demo_timeout() {
  const char* text = std::getenv("C10D_DEMO_TIMEOUT_MS");
  if (text == nullptr || *text == '\0') return c10d::Milliseconds(60'000);
  const std::string_view s(text);
  long long ms = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), ms);
  if (ec != std::errc() || end != s.data() + s.size() || ms <= 0 || ms > kMaxTimeoutMs) {
    throw c10d::InvalidArgument(
        fmt::format("C10D_DEMO_TIMEOUT_MS '{}' is not an integer from 1 to {} (milliseconds)", text,
                    kMaxTimeoutMs));
  }
  return c10d::Milliseconds(ms);
}

std::string hostname() {
  char name[HOST_NAME_MAX + 1] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "unknown-host";
  return name;
}

// Everyone adds itself to "demo/arrived"; the last to arrive opens "demo/done" for all.
void barrier(c10d::Store& store, int world_size, c10d::Milliseconds timeout) {
  if (store.add("demo/arrived", 1) == world_size) store.set("demo/done", std::string_view("1"));
  const std::vector<std::string> done = {"demo/done"};
  store.wait(done, timeout);
}

// When rank 0 hosts the store, its exit takes the server down: it stays until every other rank
// has made its last call ("demo/left"), so nobody loses the server mid-request.
void leave(c10d::Store& store, int rank, int world_size, c10d::Milliseconds timeout) {
  if (world_size == 1) return;
  if (rank != 0) {
    if (store.add("demo/left", 1) == world_size - 1) {
      store.set("demo/all_left", std::string_view("1"));
    }
    return;
  }
  const std::vector<std::string> all_left = {"demo/all_left"};
  store.wait(all_left, timeout);
}

constexpr const char* kUsage =
    "usage: rendezvous_demo [INIT_METHOD]   (env:// by default, or a tcp:// or file:// URL)\n";

int run(int argc, char** argv) {
  const std::string init_method = argc > 1 ? argv[1] : "env://";
  const c10d::Milliseconds timeout = demo_timeout();
  c10d::RendezvousResult rv = c10d::rendezvous(init_method, -1, -1, timeout);
  c10d::Store& store = *rv.store;

  store.set(fmt::format("demo/rank/{}", rv.rank),
            std::string_view(fmt::format("{}:{}", hostname(), ::getpid())));
  std::vector<std::string> keys;
  for (int r = 0; r < rv.world_size; ++r) keys.push_back(fmt::format("demo/rank/{}", r));
  store.wait(keys, timeout);
  const std::vector<c10d::Bytes> values = store.multi_get(keys);

  std::string line = fmt::format("rank {} of {} found:", rv.rank, rv.world_size);
  for (int r = 0; r < rv.world_size; ++r) {
    const c10d::Bytes& value = values[static_cast<std::size_t>(r)];
    line += fmt::format(" {}={}", r, std::string(value.begin(), value.end()));
  }
  fmt::print("{}\n", line);
  std::fflush(stdout);

  barrier(store, rv.world_size, timeout);
  fmt::print("rank {} passed the barrier\n", rv.rank);
  std::fflush(stdout);
  leave(store, rv.rank, rv.world_size, timeout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  // One optional argument, the init method; anything that looks like a flag is refused by name
  // rather than taken for an init method.
  if (argc > 1) {
    const std::string arg = argv[1];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (arg.rfind('-', 0) == 0) {
      std::fprintf(stderr, "rendezvous_demo: unknown flag '%s'\n%s", arg.c_str(), kUsage);
      return 2;
    }
    if (argc > 2) {
      std::fprintf(stderr, "rendezvous_demo: unexpected argument '%s' after the init method\n%s",
                   argv[2], kUsage);
      return 2;
    }
  }
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    fmt::print(stderr, "rendezvous_demo: {}\n", e.what());
    return 1;
  }
}
