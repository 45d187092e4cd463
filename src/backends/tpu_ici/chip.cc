// IciTransport::Chip (chip.h): completion, failure, delivery and the router thread.
#include "backends/tpu_ici/chip.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/logging.h"
#include "core/parse.h"
#include "core/spin_wait.h"

namespace c10d::inline v1::tpu_ici {

using namespace fabric;

namespace {

// What a cancelled send writes in place of the bytes it may no longer read.
constexpr std::byte kZeros[kMaxPayloadBytes] = {};

}  // namespace

void IciTransport::Chip::complete_locked(const std::shared_ptr<Op>& op, std::exception_ptr e,
                                         double vtime) {
  if (op->done.load(std::memory_order_relaxed)) return;
  op->error = std::move(e);
  op->vtime = vtime;
  op->done.store(true, std::memory_order_release);
  cv.notify_all();
}

double& IciTransport::Chip::clock_locked(Tag tag) {
  const int lane = transport::tag_lane(tag);
  if (lane < 0) return now;
  // A new stage: everything this chip waited for so far is its start.
  const Tag stage = transport::lane_stage_tag(tag);
  if (!lane_stage_seen || stage != lane_stage) {
    lane_stage = stage;
    lane_stage_seen = true;
    lane_now.fill(now);
  }
  return lane_now[static_cast<std::size_t>(lane)];
}

void IciTransport::Chip::abort_locked(std::exception_ptr reason, int origin, bool notify) {
  if (aborted) return;
  aborted = reason;
  matcher.take_all_receives(
      [&](const std::shared_ptr<Op>& op) { complete_locked(op, reason, now); });
  for (auto& [key, msg] : arriving) {
    if (msg->recv) complete_locked(msg->recv, reason, now);
    msg->recv = nullptr;
    msg->discard = true;
  }
  // Own sends leave the queues (their buffers belong to failed ops); transit packets stay.
  for (auto& q : queues) {
    std::deque<OutItem> kept;
    for (auto& item : q) {
      if (item.send) {
        complete_locked(item.send, reason, now);
      } else {
        kept.push_back(std::move(item));
      }
    }
    q.swap(kept);
  }
  if (!notify) return;
  const std::string text = what_of(reason);
  header->abort_origin = origin;
  header->reason_bytes = static_cast<std::uint32_t>(std::min(text.size(), kMaxReasonBytes));
  std::memcpy(header->reason, text.data(), header->reason_bytes);
  header->state.store(kAborted, std::memory_order_release);
  for (ChipHeader* n : neighbour_list) ring_doorbell(n);
}

void IciTransport::Chip::bind_locked(const std::shared_ptr<Incoming>& msg,
                                     const std::shared_ptr<Op>& op) {
  op->source.store(msg->src, std::memory_order_relaxed);
  // Another call or size: the message is dropped.
  if (matcher.refuse(op, rank, msg->src, msg->call, op->recv.size(), msg->bytes,
                     [&](const std::shared_ptr<Op>& r, std::exception_ptr e) {
                       complete_locked(r, std::move(e), now);
                     })) {
    msg->discard = true;
    release_locked(*msg);
    return;
  }
  msg->buffer.copy_to(op->recv.first(static_cast<std::size_t>(msg->received)));
  release_locked(*msg);
  if (msg->received == msg->bytes) {
    complete_locked(op, nullptr, msg->tail);
    return;
  }
  msg->recv = op;
  op->bound = msg.get();
}

bool IciTransport::Chip::hold_locked(int src, std::uint64_t bytes) {
  if (auto refused = matcher.hold(src, bytes, who)) {
    abort_locked(std::move(refused), rank);
    return false;
  }
  return true;
}

void IciTransport::Chip::release_locked(Incoming& msg) {
  if (!msg.buffered) return;
  matcher.release(msg.src, msg.held());
  msg.buffer.release();
  msg.buffered = false;
}

void IciTransport::Chip::deliver_locked(
    const PacketHeader& h, const std::function<void(std::size_t, std::span<std::byte>)>& copy) {
  if (aborted) return;  // nobody can receive it any more
  const MessageKey mkey{h.src, h.seq};
  std::shared_ptr<Incoming> msg;
  if (h.offset == 0) {
    if (arriving.contains(mkey)) {
      fabric_failure(
          fmt::format("rank {} sent the first packet of its message {} twice", h.src, h.seq));
      return;
    }
    // Once per message, as TCP and shared memory note a message header: a clock read per packet
    // under mu would slow every packet for a report that a message's start dates well enough.
    heard[static_cast<std::size_t>(h.src)] = {transport::Clock::now(), h.tag};
    msg = std::make_shared<Incoming>();
    msg->src = h.src;
    msg->tag = h.tag;
    msg->call = h.call;
    msg->bytes = h.message_bytes;
    msg->tail = h.tail;
    if (auto op = matcher.match(h.src, h.tag)) {
      arriving[mkey] = msg;
      bind_locked(msg, *op);
    } else {
      matcher.check_arrived_call(rank, h.src, h.tag, h.call,
                                 [&](const std::shared_ptr<Op>& r, std::exception_ptr e) {
                                   complete_locked(r, std::move(e), now);
                                 });
      if (!hold_locked(h.src, transport::kUnexpectedOverheadBytes)) return;
      arriving[mkey] = msg;
      msg->buffer = transport::UnexpectedBuffer(h.message_bytes);
      msg->buffered = true;
      matcher.push_unexpected(h.src, h.tag, msg);
    }
  } else {
    auto it = arriving.find(mkey);
    if (it == arriving.end()) return;  // its first packet met an abort
    msg = it->second;
    if (h.offset != msg->received || h.message_bytes != msg->bytes) {
      fabric_failure(fmt::format(
          "rank {} sent bytes {} to {} of its {}-byte message {} after {} bytes of a {}-byte one",
          h.src, h.offset, h.offset + h.payload_bytes, h.message_bytes, h.seq, msg->received,
          msg->bytes));
      return;
    }
  }
  if (!msg->discard && h.payload_bytes > 0) {
    if (msg->recv) {
      copy(0, msg->recv->recv.subspan(h.offset, h.payload_bytes));
    } else {
      // Into the unexpected buffer's chunks, each allocated (and counted) as it is reached.
      for (std::uint64_t done = 0; done < h.payload_bytes;) {
        const std::uint64_t at = h.offset + done;
        if (!hold_locked(h.src, msg->buffer.allocation_at(at))) return;
        const auto room = msg->buffer.span_at(at);
        const auto n =
            static_cast<std::size_t>(std::min<std::uint64_t>(room.size(), h.payload_bytes - done));
        copy(static_cast<std::size_t>(done), room.first(n));
        done += n;
      }
    }
  }
  msg->received += h.payload_bytes;
  if (msg->received == msg->bytes) {
    arriving.erase(mkey);
    if (msg->recv) {
      msg->recv->bound = nullptr;
      complete_locked(msg->recv, nullptr, msg->tail);
      msg->recv = nullptr;
    }
  }
}

void IciTransport::Chip::fabric_failure(const std::string& what) {
  abort_locked(error<NetworkError>(fmt::format("ICI rank {}: {}", rank, what)), rank);
}

bool IciTransport::Chip::drain_locked(int k) {
  ShmRing& ring = in[static_cast<std::size_t>(k)];
  if (!ring.valid()) return false;
  bool progress = false;
  PacketHeader h;
  for (int n = 0; n < 64 && peek_packet(ring, h); ++n) {
    progress = true;
    const std::string bad = check_packet(h, torus.size(), options.ring_bytes);
    if (!bad.empty() || h.route[h.hop_index] != k) {
      fabric_failure(fmt::format("corrupt packet on {}: {}",
                                 torus.link_name(torus.link_id(torus.neighbour(rank, k ^ 1), k)),
                                 bad.empty() ? "wrong link" : bad));
      ring = ShmRing();  // nothing more is read from a ring that carried garbage
      return true;
    }
    if (h.hop_index + 1 == h.hops && h.dst != rank) {
      fabric_failure(
          fmt::format("a packet for rank {} from rank {} ends its route here", h.dst, h.src));
    } else if (h.hop_index + 1 == h.hops) {
      deliver_locked(
          h, [&](std::size_t from, std::span<std::byte> to) { read_payload(ring, from, to); });
    } else {
      forward_locked(h, ring);
    }
    if (aborted) {
      ring = ShmRing();  // this chip failed (the limit, or a packet out of place): read no more
      return true;
    }
    consume_packet(ring, h);
    if (ring.take_writer_waiting()) ring_doorbell(in_header[static_cast<std::size_t>(k)]);
  }
  return progress;
}

void IciTransport::Chip::forward_locked(const PacketHeader& h, const ShmRing& ring) {
  const Hop next = h.route[h.hop_index + 1];
  if (next >= hops()) {  // before it indexes anything
    fabric_failure(fmt::format("a packet from rank {} has hop {} in its route, and a chip has {}",
                               h.src, static_cast<int>(next), hops()));
    return;
  }
  auto t = std::make_shared<Transit>();
  t->header = h;
  t->header.hop_index = h.hop_index + 1;
  const MessageKey mkey{h.src, h.seq};
  if (h.offset == 0) {
    forwarding[mkey] = links[next].cross(torus.link_bandwidth(), torus.hop_latency(),
                                         h.message_bytes, {h.head, h.tail});
  }
  const MessageTimes times = forwarding[mkey];
  if (h.offset + h.payload_bytes == h.message_bytes) forwarding.erase(mkey);
  t->header.head = times.head;
  t->header.tail = times.tail;
  if (!out[next].valid() || !torus.link_up(torus.link_id(rank, next))) {
    fabric_failure(fmt::format("a packet from rank {} to rank {} needs {}, which is missing", h.src,
                               h.dst, torus.link_name(torus.link_id(rank, next))));
    return;
  }
  // Packets wait here while the next ring is full: bounded like unexpected messages.
  const std::uint64_t bytes = packet_bytes(h);
  if (bytes > options.max_unexpected_bytes - transit_bytes[next]) {
    fabric_failure(fmt::format(
        "{} bytes of packets wait to be forwarded on {} (the last from rank {}), over the limit "
        "of {} bytes; {} raises it",
        transit_bytes[next] + bytes, torus.link_name(torus.link_id(rank, next)), h.src,
        options.max_unexpected_bytes, transport::kMaxUnexpectedBytesVariable));
    return;
  }
  transit_bytes[next] += bytes;
  t->payload.resize(h.payload_bytes);
  read_payload(ring, 0, t->payload);
  queues[next].push_back({nullptr, std::move(t)});
}

bool IciTransport::Chip::write_locked(int hop) {
  auto& q = queues[static_cast<std::size_t>(hop)];
  ShmRing& ring = out[static_cast<std::size_t>(hop)];
  bool wrote = false;
  while (!q.empty()) {
    OutItem& item = q.front();
    if (item.transit) {
      const std::size_t bytes = packet_bytes(item.transit->header);
      if (!ring.room_for(bytes)) break;
      write_packet(ring, item.transit->header, item.transit->payload);
      transit_bytes[static_cast<std::size_t>(hop)] -= bytes;
      q.pop_front();
      wrote = true;
      continue;
    }
    Op& op = *item.send;
    if (op.cancelled && op.written == 0) {
      q.pop_front();
      continue;
    }
    PacketHeader h;
    h.hops = static_cast<std::uint16_t>(op.route.size());
    std::copy(op.route.begin(), op.route.end(), h.route);
    h.src = rank;
    h.dst = op.peer;
    h.tag = op.tag;
    h.call = op.call;
    h.seq = op.seq;
    h.message_bytes = op.send.size();
    h.offset = op.written;
    h.payload_bytes =
        static_cast<std::uint32_t>(std::min(kMaxPayloadBytes, op.send.size() - op.written));
    h.head = op.times.head;
    h.tail = op.times.tail;
    if (!ring.room_for(packet_bytes(h))) break;
    const std::span<const std::byte> payload =
        op.cancelled ? std::span<const std::byte>(kZeros, h.payload_bytes)
                     : op.send.subspan(op.written, h.payload_bytes);
    write_packet(ring, h, payload);
    wrote = true;
    op.written += h.payload_bytes;
    if (op.written == op.send.size()) {
      complete_locked(item.send, nullptr, op.vtime);
      q.pop_front();
    }
  }
  if (wrote) ring_doorbell(out_header[static_cast<std::size_t>(hop)]);
  return wrote;
}

bool IciTransport::Chip::check_neighbours_locked(bool check_pids) {
  if (aborted) return false;
  for (ChipHeader* n : neighbour_list) {
    const auto state = n->state.load(std::memory_order_acquire);
    if (state == kAborted) {
      // The neighbour's segment is its own to write: its text is made printable and a rank
      // outside the slice is blamed on the neighbour itself.
      const std::string why = core::printable(
          std::string_view(n->reason, std::min<std::size_t>(n->reason_bytes, kMaxReasonBytes)));
      const int origin = n->abort_origin >= 0 && n->abort_origin < torus.size()
                             ? static_cast<int>(n->abort_origin)
                             : static_cast<int>(n->rank);
      abort_locked(
          error<NetworkError>(fmt::format("ICI rank {}: rank {} failed: {}", rank, origin, why)),
          origin);
      return true;
    }
    if (check_pids && state == kRunning && n->pid != ::getpid() && ::kill(n->pid, 0) != 0 &&
        errno == ESRCH) {
      abort_locked(error<NetworkError>(
                       fmt::format("ICI rank {}: rank {} (pid {}) died", rank, n->rank, n->pid)),
                   n->rank);
      return true;
    }
  }
  return false;
}

bool IciTransport::Chip::incoming_ready() const {
  return std::any_of(in.begin(), in.end(),
                     [](const ShmRing& r) { return r.valid() && !r.empty(); });
}

void IciTransport::Chip::router_main() {
  try {
    router_loop();
  } catch (...) {
    // Nothing in the loop should throw; if something does, the chip fails (its neighbours see
    // the notice) and the thread ends, instead of the process.
    const std::string what = what_of(std::current_exception());
    C10D_LOG_ERROR("ICI rank {}: the router thread failed: {}", rank, what);
    std::lock_guard lock(mu);
    abort_locked(
        error<NetworkError>(fmt::format("ICI rank {}: the router thread failed: {}", rank, what)),
        rank);
  }
}

void IciTransport::Chip::router_loop() {
  auto last_pid_check = Clock::now();
  while (!stop.load(std::memory_order_acquire)) {
    const std::uint32_t bell = header->doorbell.load(std::memory_order_acquire);
    bool progress = false;
    {
      std::lock_guard lock(mu);
      for (int k = 0; k < hops(); ++k) progress |= drain_locked(k);
      for (int k = 0; k < hops(); ++k) {
        if (out[static_cast<std::size_t>(k)].valid()) progress |= write_locked(k);
      }
      const bool pids = Clock::now() - last_pid_check > std::chrono::milliseconds(100);
      if (pids) last_pid_check = Clock::now();
      progress |= check_neighbours_locked(pids);
    }
    if (progress) continue;
    // Idle: poll briefly (a reply is often microseconds away), then sleep on the doorbell.
    const auto changed = [&] {
      return header->doorbell.load(std::memory_order_acquire) != bell || incoming_ready() ||
             stop.load(std::memory_order_relaxed);
    };
    if (core::spin_until(changed)) continue;
    header->sleeping.store(1, std::memory_order_seq_cst);
    if (!changed()) futex_wait(header->doorbell, bell, std::chrono::milliseconds(2));
    header->sleeping.store(0, std::memory_order_seq_cst);
  }
}

}  // namespace c10d::inline v1::tpu_ici
