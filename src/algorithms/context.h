// What every algorithm in src/algorithms/ is given: the transport to its peers, the op's tag, and
// the op's deadline. Algorithms see ranks and buffers, never sockets.
#pragma once

#include "transport/transport.h"

namespace c10d::inline v1::algorithms {

struct Context {
  transport::Transport& transport;
  transport::Tag tag;
  transport::Clock::time_point deadline;

  int rank() const { return transport.rank(); }
  int size() const { return transport.size(); }
};

}  // namespace c10d::inline v1::algorithms
