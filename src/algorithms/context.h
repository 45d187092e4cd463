// What every algorithm in src/algorithms/ is given: the transport to its peers, the op's tag, the
// op's deadline, and its call, which every message of the op carries (transport.h: Calls: an
// algorithm posts isend(peer, ctx.tag, data, ctx.call) and irecv alike). Algorithms see ranks and
// buffers, never sockets.
#pragma once

#include "transport/transport.h"

namespace c10d::inline v1::algorithms {

struct Context {
  transport::Transport& transport;
  transport::Tag tag;
  transport::Clock::time_point deadline;
  // The op's call; kUnchecked for exchanges that belong to no collective of the user's (the
  // DETAIL fingerprints, tests of the algorithms alone).
  transport::Call call = transport::kUnchecked;

  int rank() const { return transport.rank(); }
  int size() const { return transport.size(); }
};

}  // namespace c10d::inline v1::algorithms
