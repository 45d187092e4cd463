// The store of a job started by mpirun that names no MASTER_ADDR/MASTER_PORT.
//
// mpirun gives every process its rank and size (OMPI_COMM_WORLD_RANK/_SIZE) but no meeting
// point. When all ranks share this host, rank 0 hosts a TCP store on 127.0.0.1 on an ephemeral
// port and writes "port\n" to a file in the job's session directory (mpirun makes one per job,
// OMPI_MCA_orte_jobfam_session_dir, and removes it when the job ends; else $TMPDIR/c10d-<job>,
// made mode 0700), by write and rename so that a reader never sees half of it. The other ranks
// wait for the file, up to the timeout, and connect. Rank 0's store takes the file with it when
// it goes, and the fallback directory when rank 0 made it.
//
// The store is closed by default: without C10D_STORE_TOKEN, rank 0 makes up a random token,
// hosts the store with it and writes it as the file's second line ("port\ntoken\n"). The file
// is mode 0600 and its directory must be this user's and writable by no one else, so only
// processes of this user can join or read the job's keys (the same trust as its shared memory).
// With C10D_STORE_TOKEN set, every rank uses that and the file holds the port alone.
//
// Errors: InvalidArgument when the ranks span several hosts (name MASTER_ADDR and MASTER_PORT
// instead, and C10D_STORE_TOKEN); StoreError naming the file or directory when it cannot be
// read, is not this user's private one, or does not hold a port and a token; TimeoutError naming
// the file when rank 0 never wrote it.
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
