#include "algorithms/entry_check.h"

#include "algorithms/barrier.h"

namespace c10d::inline v1::algorithms {

EntryCheck::EntryCheck(const Context& ctx)
    : ctx_{ctx.transport, transport::entry_tag(ctx.tag), ctx.deadline, ctx.call} {
  const int n = ctx_.size();
  if (n == 1) return;
  // The receive first: on a rendezvous transport the peer's send completes only once it matches.
  recv0_ = ctx_.transport.irecv(dissemination_recv_peer(n, ctx_.rank(), 0), ctx_.tag, received_,
                                ctx_.call);
  send0_ =
      ctx_.transport.isend(dissemination_send_peer(n, ctx_.rank(), 0), ctx_.tag, token_, ctx_.call);
}

void EntryCheck::finish() {
  if (!recv0_) return;
  recv0_->wait(ctx_.deadline);
  const int n = ctx_.size();
  const int me = ctx_.rank();
  for (int k = 1; k < dissemination_rounds(n); ++k) {
    auto r =
        ctx_.transport.irecv(dissemination_recv_peer(n, me, k), ctx_.tag, received_, ctx_.call);
    auto s = ctx_.transport.isend(dissemination_send_peer(n, me, k), ctx_.tag, token_, ctx_.call);
    r->wait(ctx_.deadline);
    s->wait(ctx_.deadline);
  }
  send0_->wait(ctx_.deadline);
}

}  // namespace c10d::inline v1::algorithms
