// EntryCheck: the ranks of a rooted collective (broadcast, reduce, gather, scatter) tell each
// other that they entered it, and with which root, so that no rank returns success from an op
// another rank did not run.
//
// Why: in a rooted op some ranks only send (a broadcast's or scatter's root, a gather's or tree
// reduce's leaves, a chain's links towards the leaves). A receiver that meets a frame of another
// call fails (transport.h: Calls), but a rank that only sent has finished by then. And ranks
// that disagree only on the root send frames of one call along different trees.
//
// How: a dissemination exchange (barrier.h) of each rank's root, under the op's entry tag
// (transport::entry_tag: the op's own in the call notes, so a rank running another op under that
// sequence number fails on these messages too) and with the op's call. Round 0 is posted on
// entry, before any data moves. A rank other than the root waits for round 0 (its predecessor's
// root) before the data (first()): a rank whose tree differs would otherwise wait for data that
// never comes; it receives nothing before its parent's data in any case. Every rank runs the
// later rounds after the data (finish()), so no rank leaves before every rank entered with the
// same call and root. Each rank compares the root of every note it receives with its own.
//
// Cost: ceil(log2 n) rounds of 4-byte messages per rooted op; round 0 overlaps the data.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "algorithms/context.h"

namespace c10d::inline v1::algorithms {

// A rank's note named another root than this rank's.
struct RootConflict {
  int peer = -1;
  std::int32_t theirs = -1;
};

class EntryCheck {
 public:
  // Posts round 0 (nothing when ctx has one rank).
  EntryCheck(const Context& ctx, std::int32_t root);
  EntryCheck(const EntryCheck&) = delete;
  EntryCheck& operator=(const EntryCheck&) = delete;

  // Waits for round 0's note; a conflict found there.
  std::optional<RootConflict> first();
  // Round 0 (unless first() ran) and the later rounds, each with its conflict check; returns
  // once every rank entered, or with the first conflict.
  std::optional<RootConflict> finish();

 private:
  std::optional<RootConflict> compare(int peer) const;

  Context ctx_;  // under the entry tag
  std::array<std::byte, 4> mine_{};
  std::array<std::byte, 4> theirs_{};
  std::unique_ptr<transport::Request> recv0_;
  std::unique_ptr<transport::Request> send0_;
  bool first_done_ = false;
};

}  // namespace c10d::inline v1::algorithms
