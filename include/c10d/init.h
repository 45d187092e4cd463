// init_process_group: from an init method to a working ProcessGroup, in one call.
//
//   auto pg = c10d::init_process_group({.backend = "tcp", .init_method = "env://"});
//   auto t = c10d::Tensor::from_vector(std::vector<float>{1, 2, 3}, c10d::DType::kFloat32);
//   pg->all_reduce({t})->wait();
//
// Every field has a default taken from the environment, so a program started by c10drun (or
// by mpirun, for rank and size) needs none:
//   backend      "tcp" (C10D_BACKEND), "mpi", or "ici" (the simulated TPU torus: the slice
//                comes from C10D_ICI_PRESET, C10D_ICI_TOPOLOGY and the other C10D_ICI_*
//                variables of ProcessGroupICIOptions below; default a 1-D ring of world_size)
//   init_method  "env://" (C10D_INIT_METHOD); tcp://host:port and file:///path as rendezvous.h
//   rank, world_size  RANK / WORLD_SIZE, then OMPI_COMM_WORLD_RANK / OMPI_COMM_WORLD_SIZE
//   timeout      the default per-op timeout of the group (C10D_TIMEOUT_MS), and the bound on
//                the rendezvous and connection set-up
//   algo         forced algorithms, as C10D_ALGO: "ring", or "all_reduce=ring,broadcast=tree"
//                (all_reduce: ring|hd; broadcast: tree|chain; an unknown name is an error)
// The group keeps its store alive. C10D_DEBUG=DETAIL turns on the collective fingerprint
// check (every rank compares op, dtype, count, root and sequence before each collective).
//
// Errors: InvalidArgument naming the field or variable that is missing or wrong, Unsupported
// for a backend not built in, TimeoutError / NetworkError / StoreError from set-up. A rank
// whose set-up fails records why in the store, and the others' set-up fails within moments
// naming it, instead of waiting out the timeout.
//
// Blocking: init_process_group() and make_process_group_*() are collective: they return once
// every rank of the group has joined (rendezvous, shared memory; the TCP backend's connections
// are made at first use, with C10D_TCP_CONNECT=eager here, handshakes and all), at most
// `timeout` after the call. Thread-safety: they may be called from several
// threads at once, each call making a group of its own (threads as ranks, as the tests do);
// they read the environment, which no thread may change during the call. The group returned
// may be shared by threads (process_group.h). Lifetime: the group keeps its store alive;
// destroying the group fails its pending ops and joins its threads.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "c10d/export.h"
#include "c10d/process_group.h"
#include "c10d/store.h"
#include "c10d/types.h"

namespace c10d::inline v1 {

struct InitOptions {
  std::string backend;      // empty: C10D_BACKEND, else "tcp"
  std::string init_method;  // empty: C10D_INIT_METHOD, else "env://"
  int rank = -1;            // < 0: from the URL or the environment
  int world_size = -1;
  std::optional<Milliseconds> timeout;  // unset: C10D_TIMEOUT_MS, else kDefaultTimeout
  std::string algo;                     // empty: C10D_ALGO
  std::shared_ptr<Store> store;         // when set, used instead of the init method's store
};

C10D_API std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& options = {});

// Options of a ProcessGroup over the TCP transport.
struct ProcessGroupTCPOptions {
  Milliseconds timeout = kDefaultTimeout;  // per op, unless the op's options say otherwise
  // The address this rank listens on and publishes (IPv4 or IPv6). Empty: C10D_HOST, else the
  // local address of the interface that routes to `store_host` (so a machine with several
  // interfaces picks the one its peers reach), else 127.0.0.1. A file:// rendezvous has no
  // store host, so ranks on several hosts sharing its file set C10D_HOST.
  std::string host;
  std::string store_host;
  std::string algo;  // empty: C10D_ALGO
  std::string group_name = "default";
  // Ranks on the same host exchange bytes through shared memory instead of loopback TCP (TCP
  // stays for the other hosts). C10D_SHM=0 turns it off for the whole job; every rank must agree.
  bool shared_memory = true;
  // The secret the ranks prove they know when they connect to each other (HMAC-SHA256 over
  // nonces; never sent). Empty: C10D_STORE_TOKEN, else a random secret kept in the store, which
  // every rank and group on that store shares. Every rank of the job must use the same.
  std::string token;
};

// A ProcessGroup of `world_size` ranks over TCP, meeting through `store`. Blocks until every
// rank has published its address (bounded by options.timeout); each connection is made when
// first used (C10D_TCP_CONNECT=eager: every one before this returns).
C10D_API std::shared_ptr<ProcessGroup> make_process_group_tcp(
    std::shared_ptr<Store> store, int rank, int world_size,
    const ProcessGroupTCPOptions& options = {});

// A ProcessGroup over MPI_COMM_WORLD (rank and size are MPI's), with `timeout` as the default
// per-op timeout. Initializes MPI (MPI_THREAD_MULTIPLE) unless the program already did, and
// then finalizes it at exit. Every rank calls it. Throws Unsupported when the library was
// built without MPI (C10D_WITH_MPI off) or MPI provides less than MPI_THREAD_SERIALIZED.
C10D_API std::shared_ptr<ProcessGroup> make_process_group_mpi(
    Milliseconds timeout = kDefaultTimeout);

// Options of a ProcessGroup over the simulated TPU inter-chip interconnect (docs/ici.md): each
// rank is one chip of an N-dimensional torus; chips exchange real bytes through shared memory,
// only with their neighbours, and every op also advances a simulated clock. Empty strings and
// zeros take the environment variable named beside them, then the preset's value.
struct ProcessGroupICIOptions {
  Milliseconds timeout = kDefaultTimeout;
  std::string preset;         // C10D_ICI_PRESET: v4 | v5e | v5p; empty: generic
  std::string topology;       // C10D_ICI_TOPOLOGY: "8", "2x4", "4x4x4"; empty: 1-D, world_size
  std::string wrap;           // C10D_ICI_WRAP: all | none | per axis "1,0"; empty: the preset's
  double link_bandwidth = 0;  // C10D_ICI_LINK_GBPS (GB/s one way); bytes per second here
  double hop_latency = 0;     // C10D_ICI_HOP_LATENCY_US; seconds here
  std::string down_links;     // C10D_ICI_DOWN_LINKS: "1-2,5-6", links marked down
  std::string algo;           // empty: C10D_ALGO (forcing a choice bypasses the torus algorithms)
  std::string group_name = "default";
};

// A ProcessGroup of `world_size` chips on the ICI fabric, meeting through `store` (every rank on
// this host). Blocks until its torus neighbours are connected (bounded by options.timeout).
C10D_API std::shared_ptr<ProcessGroup> make_process_group_ici(
    std::shared_ptr<Store> store, int rank, int world_size,
    const ProcessGroupICIOptions& options = {});

// The simulated duration of a completed op of an ICI group: seconds of this chip's virtual
// clock from the op's start to its end. nullopt for another backend's Work or an op that has
// not completed.
C10D_API std::optional<double> ici_simulated_seconds(const Work& work);

// The bytes, messages, busy time and utilization (busy / virtual time so far) of every link
// leaving this chip, as a text table; empty for a group of another backend (or a subgroup).
C10D_API std::string ici_link_report(const ProcessGroup& group);

}  // namespace c10d::inline v1
