// FakeShmPeer: a same-host peer made of raw shared memory for the shared-memory hostile tests
// (shm_hostile_test.cc, shm_cma_hostile_test.cc): it takes part in a real rank's set-up with a
// segment of its own (shm_layout.h) and then writes raw messages into the real rank's ring.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <memory>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "backends/gloo_like/shm_layout.h"
#include "backends/gloo_like/shm_transport.h"
#include "c10d/errors.h"
#include "c10d/store.h"
#include "transport/shared_memory.h"
#include "transport_test_util.h"

namespace c10d::inline v1::gloo_like::shm_fake {

using namespace std::chrono_literals;
using c10d::testing::pattern;
using c10d::testing::soon;
using transport::Clock;

constexpr std::size_t kRing = std::size_t{64} << 10;
constexpr transport::Tag kProbeTag = transport::make_tag(1, 7);
constexpr transport::Tag kOtherTag = transport::make_tag(1, 100);

inline std::atomic<int> group_counter{0};

// Rank 1 of a two-rank group on this host, made of raw shared memory: it publishes its host
// key and a segment of the layout ShmTransport checks, maps rank 0's, and then writes messages
// into the ring rank 0 reads from it (ring 0: rank 1 is rank 0's only same-host peer). With
// `single_copy` its segment offers rank 0 a word to probe (it is this process, which rank 0 can
// read), so rank 0 takes single-copy descriptors from it; it never reads rank 0's.
class FakeShmPeer {
 public:
  FakeShmPeer(Store& store, const std::string& group, std::size_t ring_bytes,
              bool single_copy = false)
      : ring_bytes_(ring_bytes) {
    using namespace shm;
    // Numbered as a real rank numbers its set-up (backends/common/setup_watch.h).
    const std::int64_t attempt = store.add(group + "/setup/attempt/1", 1);
    const std::string prefix = group + "/shm/" + std::to_string(attempt) + "/";
    store.set(prefix + "host/1", shm_host_key());
    own_ = transport::SharedSegment::create(
        "/c10d-fake-shm-" + std::to_string(::getpid()) + "-" + group,
        slot_offset(kSlots, 1, ring_bytes));
    auto* h = new (own_.data()) SegmentHeader{};
    h->magic = kSegmentMagic;
    h->version = kVersion;
    h->rank = 1;
    h->rings = 1;
    h->ring_bytes = ring_bytes;
    h->pid = ::getpid();
    if (single_copy) {
      h->cma_probe_address = reinterpret_cast<std::uintptr_t>(&probe_word_);
      h->cma_probe_value = probe_word_;
    }
    new (own_.data() + ring_offset(0, ring_bytes)) RingHeader{};
    for (std::size_t i = 0; i < kSlots; ++i) {
      new (own_.data() + slot_offset(i, 1, ring_bytes)) SlotHeader{};
    }
    store.set(prefix + "segment/1", own_.name());
    const std::string theirs = prefix + "segment/0";
    store.wait(std::span<const std::string>(&theirs, 1), 20000ms);
    real_ = transport::SharedSegment::open(store.get_string(theirs));
    real_header_ = reinterpret_cast<SegmentHeader*>(real_.data());
    ring_ = reinterpret_cast<RingHeader*>(real_.data() + ring_offset(0, ring_bytes));
    data_ = real_.data() + ring_offset(0, ring_bytes) + kRingHeaderBytes;
    store.set(prefix + "cma/1", "00");  // reads no single-copy message of rank 0
    store.set(prefix + "mapped/1", "1");
    const std::string mapped = prefix + "mapped/0";
    store.wait(std::span<const std::string>(&mapped, 1), 20000ms);
    own_.unlink();
  }

  // Writes `bytes` into the ring as room appears, calling `progress` (which makes rank 0 read)
  // while it is full; false at the deadline or once `progress` says to stop.
  bool write(std::span<const std::byte> bytes, const std::function<bool()>& progress,
             Clock::time_point deadline) {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const std::uint64_t head = ring_->head.load(std::memory_order_acquire);
      const std::uint64_t room = ring_bytes_ - (tail_ - head);
      const std::size_t n = std::min<std::size_t>(room, bytes.size() - done);
      for (std::size_t i = 0; i < n; ++i) data_[(tail_ + i) & (ring_bytes_ - 1)] = bytes[done + i];
      tail_ += n;
      done += n;
      ring_->tail.store(tail_, std::memory_order_release);
      real_header_->doorbell.fetch_add(1, std::memory_order_seq_cst);
      transport::futex_wake(real_header_->doorbell);
      if (done < bytes.size() && (!progress() || Clock::now() > deadline)) return false;
    }
    return true;
  }

  // A message header as ShmTransport writes one (the next sequence number unless given), and
  // `payload` padded to 64 bytes; `claimed` is what the header says the payload has.
  std::vector<std::byte> message(transport::Tag tag, std::span<const std::byte> payload,
                                 std::uint64_t claimed) {
    shm::MessageHeader h;
    h.tag = tag;
    h.bytes = claimed;
    h.sequence = sequence_++;
    std::vector<std::byte> out(sizeof h + shm::padded(payload.size()));
    std::memcpy(out.data(), &h, sizeof h);
    if (!payload.empty()) std::memcpy(out.data() + sizeof h, payload.data(), payload.size());
    return out;
  }
  std::vector<std::byte> message(transport::Tag tag, std::span<const std::byte> payload) {
    return message(tag, payload, payload.size());
  }
  void skip_sequence() { ++sequence_; }

  // A single-copy descriptor (shm_layout.h): `bytes` at `address` in process `pid`.
  std::vector<std::byte> single_copy(transport::Tag tag, std::uint64_t address, std::uint64_t bytes,
                                     std::int32_t pid = ::getpid()) {
    shm::MessageHeader h;
    h.tag = tag;
    h.bytes = bytes;
    h.sequence = sequence_++;
    h.kind = shm::kSingleCopy;
    h.pid = pid;
    h.address = address;
    std::vector<std::byte> out(sizeof h);
    std::memcpy(out.data(), &h, sizeof h);
    return out;
  }
  // An acknowledgement of rank 0's single-copy message `acked`.
  std::vector<std::byte> ack(std::uint64_t acked) {
    shm::MessageHeader h;
    h.sequence = sequence_++;
    h.kind = shm::kAck;
    h.acked = acked;
    std::vector<std::byte> out(sizeof h);
    std::memcpy(out.data(), &h, sizeof h);
    return out;
  }

 private:
  std::size_t ring_bytes_;
  transport::SharedSegment own_;
  transport::SharedSegment real_;
  shm::SegmentHeader* real_header_ = nullptr;
  shm::RingHeader* ring_ = nullptr;
  std::byte* data_ = nullptr;
  std::uint64_t tail_ = 0;
  std::uint64_t sequence_ = 0;
  std::uint64_t probe_word_ = 0x5eed5eed5eed5eedULL;
};

struct Met {
  std::shared_ptr<HashStore> store;
  std::unique_ptr<ShmTransport> rank0;
  std::unique_ptr<FakeShmPeer> fake;
};

inline Met meet_fake_peer(std::uint64_t max_unexpected_bytes = 0, bool single_copy = false) {
  Met m;
  m.store = std::make_shared<HashStore>(std::chrono::milliseconds(20000));
  const std::string group = "shmhostile" + std::to_string(group_counter++);
  std::exception_ptr error;
  std::thread real([&] {
    try {
      m.rank0 = std::make_unique<ShmTransport>(
          m.store, 0, 2,
          ShmTransportOptions{.group_name = group,
                              .timeout = 20s,
                              .ring_bytes = kRing,
                              .max_unexpected_bytes = max_unexpected_bytes});
    } catch (...) {
      error = std::current_exception();
    }
  });
  try {
    m.fake = std::make_unique<FakeShmPeer>(*m.store, group, kRing, single_copy);
  } catch (...) {
    real.join();
    throw;
  }
  real.join();
  if (error) std::rethrow_exception(error);
  EXPECT_EQ(m.rank0->same_host_peers(), 1);
  return m;
}

// Progress for the fake's writes: rank 0 reads while `req` is pending; false once it is done.
inline std::function<bool()> progress_of(transport::Request& req) {
  return [&req] {
    try {
      return !req.test();
    } catch (const std::exception&) {
      return false;  // failed: rank 0 reads no more
    }
  };
}

using testing::error_of;
using testing::network_error;

}  // namespace c10d::inline v1::gloo_like::shm_fake
