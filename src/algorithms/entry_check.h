// EntryCheck: the ranks of a rooted collective (broadcast, reduce, gather, scatter) hear that
// every rank entered it with the same call, so that no rank returns success from an op another
// rank did not run.
//
// Why: in a rooted op some ranks only send (a broadcast's or scatter's root, a gather's or tree
// reduce's leaves, a chain's links towards the leaves). A receiver that meets a frame of another
// call fails (transport.h: Calls), but a rank that only sent has finished by then.
//
// How: a dissemination exchange (barrier.h) of one-byte messages under the op's entry tag
// (transport::entry_tag: the op's own in the call notes, so a rank that runs another op under
// that sequence number fails on these messages too) and with the op's call, which holds the root
// (fingerprint.h: pack_call), so each receive checks the sender's call. Round 0 is posted on
// entry, before any data moves; the later rounds run after the data (finish), so no rank leaves
// before every rank entered with this call.
//
// Cost: ceil(log2 n) rounds of one-byte messages per rooted op, round 0 beside the data; a rank's
// op ends no sooner than every rank entered it (docs/perf-log.md has the figures).
#pragma once

#include <array>
#include <cstddef>
#include <memory>

#include "algorithms/context.h"

namespace c10d::inline v1::algorithms {

class EntryCheck {
 public:
  // Posts round 0 (nothing when ctx has one rank).
  explicit EntryCheck(const Context& ctx);
  EntryCheck(const EntryCheck&) = delete;
  EntryCheck& operator=(const EntryCheck&) = delete;

  // Round 0 and the later rounds: returns once every rank entered, or throws the transport's
  // error (a CallMismatch for a rank that entered another call; a PeerTimeout).
  void finish();

 private:
  Context ctx_;  // under the entry tag
  // Distinct buffers per direction, as the barrier's: a send's byte stays untouched until it
  // completes.
  const std::array<std::byte, 1> token_{std::byte{1}};
  std::array<std::byte, 1> received_{};
  std::unique_ptr<transport::Request> recv0_;
  std::unique_ptr<transport::Request> send0_;
};

}  // namespace c10d::inline v1::algorithms
