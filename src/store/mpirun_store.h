// The store of a job started by mpirun that names no MASTER_ADDR/MASTER_PORT.
//
// mpirun gives every process its rank and size (OMPI_COMM_WORLD_RANK/_SIZE) but no meeting
// point. When all ranks share this host, rank 0 hosts a TCP store on 127.0.0.1 on an ephemeral
// port and writes "port\n" to a file in the job's session directory (mpirun makes one per job,
// OMPI_MCA_orte_jobfam_session_dir, and removes it when the job ends; else $TMPDIR/c10d-<job>),
// by write and rename so that a reader never sees half of it. The other ranks wait for the
// file, up to the timeout, and connect.
//
// Errors: InvalidArgument when the ranks span several hosts (name MASTER_ADDR and MASTER_PORT
// instead); TimeoutError naming the file when rank 0 never wrote it.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>

#include "c10d/store.h"
#include "c10d/types.h"

namespace c10d::inline v1::store {

struct MpirunJob {
  std::filesystem::path port_file;  // where rank 0 leaves the store's port
  int size = 0;
  int local_size = 0;  // ranks on this host
};

// The job this process belongs to, when mpirun started it; nullopt otherwise.
std::optional<MpirunJob> mpirun_job();

// Rank 0 hosts the store and publishes its port; the others read the port and connect.
std::shared_ptr<Store> open_mpirun_store(const MpirunJob& job, int rank, Milliseconds timeout);

}  // namespace c10d::inline v1::store
