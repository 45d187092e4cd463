#include "algorithms/entry_check.h"

#include <cstring>

#include "algorithms/barrier.h"

namespace c10d::inline v1::algorithms {

EntryCheck::EntryCheck(const Context& ctx, std::int32_t root)
    : ctx_{ctx.transport, transport::entry_tag(ctx.tag), ctx.deadline, ctx.call} {
  std::memcpy(mine_.data(), &root, sizeof root);
  const int n = ctx_.size();
  if (n == 1) return;
  // The receive first: on a rendezvous transport the peer's send completes only once it matches.
  recv0_ = ctx_.transport.irecv(dissemination_recv_peer(n, ctx_.rank(), 0), ctx_.tag, theirs_,
                                ctx_.call);
  send0_ =
      ctx_.transport.isend(dissemination_send_peer(n, ctx_.rank(), 0), ctx_.tag, mine_, ctx_.call);
}

std::optional<RootConflict> EntryCheck::compare(int peer) const {
  std::int32_t theirs = 0;
  std::memcpy(&theirs, theirs_.data(), sizeof theirs);
  std::int32_t mine = 0;
  std::memcpy(&mine, mine_.data(), sizeof mine);
  if (theirs == mine) return std::nullopt;
  return RootConflict{peer, theirs};
}

std::optional<RootConflict> EntryCheck::first() {
  if (!recv0_ || first_done_) return std::nullopt;
  first_done_ = true;
  recv0_->wait(ctx_.deadline);
  return compare(dissemination_recv_peer(ctx_.size(), ctx_.rank(), 0));
}

std::optional<RootConflict> EntryCheck::finish() {
  if (!recv0_) return std::nullopt;
  if (auto conflict = first()) return conflict;
  const int n = ctx_.size();
  const int me = ctx_.rank();
  for (int k = 1; k < dissemination_rounds(n); ++k) {
    const int from = dissemination_recv_peer(n, me, k);
    auto r = ctx_.transport.irecv(from, ctx_.tag, theirs_, ctx_.call);
    auto s = ctx_.transport.isend(dissemination_send_peer(n, me, k), ctx_.tag, mine_, ctx_.call);
    r->wait(ctx_.deadline);
    s->wait(ctx_.deadline);
    if (auto conflict = compare(from)) return conflict;
  }
  send0_->wait(ctx_.deadline);
  return std::nullopt;
}

}  // namespace c10d::inline v1::algorithms
