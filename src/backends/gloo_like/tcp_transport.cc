// TCPTransport's public face: argument checks, posting an op, abort. The work is Impl's, split
// by part in the files tcp_transport_impl.h lists; who may move which socket's bytes is in
// tcp_connection.h.
#include "backends/gloo_like/tcp_transport.h"

#include <mutex>

#include "backends/gloo_like/tcp_transport_impl.h"
#include "core/check.h"
#include "core/parse.h"

namespace c10d::inline v1::gloo_like {
using tcp_detail::Op;
using transport::Tag;

TCPTransport::TCPTransport(std::shared_ptr<Store> store, int rank, int world_size,
                           std::string group_name, TCPTransportOptions options)
    : rank_(rank), world_size_(world_size), impl_(std::make_shared<Impl>()) {
  C10D_CHECK(store != nullptr, "TCPTransport rank {}: needs a store", rank);
  C10D_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
             "TCPTransport: rank {} is outside a world of size {}", rank, world_size);
  C10D_CHECK(
      options.host_of_rank.empty() || static_cast<int>(options.host_of_rank.size()) == world_size,
      "TCPTransport rank {}: a host map of {} ranks for a world of {}", rank,
      options.host_of_rank.size(), world_size);
  host_of_rank_ = options.host_of_rank.empty() ? transport::one_host_each(world_size)
                                               : transport::number_hosts(options.host_of_rank);
  impl_->rank = rank;
  impl_->who = fmt::format("rank {}", rank);
  impl_->fail_all_on_peer_loss = options.fail_all_on_peer_loss;
  impl_->on_abort = std::move(options.on_abort);
  impl_->pending_elsewhere = std::move(options.pending_elsewhere);
  impl_->elsewhere.assign(static_cast<std::size_t>(world_size), 0);
  impl_->max_unexpected = transport::max_unexpected_bytes(options.max_unexpected_bytes);
  impl_->store = store;
  impl_->failure_key = fmt::format("{}/failure", group_name);
  impl_->own_key = fmt::format("{}/addr/{}", group_name, rank);
  auto watch = options.setup_watch;
  if (!watch) watch = std::make_shared<backends::SetupWatch>(store, group_name, rank);
  impl_->stall_prefix = fmt::format("{}/stall/{}/", group_name, watch->attempt());
  impl_->setup_watch = watch;
  try {
    const TCPConnect mode =
        options.connect == TCPConnect::kFromEnv ? tcp_connect_from_env() : options.connect;
    impl_->lazy = mode == TCPConnect::kLazy;
    impl_->watch_failures = impl_->lazy && options.fail_all_on_peer_loss;
    // Before a deadline is computed from it: a timeout past kMaxTimeout would wrap it.
    core::check_timeout(options.timeout, fmt::format("TCPTransport rank {}", rank));
    set_up(store.get(), group_name, options, Clock::now() + options.timeout, *watch);
  } catch (...) {
    watch->fail(std::current_exception());  // records why, for the other ranks' set-up waits
  }
}

TCPTransport::~TCPTransport() {
  // Not aborted before: an orderly close, announced with a goodbye.
  impl_->abort(C10D_ERROR(NetworkError, "rank {}: the TCP transport was destroyed", rank_),
               tcp_detail::LastFrame::kGoodbye);
  // Connectors stop within a poll slice of the abort (SetupContext::cancelled), the failure
  // watch once its store call returns; after close_all the read loops and writes end with
  // errors, and then, without the guard, the io thread's run() returns.
  stop_io();
}

std::unique_ptr<transport::Request> TCPTransport::isend(int peer, Tag tag,
                                                        std::span<const std::byte> data,
                                                        transport::Call call) {
  C10D_CHECK(peer >= 0 && peer < world_size_ && peer != rank_,
             "rank {} isend ({}): bad peer {} in a world of size {}", rank_,
             transport::tag_string(tag), peer, world_size_);
  auto op = std::make_shared<Op>();
  op->self = rank_;
  op->peer = peer;
  op->tag = tag;
  op->call = call;
  op->is_send = true;
  op->send_data = data;
  op->header = encode_frame_header(tag, data.size(), call);
  impl_->submit(op);
  return tcp_detail::make_request(impl_, std::move(op));
}

std::unique_ptr<transport::Request> TCPTransport::irecv(int peer, Tag tag,
                                                        std::span<std::byte> data,
                                                        transport::Call call) {
  C10D_CHECK(peer >= 0 && peer < world_size_ && peer != rank_,
             "rank {} irecv ({}): bad peer {} in a world of size {}", rank_,
             transport::tag_string(tag), peer, world_size_);
  auto op = std::make_shared<Op>();
  op->self = rank_;
  op->peer = peer;
  op->tag = tag;
  op->call = call;
  op->recv_data = data;
  impl_->submit(op);
  return tcp_detail::make_request(impl_, std::move(op));
}

std::unique_ptr<transport::Request> TCPTransport::irecv_any(Tag tag, std::span<std::byte> data) {
  return irecv_any(tag, data, nullptr);
}

std::unique_ptr<transport::Request> TCPTransport::irecv_any(
    Tag tag, std::span<std::byte> data, std::shared_ptr<transport::SourceClaim> claim) {
  auto op = std::make_shared<Op>();
  op->self = rank_;
  op->peer = transport::kAnySource;
  op->tag = tag;
  op->recv_data = data;
  op->claim = std::move(claim);
  impl_->submit(op);
  return tcp_detail::make_request(impl_, std::move(op));
}

TCPTransport::AnySourceSleep::AnySourceSleep(TCPTransport& tcp) : impl_(tcp.impl_) {
  impl_->enter_sleep_any();
}

TCPTransport::AnySourceSleep::~AnySourceSleep() { impl_->leave_sleep_any(); }

std::optional<std::uint64_t> TCPTransport::earliest_unexpected(Tag tag) const {
  std::lock_guard lock(impl_->mu_);
  const auto found = impl_->matcher.find_unexpected(transport::kAnySource, tag);
  if (!found) return std::nullopt;
  return impl_->matcher.arrival(*found);
}

std::shared_ptr<transport::ArrivalClock> TCPTransport::arrivals() const {
  std::lock_guard lock(impl_->mu_);
  return impl_->matcher.arrivals();
}

transport::StallReport TCPTransport::find_stalled(int peer, std::string_view doing,
                                                  std::chrono::milliseconds window) {
  return impl_->find_stalled(peer, doing, window);
}

void TCPTransport::carried_elsewhere(const std::vector<int>& peers) {
  std::lock_guard lock(impl_->mu_);
  for (const int p : peers) {
    C10D_CHECK(p >= 0 && p < world_size_ && p != rank_,
               "TCPTransport rank {}: peer {} carried elsewhere is no other rank of {}", rank_, p,
               world_size_);
    impl_->elsewhere[static_cast<std::size_t>(p)] = 1;
  }
}

bool TCPTransport::lazy() const { return impl_->lazy; }

TCPTransport::Connections TCPTransport::connections() const {
  Connections out;
  for (int peer = 0; peer < world_size_; ++peer) {
    if (peer == rank_) continue;
    const tcp_detail::Connection& c = impl_->conn(peer);
    if (c.read_fd.load(std::memory_order_acquire) >= 0) out.accepted.push_back(peer);
    std::lock_guard lock(impl_->mu_);
    if (c.write_side == tcp_detail::WriteSide::kOpen) out.made.push_back(peer);
  }
  return out;
}

void TCPTransport::abort(std::exception_ptr reason) {
  if (!reason) {
    reason = C10D_ERROR(NetworkError, "rank {} aborted its transport", rank_);
  }
  impl_->abort(std::move(reason));
}

}  // namespace c10d::inline v1::gloo_like
