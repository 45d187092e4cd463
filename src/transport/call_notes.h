// CallNotes: what a rank saw of its recent ops' calls (transport.h: Calls), to find a message of
// another call that no receive will meet. A receive meets only messages of its own peer and tag;
// a rank that runs another op under the same sequence number may wait for other peers, or other
// lanes of a torus plan (transport::lane_tag), while the messages of the other call wait
// unexpected. So the matcher (matcher.h) notes, per op (a tag without lane and stage:
// lane_op_tag), the call of this rank's receives that found no message waiting (posted) and of
// messages that waited unexpected (arrived). A receive of one call and a message of another
// under one op are a conflict, whichever came first.
//
// Once a conflict is noted, every later receive of that op that finds no message waiting
// conflicts too: the op is lost on this rank. Notes are few (kNotes, the oldest replaced) and
// only ever compare one op's calls: a note lost misses a conflict, none invents one (an op's tag
// is its alone while it runs: transport.h). kUnchecked calls are never noted. The common case,
// another receive or message of the op this rank posted last, with its call, costs two compares.
//
// Thread-safety: none; the matcher's owner's lock guards it.
#pragma once

#include <array>
#include <cstddef>
#include <optional>

#include "transport/transport.h"

namespace c10d::inline v1::transport {

class CallNotes {
 public:
  // A message of another call than this rank's own, under the same op.
  struct Conflict {
    int peer = -1;  // who sent it
    Call call = kUnchecked;
  };

  // This rank posts a receive of `call` under `tag` that found no message waiting: the conflict
  // with a message of its op that waited unexpected, if any.
  std::optional<Conflict> posted(Tag tag, Call call) {
    if (call == kUnchecked) return std::nullopt;
    const Tag op = lane_op_tag(tag);
    if (op == last_op_ && call == last_call_) return std::nullopt;
    last_op_ = op;
    last_call_ = call;
    bool noted = false;
    for (const Note& n : notes_) {
      if (n.op != op || n.call == kUnchecked) continue;
      if (n.call != call && n.peer != kOwn) return Conflict{n.peer, n.call};
      noted = noted || (n.call == call && n.peer == kOwn);
    }
    if (!noted) note({op, call, kOwn});
    return std::nullopt;
  }

  // A message from `peer` of `call` under `tag` waits unexpected: true when this rank posted a
  // receive of its op with another call.
  bool arrived(int peer, Tag tag, Call call) {
    if (call == kUnchecked) return false;
    const Tag op = lane_op_tag(tag);
    if (op == last_op_ && call == last_call_) return false;
    bool noted = false;
    for (const Note& n : notes_) {
      if (n.op != op || n.call == kUnchecked) continue;
      if (n.call != call && n.peer == kOwn) {
        last_op_ = kNoOp;  // the op's next receive looks at the notes again, and finds this one
        note({op, call, peer});
        return true;
      }
      noted = noted || n.call == call;
    }
    if (!noted) note({op, call, peer});
    return false;
  }

  // A receive of this rank's op under `tag` took a message from `peer` of `call`, another call
  // than its own: the op is lost on this rank, so its later receives that find no message
  // waiting conflict too (posted).
  void lost(int peer, Tag tag, Call call) {
    if (call == kUnchecked) return;
    last_op_ = kNoOp;
    note({lane_op_tag(tag), call, peer});
  }

 private:
  static constexpr int kOwn = -2;  // Note::peer of this rank's own receives
  static constexpr std::size_t kNotes = 8;
  static constexpr Tag kNoOp = ~Tag{0};  // no op's tag (transport.h: the user bit and more)
  struct Note {
    Tag op = 0;
    Call call = kUnchecked;  // kUnchecked: an empty note
    int peer = kOwn;         // the sender of a message that waited; kOwn
  };
  void note(const Note& n) {
    notes_[next_] = n;
    next_ = (next_ + 1) % kNotes;
  }

  std::array<Note, kNotes> notes_{};
  std::size_t next_ = 0;
  Tag last_op_ = kNoOp;  // the op and call of this rank's last receive: the common case
  Call last_call_ = kUnchecked;
};

}  // namespace c10d::inline v1::transport
