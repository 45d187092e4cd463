// mpirun_store_token: under `mpirun -np N` without MASTER_ADDR, MASTER_PORT or C10D_STORE_TOKEN,
// the store rank 0 hosts (src/store/mpirun_store.h) is closed: every rank meets through env://,
// and a client without the token (any other process on the host) is refused. Rank 0 also checks
// that the file that carries the token to the others is this user's alone (mode 0600). Prints
// "OK rank R" and exits 0, or prints what differed and exits 1.
#include <fmt/format.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdlib>
#include <string>

#include "c10d/c10d.h"
#include "mpirun_program.h"
#include "store/mpirun_store.h"

namespace {

using namespace std::chrono_literals;

using c10d::testing::check;

int run() {
  ::unsetenv("C10D_STORE_TOKEN");  // the default this program checks
  auto met = c10d::rendezvous("env://", -1, -1, 60s);
  auto* store = dynamic_cast<c10d::TCPStore*>(met.store.get());
  bool ok = check(store != nullptr, "env:// under mpirun did not give a TCPStore");
  if (!ok) return 1;
  const int rank = met.rank;

  if (rank == 0) {
    const auto job = c10d::store::mpirun_job();
    ok &= check(job.has_value(), "mpirun_job() found no job");
    if (job) {
      struct stat st {};
      ok &= check(::stat(job->port_file.c_str(), &st) == 0,
                  fmt::format("no port file at {}", job->port_file.string()));
      ok &= check((st.st_mode & 0777) == 0600,
                  fmt::format("the port file {} has mode {:o}, not 600", job->port_file.string(),
                              st.st_mode & 0777));
    }
  }

  // Another process of this host that found the port, without the token.
  c10d::TCPStoreOptions stranger;
  stranger.host = "127.0.0.1";
  stranger.port = store->port();
  stranger.timeout = 5s;
  std::string refused;
  try {
    c10d::TCPStore open(stranger);
    open.get_string("c10d/transport_secret");
  } catch (const c10d::StoreError& e) {
    refused = e.what();
  } catch (const std::exception& e) {
    refused = std::string("not a StoreError: ") + e.what();
  }
  ok &= check(
      refused.find("requires authentication") != std::string::npos,
      fmt::format("rank {}: a client without the token was not refused: '{}'", rank, refused));

  // The ranks themselves are served: every rank arrives, then all leave together (rank 0's
  // store lives until the others are done with it).
  const auto n = static_cast<std::int64_t>(met.world_size);
  if (store->add("arrived", 1) == n) store->set("all arrived", std::string_view("1"));
  store->wait(std::vector<std::string>{"all arrived"}, 60s);
  if (store->add("left", 1) == n) store->set("all left", std::string_view("1"));
  if (rank == 0) store->wait(std::vector<std::string>{"all left"}, 60s);
  if (ok) fmt::print("OK rank {}\n", rank);
  return ok ? 0 : 1;
}

}  // namespace

int main() { return c10d::testing::run_program(run); }
