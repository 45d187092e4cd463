// ShmTransport's shared slots (transport::SharedSlots; the layout is in shm_layout.h): a round
// writes this rank's bytes into its own segment's slot and waits until every peer's slot holds
// the same round. No message, no request, no allocation: an 8-byte all_reduce of 2 ranks is one
// cache line each way, where a ring message costs a header, matching and a request per side.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <mutex>

#include "backends/gloo_like/shm_transport_impl.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "core/coarse_clock.h"

namespace c10d::inline v1::gloo_like {

namespace {

using namespace shm_detail;

std::byte* slot_at(std::byte* slots, std::uint64_t round) {
  return slots + (round % kSlots) * kSlotStride;
}

SlotHeader& header_of(std::byte* slot) { return *reinterpret_cast<SlotHeader*>(slot); }

std::span<const std::byte> payload_of(std::byte* slot, std::uint64_t bytes) {
  return {slot + kSlotHeaderBytes, static_cast<std::size_t>(bytes)};
}

}  // namespace

void ShmTransport::Impl::Slots::gather(Tag tag, std::uint64_t check,
                                       std::span<const std::byte> mine,
                                       Clock::time_point deadline) {
  C10D_CHECK(mine.size() <= kSlotBytes,
             "{}: a shared-slot round of {} bytes, over the {} a slot holds", impl.who, mine.size(),
             kSlotBytes);
  // A load and a store, not an exchange (a locked instruction on every small all_reduce): this
  // guards the library's own ordering. A round that starts while another runs finds the flag
  // set; two that start at the same instant may both miss it.
  C10D_CHECK(!busy.load(std::memory_order_acquire),
             "{}: two threads ran shared-slot rounds at once (one group's ops run one at a time)",
             impl.who);
  busy.store(true, std::memory_order_relaxed);
  struct Unbusy {
    std::atomic<bool>& b;
    ~Unbusy() { b.store(false, std::memory_order_release); }
  } unbusy{busy};
  if (impl.failed.load(std::memory_order_acquire)) {
    std::lock_guard lock(impl.mu);
    std::rethrow_exception(impl.failure);
  }

  const std::uint64_t want = ++round;  // what every slot of this round says in `round`
  std::byte* slot = slot_at(own, want - 1);
  SlotHeader& h = header_of(slot);
  if (!mine.empty()) {
    std::memcpy(slot + kSlotHeaderBytes, mine.data(), mine.size());
    std::memcpy(mine_copy.data(), mine.data(), mine.size());
  }
  mine_bytes = mine.size();
  h.tag = tag;
  h.check = check;
  h.bytes = mine.size();
  h.round.store(want, std::memory_order_release);
  for (Peer* p : peers) ring_doorbell(p->header);

  std::size_t next = 0;  // the peers before it have published this round
  const auto published = [&] {
    for (; next < peers.size(); ++next) {
      const std::byte* theirs = slot_at(peers[next]->slots, want - 1);
      if (header_of(const_cast<std::byte*>(theirs)).round.load(std::memory_order_acquire) < want) {
        return false;
      }
    }
    return true;
  };
  // A peer that closed its transport (its group ended) never publishes: no use waiting.
  const auto closed = [&] {
    return peers[next]->header->closed.load(std::memory_order_acquire) != 0;
  };
  // Nor does one that posted messages of another call under this round's tag: it runs another
  // collective (or this one with other sizes) outside the slots. (The same call may: an
  // all_reduce of several tensors sends the large ones as messages.) Its call, read as
  // shm_layout.h says (SegmentHeader::posted_tag); 0 while it has not.
  std::uint64_t elsewhere = 0;
  const auto runs_elsewhere = [&] {
    const SegmentHeader& ph = *peers[next]->header;
    if (ph.posted_tag.load(std::memory_order_acquire) != tag) return false;
    const std::uint64_t call = ph.posted_call.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);  // the seqlock's read
    if (ph.posted_tag.load(std::memory_order_relaxed) != tag || call == transport::kUnchecked ||
        call == check) {
      return false;
    }
    elsewhere = call;
    return true;
  };
  const auto ready = [&] {
    return impl.failed.load(std::memory_order_acquire) || published() || closed() ||
           runs_elsewhere();
  };
  const std::function<bool()> done = std::ref(ready);  // held by reference: no allocation
  if (!published() && !impl.poll_until(done, deadline, /*move_bytes=*/false)) {
    const Peer& late = *peers[next];
    const std::uint64_t last =
        std::max(header_of(slot_at(late.slots, 0)).round.load(std::memory_order_acquire),
                 header_of(slot_at(late.slots, 1)).round.load(std::memory_order_acquire));
    const transport::PeerActivity heard = impl.heard_from(late.rank);
    throw transport::PeerTimeout(
        core::with_location(
            __FILE__, __LINE__,
            fmt::format("{}: shared-slot round {} ({}, {} bytes) timed out waiting for rank {}, "
                        "whose last round there is {}; {}",
                        impl.who, want, transport::tag_string(tag), mine.size(), late.rank,
                        last == 0 ? std::string("none") : std::to_string(last),
                        transport::heard_string(heard))),
        late.rank, heard);
  }
  if (impl.failed.load(std::memory_order_acquire)) {
    std::lock_guard lock(impl.mu);
    std::rethrow_exception(impl.failure);
  }
  // The SlotMismatch of peer `p`, which `did` what it says ("published ...").
  const auto mismatch = [&](const Peer& p, const std::string& did, Tag their_tag,
                            std::uint64_t their_check, std::uint64_t their_bytes) {
    return transport::SlotMismatch(
        core::with_location(__FILE__, __LINE__,
                            fmt::format("{}: shared-slot round {}: this rank published {} (check "
                                        "{:#x}, {} bytes), rank {} {}",
                                        impl.who, want, transport::tag_string(tag), check,
                                        mine.size(), p.rank, did)),
        p.rank, their_tag, their_check, their_bytes);
  };
  if (next < peers.size() && elsewhere != 0) {
    throw mismatch(*peers[next], fmt::format("runs that op as messages (check {:#x})", elsewhere),
                   tag, elsewhere, 0);
  }
  if (next < peers.size()) {
    C10D_THROW(NetworkError,
               "{}: rank {} closed its shared memory (its group was destroyed) before it "
               "published shared-slot round {} ({})",
               impl.who, peers[next]->rank, want, transport::tag_string(tag));
  }
  for (const Peer* p : peers) {
    const SlotHeader& ph = header_of(slot_at(p->slots, want - 1));
    // A peer cannot be a round ahead in this slot: it rewrites it only after this rank's next.
    if (const std::uint64_t r = ph.round.load(std::memory_order_acquire); r != want) {
      C10D_THROW(NetworkError,
                 "{}: rank {}'s shared slot says round {} where this rank is at round {}: its "
                 "memory was written by something other than its transport",
                 impl.who, p->rank, r, want);
    }
    if (ph.tag != tag || ph.check != check || ph.bytes != mine.size()) {
      throw mismatch(*p,
                     fmt::format("published {} (check {:#x}, {} bytes)",
                                 transport::tag_string(ph.tag), ph.check, ph.bytes),
                     ph.tag, ph.check, ph.bytes);
    }
  }
  heard_tag.store(tag, std::memory_order_relaxed);
  heard_at.store(core::coarse_now().time_since_epoch().count(), std::memory_order_release);
}

std::span<const std::byte> ShmTransport::Impl::Slots::part(int r) const {
  C10D_CHECK(round > 0, "{}: part() of a shared slot before any round", impl.who);
  const auto bytes = static_cast<std::size_t>(mine_bytes);
  if (r == impl.rank) return {mine_copy.data(), bytes};
  C10D_CHECK(r >= 0 && r < impl.world, "{}: part() of rank {}, outside the group of {}", impl.who,
             r, impl.world);
  // Of this rank's size, which gather found there too (a peer's header is not read again).
  return payload_of(slot_at(slots_of[static_cast<std::size_t>(r)], round - 1), bytes);
}

}  // namespace c10d::inline v1::gloo_like
