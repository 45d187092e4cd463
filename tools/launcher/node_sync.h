// NodeSync: how the launchers of a job of several nodes agree, under --max-restarts, on when an
// attempt stops and what follows it, through the store that node 0's launcher hosts (and keeps
// for the whole job, every attempt in its own part: store/attempt_store.h).
//
// Keys, outside every attempt's part of the store:
//   c10drun/attempt/<k>/stop      why attempt k stopped: the first failure or stop signal any
//                                 node saw ("node 1: rank 5 (pid 77): exited with code 1");
//                                 the first writer wins (compare_set)
//   c10drun/attempt/<k>/node/<r>  how attempt k ended on node r: ok, failed or stopped
//   c10drun/attempt/<k>/left/<r>  node r (> 0) read how the job ended after attempt k, so node
//                                 0 may take the store down
//
// During an attempt a thread of the launcher (the watch) looks at the attempt's stop key every
// kWatchInterval and makes stop_fd() readable once it is set, so every node stops its
// processes within moments of a failure anywhere, however its own ranks are blocked; it also
// writes this node's own stop there (announce). After the attempt, finish() writes this node's
// outcome and waits for every node's (at most kFinishTimeout), so that all of them decide the
// same next step (restarts.h) and start the next attempt together. A stop signal that arrives
// while it waits marks this node stopped for this attempt and the next, so the others end too
// rather than wait for it.
//
// Errors: finish() throws StoreError / TimeoutError naming the nodes that did not report.
// Thread-safety: one launcher thread calls everything but on_stop's work, which the watch
// does; the members the watch shares are under mu_.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "c10d/store.h"
#include "core/fd.h"
#include "launcher/supervisor.h"

namespace c10d::inline v1::launcher {

inline constexpr Milliseconds kWatchInterval{200};
// How long a node waits for the others at the end of an attempt. They end within moments of
// each other (a failure anywhere stops every node through the stop key); the bound is for a
// node whose launcher is gone.
inline constexpr Milliseconds kFinishTimeout{15 * 60 * 1000};
// How long node 0 keeps the store up for the other nodes to read how the job ended.
inline constexpr Milliseconds kLeaveTimeout{10'000};

enum class NodeOutcome { kSucceeded, kFailed, kStopped };

// A new client of the job's store, whose calls and connection take at most `timeout`.
using StoreFactory = std::function<std::unique_ptr<Store>(Milliseconds timeout)>;

class NodeSync {
 public:
  NodeSync(int node_rank, int nnodes, StoreFactory connect);
  ~NodeSync();
  NodeSync(const NodeSync&) = delete;
  NodeSync& operator=(const NodeSync&) = delete;

  // Starts the watch of attempt k; the hooks the attempt's Supervisor takes.
  JobHooks begin(int attempt);
  // Stops the watch, after writing this node's stop if it has not yet.
  void end();

  struct Ended {
    std::vector<NodeOutcome> outcomes;  // by node rank
    std::string reason;                 // the attempt's stop key; empty when none was set
  };
  // Writes how attempt k ended here (`failure`: Supervisor::failure(), for the stop key) and
  // returns once every node has. Reads `signal_fd` meanwhile: a stop signal sets
  // `stop_signal` and ends the wait.
  Ended finish(int attempt, NodeOutcome local, const std::string& failure, int signal_fd,
               int& stop_signal);
  // The job ends after attempt k: the other nodes say they read it, and node 0 waits for them
  // (at most kLeaveTimeout) before its store stops.
  void leave(int attempt);

 private:
  void watch(int attempt);
  std::string key(int attempt, const std::string& what) const;

  const int node_rank_;
  const int nnodes_;
  StoreFactory connect_;
  core::Fd stop_fd_;  // an eventfd
  std::thread watcher_;

  std::mutex mu_;
  std::condition_variable wake_;
  bool done_ = false;
  std::string announce_;  // this node's stop, for the watch to write
  std::string reason_;    // the stop key's value, once the watch saw it
};

}  // namespace c10d::inline v1::launcher
