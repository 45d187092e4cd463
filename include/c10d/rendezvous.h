// Rendezvous: turns an init method URL into a store plus this process's rank and world size.
//
//   tcp://host:port[?rank=R&world_size=N]   rank 0 hosts the TCP store server on host:port
//                                           (port 0: an ephemeral port) and every rank connects.
//   env://                                  the same, from MASTER_ADDR, MASTER_PORT, RANK and
//                                           WORLD_SIZE (or mpirun's OMPI_COMM_WORLD_RANK/_SIZE).
//                                           Under mpirun with neither MASTER_ADDR nor
//                                           MASTER_PORT set, rank 0 hosts the store on
//                                           127.0.0.1 and tells the others its port through
//                                           the job's session directory (one host only).
//   file:///path[?rank=R&world_size=N]      a FileStore at /path, as rank R of a job of N
//                                           (FileStoreJob, store.h): rank 0 deletes what an
//                                           earlier run left there and starts afresh, the
//                                           other ranks read nothing before that, the last
//                                           rank to leave deletes the file, and a path a
//                                           live job holds is refused ("in use by another
//                                           job"). C10D_RUN_ID (else Slurm's or mpirun's job
//                                           id) tells apart jobs started on one path at once.
//
// Rank and world size come from, in order: the arguments (when >= 0), the URL's query, the
// environment (RANK/WORLD_SIZE, then OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE). When a server
// already listens at the address (the launcher's, or `c10d-store serve`), set
// C10D_STORE_EXTERNAL=1 (or ?external=1) and rank 0 connects instead of hosting.
// C10D_STORE_TOKEN, when set, is the store's shared secret. C10D_RESTART_COUNT (set by
// c10drun) k > 0 puts every key of the store returned under "c10d/attempt/<k>/" (a PrefixStore),
// so a restarted job reads nothing an earlier attempt left in a store that outlived it.
//
// Errors: InvalidArgument naming the missing or malformed piece (the variable, the URL);
// TimeoutError / StoreError from the store itself.
//
// Blocking: rendezvous() does not wait for the other ranks; it returns once this rank reaches
// the store: rank 0 once its server listens (or, external, once it connected), the others once
// they connected to it (retrying a refused connection), file:// once rank 0 of the job started
// the file's generation. Every wait is bounded by `timeout` (TimeoutError naming the address or
// path). Waiting for the others is the caller's, through the store's wait() and get().
// Thread-safety: it may be called from several threads at once (each call makes its own store);
// it reads the environment, which no thread may change during the call. Lifetime: the store
// returned is the caller's; for rank 0 of tcp:// and env:// it owns the server, which stops
// when the last reference to the store goes.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "c10d/export.h"
#include "c10d/store.h"
#include "c10d/types.h"

namespace c10d::inline v1 {

struct RendezvousResult {
  std::shared_ptr<Store> store;
  int rank = -1;
  int world_size = -1;
  std::string store_host;  // the TCP store's host (tcp://, env://); empty for file://
};

C10D_API RendezvousResult rendezvous(std::string_view init_method, int rank = -1,
                                     int world_size = -1, Milliseconds timeout = kDefaultTimeout);

}  // namespace c10d::inline v1
