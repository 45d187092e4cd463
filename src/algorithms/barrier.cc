#include "algorithms/barrier.h"

#include <array>
#include <bit>
#include <memory>

namespace c10d::inline v1::algorithms {

int dissemination_rounds(int n) {
  return std::bit_width(static_cast<unsigned>(n) - 1);  // ceil(log2 n), 0 for n = 1
}

int dissemination_send_peer(int n, int rank, int round) {
  return static_cast<int>((static_cast<long long>(rank) + (1LL << round)) % n);
}

int dissemination_recv_peer(int n, int rank, int round) {
  const long long back = (1LL << round) % n;
  return static_cast<int>((rank - back + n) % n);
}

void barrier(const Context& ctx) {
  const int n = ctx.size();
  auto& t = ctx.transport;
  // Distinct buffers per direction: a send's bytes must stay untouched until it completes.
  const std::array<std::byte, 1> token{std::byte{1}};
  std::array<std::byte, 1> received{};
  for (int k = 0; k < dissemination_rounds(n); ++k) {
    // Receive posted before the send is waited on: on a rendezvous transport the peer's send
    // completes only once this receive matches it.
    auto r = t.irecv(dissemination_recv_peer(n, ctx.rank(), k), ctx.tag, received, ctx.call);
    auto s = t.isend(dissemination_send_peer(n, ctx.rank(), k), ctx.tag, token, ctx.call);
    r->wait(ctx.deadline);
    s->wait(ctx.deadline);
  }
}

}  // namespace c10d::inline v1::algorithms
