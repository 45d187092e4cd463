// IciTransport::Chip (chip.h): meeting the neighbours through the store, and leaving.
#include <unistd.h>

#include <random>

#include "backends/tpu_ici/chip.h"
#include "core/check.h"
#include "core/fault_point.h"

namespace c10d::inline v1::tpu_ici {

using namespace fabric;

namespace {
constexpr std::string_view kSegmentKind = "c10d-ici";
}  // namespace

// core::fault_point marks each step where a process that dies leaves something different behind
// (tests/fault/setup_leak_test.cc kills a chip at each): ici:before_create, ici:after_create,
// ici:after_publish, ici:after_map, ici:after_all_mapped.
void IciTransport::Chip::set_up() {
  const int n = torus.size();
  const auto timeout = options.timeout;
  // A generation per (group name, rank): groups made one after another on one store meet their
  // own peers, never a stale segment name.
  const auto generation =
      store->add(fmt::format("ici/{}/generation/{}", options.group_name, rank), 1);
  prefix = fmt::format("ici/{}/{}/", options.group_name, generation);
  if (rank == 0) {
    std::random_device rd;
    store->set(prefix + "token", fmt::format("{:08x}{:08x}", rd(), rd()));
  }
  const std::string token_key = prefix + "token";
  store->wait(std::span<const std::string>(&token_key, 1), timeout);
  const std::string token = store->get_string(token_key);

  const std::size_t rings = static_cast<std::size_t>(hops());
  const auto ring_base = [&](std::byte* base, std::size_t k) {
    return base + kChipHeaderBytes + k * (kRingHeaderBytes + options.ring_bytes);
  };
  // What chips killed before they unlinked their segments left on this host goes first.
  transport::reclaim_orphan_segments(kSegmentKind);
  core::fault_point("ici:before_create");
  own = SharedSegment::create(
      transport::owned_segment_name(kSegmentKind, fmt::format("{}-{}", token, rank)),
      segment_bytes(rings, options.ring_bytes));
  core::fault_point("ici:after_create");
  header = new (own.data()) ChipHeader();
  header->magic = kSegmentMagic;
  header->version = kLayoutVersion;
  header->rank = rank;
  header->world = n;
  header->rings = static_cast<std::uint32_t>(rings);
  header->ring_bytes = static_cast<std::uint32_t>(options.ring_bytes);
  header->pid = ::getpid();
  in.resize(rings);
  out.resize(rings);
  out_header.assign(rings, nullptr);
  in_header.assign(rings, nullptr);
  for (std::size_t k = 0; k < rings; ++k) {
    const ShmRing ring = ShmRing::create(ring_base(own.data(), k), options.ring_bytes);
    if (torus.neighbour(rank, static_cast<Hop>(k ^ 1)) >= 0) in[k] = ring;
  }
  store->set(prefix + "ready/" + std::to_string(rank), own.name());
  core::fault_point("ici:after_publish");

  for (std::size_t k = 0; k < rings; ++k) {
    const int peer = torus.neighbour(rank, static_cast<Hop>(k));
    if (peer < 0) continue;
    auto it = neighbours.find(peer);
    if (it == neighbours.end()) {
      const std::string key = prefix + "ready/" + std::to_string(peer);
      store->wait(std::span<const std::string>(&key, 1), timeout);
      SharedSegment seg = SharedSegment::open(store->get_string(key));
      // The size first, so that the header read next lies within the mapping.
      if (seg.size() < segment_bytes(rings, options.ring_bytes)) {
        C10D_THROW(NetworkError,
                   "ICI rank {}: the segment {} of neighbour rank {} holds {} bytes, not the {} of "
                   "{} rings of {} bytes",
                   rank, seg.name(), peer, seg.size(), segment_bytes(rings, options.ring_bytes),
                   rings, options.ring_bytes);
      }
      const auto* h = reinterpret_cast<const ChipHeader*>(seg.data());
      if (h->magic != kSegmentMagic || h->version != kLayoutVersion || h->rank != peer ||
          h->world != n || h->rings != rings || h->ring_bytes != options.ring_bytes ||
          h->pid <= 0) {
        C10D_THROW(NetworkError,
                   "ICI rank {}: the segment {} of neighbour rank {} does not match this fabric: "
                   "magic {:#x} version {} rank {} world size {} rings {} ring bytes {} pid {} "
                   "there, magic {:#x} version {} rank {} world size {} rings {} ring bytes {} and "
                   "a pid expected",
                   rank, seg.name(), peer, h->magic, h->version, h->rank, h->world, h->rings,
                   h->ring_bytes, h->pid, kSegmentMagic, kLayoutVersion, peer, n, rings,
                   options.ring_bytes);
      }
      it = neighbours.emplace(peer, std::move(seg)).first;
      neighbour_list.push_back(reinterpret_cast<ChipHeader*>(it->second.data()));
    }
    out[k] = ShmRing::at(ring_base(it->second.data(), k), options.ring_bytes);
    out_header[k] = reinterpret_cast<ChipHeader*>(it->second.data());
  }
  for (std::size_t k = 0; k < rings; ++k) {
    const int writer = torus.neighbour(rank, static_cast<Hop>(k ^ 1));
    if (writer >= 0) in_header[k] = reinterpret_cast<ChipHeader*>(neighbours.at(writer).data());
  }
  core::fault_point("ici:after_map");
  if (store->add(prefix + "mapped", 1) == n) store->set(prefix + "all_mapped", "1");
  const std::string all = prefix + "all_mapped";
  store->wait(std::span<const std::string>(&all, 1), timeout);
  core::fault_point("ici:after_all_mapped");
  own.unlink();

  links.resize(rings);
  queues.resize(rings);
  transit_bytes.assign(rings, 0);
  matcher = decltype(matcher)(n, options.max_unexpected_bytes);
  next_seq.assign(static_cast<std::size_t>(n), 0);
  heard.assign(static_cast<std::size_t>(n), {});
  router = std::thread([this] { router_main(); });
}

void IciTransport::Chip::shut_down() {
  bool failed;
  {
    std::lock_guard lock(mu);
    failed = aborted != nullptr;
    if (!failed) header->state.store(kLeaving, std::memory_order_release);
  }
  if (!failed) {
    // Keep forwarding for the others until every chip is leaving.
    try {
      const auto deadline = Clock::now() + std::chrono::seconds(10);
      const std::string key = prefix + "leaving";
      std::int64_t left = store->add(key, 1);
      while (left < torus.size() && Clock::now() < deadline) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        left = store->add(key, 0);
      }
    } catch (const std::exception&) {
      // The store is gone: the others are too.
    }
  }
  stop.store(true, std::memory_order_release);
  ring_doorbell(header);
  router.join();
  std::lock_guard lock(mu);
  abort_locked(error<Error>(fmt::format("ICI rank {}: the transport was closed", rank)), rank,
               /*notify=*/false);
}

}  // namespace c10d::inline v1::tpu_ici
