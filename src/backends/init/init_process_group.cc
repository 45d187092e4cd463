// init_process_group (include/c10d/init.h): fills InitOptions from the environment, meets the
// other ranks through rendezvous(), and builds the chosen backend's group.
#include <cstdlib>
#include <string_view>

#include "c10d/errors.h"
#include "c10d/init.h"
#include "c10d/rendezvous.h"
#include "core/check.h"
#include "core/parse.h"

namespace c10d::inline v1 {
namespace {

std::string from_env(const std::string& value, const char* name, const char* fallback) {
  if (!value.empty()) return value;
  const char* env = std::getenv(name);
  return env != nullptr && *env != '\0' ? std::string(env) : std::string(fallback);
}

Milliseconds timeout_from(const std::optional<Milliseconds>& given) {
  if (given) {
    core::check_timeout(*given, "init_process_group");
    return *given;
  }
  const auto ms = core::env_int("C10D_TIMEOUT_MS", 1, core::kMaxTimeout.count());
  return ms ? Milliseconds(*ms) : kDefaultTimeout;
}

}  // namespace

#ifndef C10D_HAS_MPI
std::shared_ptr<ProcessGroup> make_process_group_mpi(Milliseconds) {
  C10D_THROW(Unsupported,
             "make_process_group_mpi: this library was built without MPI "
             "(configure with -DC10D_WITH_MPI=ON)");
}
#endif

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options) {
  const std::string backend = from_env(options.backend, "C10D_BACKEND", "tcp");
  const std::string init_method = from_env(options.init_method, "C10D_INIT_METHOD", "env://");
  const Milliseconds timeout = timeout_from(options.timeout);
#ifdef C10D_HAS_MPI
  if (backend == "mpi") {
    // Rank and size come from MPI_COMM_WORLD; no store or rendezvous is needed.
    auto pg = make_process_group_mpi(timeout);
    C10D_CHECK(options.rank < 0 || options.rank == pg->rank(),
               "init_process_group: rank {} was asked for but MPI made this process rank {}",
               options.rank, pg->rank());
    C10D_CHECK(options.world_size < 0 || options.world_size == pg->size(),
               "init_process_group: world_size {} was asked for but MPI_COMM_WORLD has {} ranks",
               options.world_size, pg->size());
    return pg;
  }
#endif
  if (backend != "tcp" && backend != "gloo" && backend != "ici") {
    if (backend == "mpi") {
      C10D_THROW(Unsupported, "init_process_group: backend '{}' is not built into this library",
                 backend);
    }
    C10D_THROW(InvalidArgument, "init_process_group: unknown backend '{}' (expected tcp, mpi, ici)",
               backend);
  }

  RendezvousResult rv;
  if (options.store) {
    C10D_CHECK(options.rank >= 0 && options.world_size >= 1 && options.rank < options.world_size,
               "init_process_group with a store needs rank and world_size (got rank {} of {})",
               options.rank, options.world_size);
    rv.store = options.store;
    rv.rank = options.rank;
    rv.world_size = options.world_size;
  } else {
    rv = rendezvous(init_method, options.rank, options.world_size, timeout);
  }
  if (backend == "ici") {
    // Every rank is a chip on this host; the slice comes from the C10D_ICI_* variables.
    ProcessGroupICIOptions ici;
    ici.timeout = timeout;
    ici.algo = options.algo;
    return make_process_group_ici(rv.store, rv.rank, rv.world_size, ici);
  }
  ProcessGroupTCPOptions tcp;
  tcp.timeout = timeout;
  tcp.store_host = rv.store_host;
  tcp.algo = options.algo;
  return make_process_group_tcp(rv.store, rv.rank, rv.world_size, tcp);
}

}  // namespace c10d::inline v1
