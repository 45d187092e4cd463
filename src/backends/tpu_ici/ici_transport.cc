// IciTransport (ici_transport.h): the Transport API and its requests over the chip's state
// (chip.h).
#include "backends/tpu_ici/ici_transport.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include "backends/tpu_ici/chip.h"
#include "core/check.h"
#include "core/parse.h"
#include "core/spin_wait.h"

namespace c10d::inline v1::tpu_ici {

using namespace fabric;

namespace {

class IciRequest final : public transport::Request {
 public:
  IciRequest(std::shared_ptr<IciTransport::Chip> chip, std::shared_ptr<Op> op)
      : chip_(std::move(chip)), op_(std::move(op)) {}
  ~IciRequest() override {
    std::lock_guard lock(chip_->mu);
    if (op_->done.load(std::memory_order_relaxed)) return;
    if (op_->is_send) {
      op_->cancelled = true;  // the router drops it, or pads what is left with zeros
      return;
    }
    if (op_->bound != nullptr) {
      op_->bound->recv = nullptr;
      op_->bound->discard = true;
      return;
    }
    chip_->matcher.cancel(op_->peer, op_);
  }

  bool test() override {
    if (!op_->done.load(std::memory_order_acquire)) return false;
    finish();
    return true;
  }
  int source() const override { return op_->source.load(std::memory_order_acquire); }
  transport::PeerActivity heard() const override {
    if (op_->any_source()) return {};
    std::lock_guard lock(chip_->mu);
    return heard_locked(Clock::now());
  }

  void wait(Clock::time_point deadline) override {
    if (!core::spin_until([&] { return op_->done.load(std::memory_order_acquire); }, deadline)) {
      std::unique_lock lock(chip_->mu);
      if (!chip_->cv.wait_until(lock, deadline, [&] { return op_->done.load(); })) {
        const auto now = Clock::now();
        const auto ms =
            std::chrono::duration_cast<std::chrono::milliseconds>(now - op_->posted).count();
        if (op_->any_source()) {
          throw transport::any_source_timeout(op_->describe(), op_->tag, op_->posted,
                                              " on the ICI fabric");
        }
        // What this chip last got from the peer: the group names the rank it waited for, and
        // the rank the waits lead to, from it (transport.h: PeerTimeout).
        const transport::PeerActivity heard = heard_locked(now);
        throw transport::PeerTimeout(
            core::with_location(__FILE__, __LINE__,
                                fmt::format("{} timed out on the ICI fabric: not done {} ms after "
                                            "posting; {}",
                                            op_->describe(), ms, transport::heard_string(heard))),
            op_->peer, heard);
      }
    }
    finish();
  }

 private:
  // Under chip_->mu: what the chip last got from the peer, as of `now`.
  transport::PeerActivity heard_locked(Clock::time_point now) const {
    const auto& [at, tag] = chip_->heard[static_cast<std::size_t>(op_->peer)];
    if (at == Clock::time_point{}) return {};
    return {true, now - at, tag};
  }

  void finish() {
    {
      std::lock_guard lock(chip_->mu);
      double& lane = chip_->clock_locked(op_->tag);
      lane = std::max(lane, op_->vtime);
      chip_->now = std::max(chip_->now, op_->vtime);
    }
    if (op_->error) std::rethrow_exception(op_->error);
  }

  std::shared_ptr<IciTransport::Chip> chip_;
  std::shared_ptr<Op> op_;
};

}  // namespace

IciTransport::IciTransport(std::shared_ptr<Store> store, int rank, Torus torus,
                           FabricOptions options) {
  C10D_CHECK(store != nullptr, "IciTransport: needs a store");
  C10D_CHECK(rank >= 0 && rank < torus.size(), "IciTransport: rank {} outside a torus of {}", rank,
             torus.size());
  C10D_CHECK(std::has_single_bit(options.ring_bytes) &&
                 options.ring_bytes >= 4 * kMaxPayloadBytes && options.ring_bytes <= kMaxRingBytes,
             "IciTransport: FabricOptions::ring_bytes {} must be a power of two in [{}, {}]",
             options.ring_bytes, 4 * kMaxPayloadBytes, kMaxRingBytes);
  core::check_timeout(options.timeout, fmt::format("IciTransport rank {}", rank));
  options.max_unexpected_bytes = transport::max_unexpected_bytes(options.max_unexpected_bytes);
  chip_ = std::make_shared<Chip>(std::move(store), rank, std::move(torus), std::move(options));
  chip_->set_up();
}

IciTransport::~IciTransport() { chip_->shut_down(); }

int IciTransport::rank() const { return chip_->rank; }
int IciTransport::size() const { return chip_->torus.size(); }
const Torus& IciTransport::torus() const { return chip_->torus; }

double IciTransport::clock() const {
  std::lock_guard lock(chip_->mu);
  return chip_->now;
}

std::unique_ptr<transport::Request> IciTransport::isend(int peer, Tag tag,
                                                        std::span<const std::byte> data,
                                                        transport::Call call) {
  C10D_CHECK(peer >= 0 && peer < size(), "rank {} isend ({}): peer {} is outside a world of {}",
             rank(), transport::tag_string(tag), peer, size());
  Chip& c = *chip_;
  auto op = std::make_shared<Op>();
  op->is_send = true;
  op->self = c.rank;
  op->peer = peer;
  op->tag = tag;
  op->call = call;
  op->send = data;
  if (peer != c.rank) {
    op->route = c.torus.route(c.rank, peer);  // NetworkError when down links cut it off
    if (op->route.size() > kMaxRouteHops) {
      C10D_THROW(Unsupported, "ICI: the route from rank {} to rank {} has {} hops (at most {})",
                 c.rank, peer, op->route.size(), kMaxRouteHops);
    }
  }
  {
    std::lock_guard lock(c.mu);
    if (c.aborted) {
      c.complete_locked(op, c.aborted, c.now);
    } else if (peer == c.rank) {
      const double at = c.clock_locked(tag);
      PacketHeader h;
      h.src = h.dst = c.rank;
      h.tag = tag;
      h.call = call;
      h.seq = c.next_seq[static_cast<std::size_t>(peer)]++;
      h.message_bytes = h.payload_bytes = static_cast<std::uint32_t>(data.size());
      h.head = h.tail = at;
      c.deliver_locked(h, [&](std::size_t from, std::span<std::byte> to) {
        std::memcpy(to.data(), data.data() + from, to.size());
      });
      c.complete_locked(op, nullptr, at);
    } else {
      op->seq = c.next_seq[static_cast<std::size_t>(peer)]++;
      const Hop first = op->route.front();
      LinkClock& link = c.links[first];
      const double at = c.clock_locked(tag);
      op->times =
          link.cross(c.torus.link_bandwidth(), c.torus.hop_latency(), data.size(), {at, at});
      op->vtime = link.last_finish();
      c.queues[first].push_back({op, nullptr});
    }
  }
  ring_doorbell(c.header);
  return std::make_unique<IciRequest>(chip_, std::move(op));
}

std::unique_ptr<transport::Request> IciTransport::irecv(int peer, Tag tag,
                                                        std::span<std::byte> data,
                                                        transport::Call call) {
  C10D_CHECK(peer >= 0 && peer < size(), "rank {} irecv ({}): peer {} is outside a world of {}",
             rank(), transport::tag_string(tag), peer, size());
  return post_receive(peer, tag, data, call);
}

std::unique_ptr<transport::Request> IciTransport::irecv_any(Tag tag, std::span<std::byte> data) {
  return post_receive(transport::kAnySource, tag, data, transport::kUnchecked);
}

std::unique_ptr<transport::Request> IciTransport::post_receive(int peer, Tag tag,
                                                               std::span<std::byte> data,
                                                               transport::Call call) {
  Chip& c = *chip_;
  auto op = std::make_shared<Op>();
  op->self = c.rank;
  op->peer = peer;
  op->tag = tag;
  op->call = call;
  op->recv = data;
  std::lock_guard lock(c.mu);
  if (c.aborted) {
    c.complete_locked(op, c.aborted, c.now);
    return std::make_unique<IciRequest>(chip_, std::move(op));
  }
  if (const auto found = c.matcher.find_unexpected(peer, tag)) {
    c.bind_locked(c.matcher.take(*found), op);
  } else if (auto refused = c.matcher.call_refusal(c.rank, *op)) {
    c.complete_locked(op, std::move(refused), c.now);
  } else {
    c.matcher.post(peer, tag, op);
  }
  return std::make_unique<IciRequest>(chip_, std::move(op));
}

void IciTransport::abort(std::exception_ptr reason) {
  if (!reason) reason = error<NetworkError>(fmt::format("ICI rank {} aborted", rank()));
  std::lock_guard lock(chip_->mu);
  chip_->abort_locked(std::move(reason), chip_->rank);
}

std::vector<LinkStats> IciTransport::link_stats() const {
  const Chip& c = *chip_;
  std::lock_guard lock(c.mu);
  std::vector<LinkStats> out;
  for (int k = 0; k < c.hops(); ++k) {
    const int link = c.torus.link_id(c.rank, static_cast<Hop>(k));
    if (!c.torus.link_exists(link)) continue;
    const LinkClock& l = c.links[static_cast<std::size_t>(k)];
    out.push_back({link, c.torus.link_name(link), l.bytes(), l.messages(), l.busy_seconds()});
  }
  return out;
}

std::string IciTransport::link_report() const {
  const double t = clock();
  std::string s = fmt::format("# ICI rank {} links at virtual time {:.3f} us\n", rank(), t * 1e6);
  for (const auto& l : link_stats()) {
    s += fmt::format("{:<50} {:>14} B {:>8} msgs {:>12.3f} us busy {:>6.1f}%\n", l.name, l.bytes,
                     l.messages, l.busy_seconds * 1e6, t > 0 ? 100 * l.busy_seconds / t : 0.0);
  }
  return s;
}

}  // namespace c10d::inline v1::tpu_ici
