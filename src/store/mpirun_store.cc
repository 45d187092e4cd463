#include "store/mpirun_store.h"

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <string>
#include <thread>

#include "core/check.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1::store {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

// mpirun's counts: a malformed one is an InvalidArgument naming it (never a partial parse).
int env_count(const char* name) {
  return static_cast<int>(core::env_int(name, 1, std::numeric_limits<int>::max()).value_or(-1));
}

}  // namespace

std::optional<MpirunJob> mpirun_job() {
  const auto job_id =
      env("PMIX_NAMESPACE") ? env("PMIX_NAMESPACE") : env("OMPI_MCA_ess_base_jobid");
  if (!job_id || !env("OMPI_COMM_WORLD_SIZE")) return std::nullopt;
  MpirunJob job;
  job.size = env_count("OMPI_COMM_WORLD_SIZE");
  job.local_size = env_count("OMPI_COMM_WORLD_LOCAL_SIZE");
  std::filesystem::path dir;
  if (auto session = env("OMPI_MCA_orte_jobfam_session_dir")) {
    dir = *session;
  } else {
    dir = std::filesystem::path(env("TMPDIR").value_or("/tmp")) / ("c10d-" + *job_id);
  }
  job.port_file = dir / ("c10d-store-" + *job_id);
  return job;
}

std::shared_ptr<Store> open_mpirun_store(const MpirunJob& job, int rank, Milliseconds timeout) {
  C10D_CHECK(job.local_size == job.size,
             "env:// under mpirun: the {} ranks span several hosts ({} on this one), so rank 0 "
             "cannot host the store on this host for all of them; set MASTER_ADDR and "
             "MASTER_PORT",
             job.size, job.local_size);
  TCPStoreOptions options;
  options.host = "127.0.0.1";
  options.timeout = timeout;
  if (rank == 0) {
    options.is_server = true;
    options.port = 0;
    auto store = std::make_shared<TCPStore>(std::move(options));
    std::error_code ec;
    std::filesystem::create_directories(job.port_file.parent_path(), ec);
    const auto tmp = job.port_file.string() + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << store->port() << "\n";
      C10D_CHECK(out.good(), "env:// under mpirun: cannot write the store's port to {}", tmp);
    }
    std::filesystem::rename(tmp, job.port_file, ec);
    C10D_CHECK(!ec, "env:// under mpirun: cannot rename {} to {}: {}", tmp, job.port_file.string(),
               ec.message());
    C10D_LOG_INFO("rendezvous: rank 0 hosts the store at 127.0.0.1:{} (port in {})", store->port(),
                  job.port_file.string());
    return store;
  }
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    std::ifstream in(job.port_file);
    unsigned port = 0;
    if (in >> port && port > 0 && port <= 65535) {
      options.port = static_cast<std::uint16_t>(port);
      C10D_LOG_INFO("rendezvous: rank {} connects to the store at 127.0.0.1:{} (from {})", rank,
                    port, job.port_file.string());
      return std::make_shared<TCPStore>(std::move(options));
    }
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited >= timeout) {
      C10D_THROW(TimeoutError,
                 "env:// under mpirun: rank {} waited {} ms for rank 0 to write the store's port "
                 "to {}",
                 rank, std::chrono::duration_cast<Milliseconds>(waited).count(),
                 job.port_file.string());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

}  // namespace c10d::inline v1::store
