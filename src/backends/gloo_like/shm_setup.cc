// ShmTransport's set-up (shm_transport.h draws it): this host's identity (shm_host_key), the
// ring size, and the constructor, in which the ranks find their same-host peers through the
// store, each creates its segment of incoming rings, maps every same-host peer's (checking what
// it reads there) and unlinks its own name once all have mapped it.
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "backends/gloo_like/host_map.h"
#include "backends/gloo_like/shm_transport_impl.h"
#include "c10d/errors.h"
#include "core/check.h"
#include "core/fault_point.h"
#include "core/host.h"
#include "core/parse.h"
#include "core/spin_wait.h"

namespace c10d::inline v1::gloo_like {

namespace {

using namespace shm_detail;

constexpr std::size_t kDefaultRingBytes = std::size_t{1} << 20;
constexpr std::size_t kMinRingBytes = std::size_t{64} << 10;
constexpr std::size_t kMaxRingBytes = std::size_t{1} << 30;
// The segment names' kind (shared_memory.h: "/c10d-shm-<owner>-<nonce>").
constexpr std::string_view kSegmentKind = "c10d-shm";

std::size_t ring_bytes_from(std::size_t requested) {
  if (requested == 0) {
    const std::size_t bytes = core::env_uint("C10D_SHM_RING_BYTES", kMinRingBytes, kMaxRingBytes)
                                  .value_or(kDefaultRingBytes);
    C10D_CHECK(std::has_single_bit(bytes),
               "C10D_SHM_RING_BYTES={}: the shared-memory ring size must be a power of two in "
               "[{}, {}]",
               bytes, kMinRingBytes, kMaxRingBytes);
    return bytes;
  }
  C10D_CHECK(
      requested >= kMinRingBytes && requested <= kMaxRingBytes && std::has_single_bit(requested),
      "ShmTransportOptions::ring_bytes {}: the shared-memory ring size must be a power of "
      "two in [{}, {}]",
      requested, kMinRingBytes, kMaxRingBytes);
  return requested;
}

// Bytes of a segment of `rings` rings of `ring_bytes`, or InvalidArgument should that not fit.
std::size_t segment_bytes(std::size_t rings, std::size_t ring_bytes) {
  const auto bytes = core::checked_mul_add(rings, kRingHeaderBytes + ring_bytes,
                                           kSegmentHeaderBytes + kSlots * kSlotStride);
  C10D_CHECK(bytes.has_value(),
             "a shared-memory segment of {} rings of {} bytes does not fit in {} bytes", rings,
             ring_bytes, std::numeric_limits<std::size_t>::max());
  return *bytes;
}

std::string read_first_line(const char* path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

const std::string& boot_id() {
  static const std::string id = read_first_line("/proc/sys/kernel/random/boot_id");
  return id;
}

std::string_view boot_id_of_host_key(std::string_view key) {
  const auto first = key.find('|');
  if (first == std::string_view::npos) return {};
  const auto second = key.find('|', first + 1);
  if (second == std::string_view::npos) return {};
  return key.substr(first + 1, second - first - 1);
}

std::string shm_host_key() {
  if (const char* v = std::getenv("C10D_SHM_HOST"); v != nullptr && *v != '\0') return v;
  char host[256] = {};
  ::gethostname(host, sizeof(host) - 1);
  struct stat st {};
  if (::stat("/dev/shm", &st) != 0) return "";  // no POSIX shared memory here
  return fmt::format("{}|{}|{}:{}", host, boot_id(), st.st_dev, st.st_ino);
}

bool shm_enabled_from_env() { return core::env_flag("C10D_SHM").value_or(true); }

// ---- Set-up ----

// Set-up. Every wait goes through `watch`: a rank that fails its set-up fails the others' too.
// core::fault_point marks each step where a process that dies leaves something different
// behind (tests/fault/setup_leak_test.cc kills a rank at each):
//   shm:before_create, shm:after_create, shm:after_publish, shm:after_map,
//   shm:after_all_mapped; and shm:cma_probe, where ":fail" makes the single-copy probe of a
//   peer fail (shm_cma.cc).
void ShmTransport::Impl::setup(Store& store, backends::SetupWatch& watch,
                               const ShmTransportOptions& options) {
  const auto deadline = Clock::now() + options.timeout;  // timeout checked: no overflow
  // Per set-up (its attempt number): keys an earlier group of this name left on this store
  // (a segment name long unlinked) are never read.
  const std::string prefix = fmt::format("{}/shm/{}/", options.group_name, watch.attempt());
  const auto key = [&](std::string_view what, int r) {
    return fmt::format("{}{}/{}", prefix, what, r);
  };
  const std::string mine = options.host_key.empty() ? shm_host_key() : options.host_key;
  host_of_rank = exchange_host_map(store, watch, prefix, rank, world, mine, deadline);
  std::vector<int> local;  // same-host ranks, this one included, ascending
  for (int r = 0; r < world; ++r) {
    if (host_of_rank[static_cast<std::size_t>(r)] == host_of_rank[static_cast<std::size_t>(rank)]) {
      local.push_back(r);
    }
  }
  peer_index.assign(static_cast<std::size_t>(world), -1);
  matcher = decltype(matcher)(world, max_unexpected, options.arrivals);
  if (local.size() <= 1) return;

  const auto rings = static_cast<std::uint32_t>(local.size() - 1);
  const std::size_t bytes = segment_bytes(rings, ring_bytes);
  // Ring index of `from` in the segment of `to`: its place among `to`'s same-host peers.
  const auto ring_of = [&](int from, int to) {
    const auto at = std::find(local.begin(), local.end(), from) - local.begin();
    return static_cast<std::size_t>(at - (from > to ? 1 : 0));
  };
  const auto ring_at = [&](std::byte* base, std::size_t i) {
    return ShmRing::at(base + ring_offset(i, ring_bytes), ring_bytes);
  };

  // The segments that ranks killed before they unlinked theirs left here (earlier jobs, or
  // this host's other jobs), before this one takes room in /dev/shm.
  transport::reclaim_orphan_segments(kSegmentKind);
  core::fault_point("shm:before_create");
  std::random_device rd;
  const std::uint64_t nonce = (std::uint64_t{rd()} << 32) ^ rd();
  own = transport::SharedSegment::create(
      transport::owned_segment_name(kSegmentKind, fmt::format("{:016x}", nonce)), bytes);
  core::fault_point("shm:after_create");
  auto* h = new (own.data()) SegmentHeader{};
  h->magic = kSegmentMagic;
  h->version = kVersion;
  h->rank = rank;
  h->rings = rings;
  h->ring_bytes = ring_bytes;
  h->pid = ::getpid();
  own_header = h;  // the log lines of setup_single_copy name this rank
  setup_single_copy(options, *h);
  for (std::size_t i = 0; i < rings; ++i) {
    ShmRing::create(own.data() + ring_offset(i, ring_bytes), ring_bytes);
  }
  for (std::size_t i = 0; i < kSlots; ++i) {
    new (own.data() + slot_offset(i, rings, ring_bytes)) SlotHeader{};
  }
  if (local.size() == static_cast<std::size_t>(world)) {
    slots = std::make_unique<Slots>(*this);
    slots->own = own.data() + slot_offset(0, rings, ring_bytes);
  }
  store.set(key("segment", rank), own.name());
  core::fault_point("shm:after_publish");

  for (int q : local) {
    if (q == rank) continue;
    const Bytes name = watch.get(key("segment", q), deadline);
    Peer& p = peers.emplace_back();
    p.rank = q;
    p.segment = transport::SharedSegment::open(std::string(name.begin(), name.end()));
    // Every field read from the peer's segment is checked before it is used: its size first,
    // so that the header itself lies within the mapping.
    if (p.segment.size() < bytes) {
      C10D_THROW(InvalidArgument,
                 "rank {}: the shared memory {} of same-host rank {} holds {} bytes, not the {} "
                 "of {} rings of {} bytes (different c10d builds, or C10D_SHM_RING_BYTES "
                 "differs between ranks?)",
                 rank, p.segment.name(), q, p.segment.size(), bytes, rings, ring_bytes);
    }
    p.header = reinterpret_cast<SegmentHeader*>(p.segment.data());
    const SegmentHeader& ph = *p.header;
    if (ph.magic != kSegmentMagic || ph.version != kVersion || ph.rank != q || ph.rings != rings ||
        ph.ring_bytes != ring_bytes || ph.pid <= 0) {
      C10D_THROW(InvalidArgument,
                 "rank {}: the shared memory of same-host rank {} does not match this rank's: "
                 "magic {:#x} version {} rank {} rings {} ring bytes {} pid {} there, magic "
                 "{:#x} version {} rank {} rings {} ring bytes {} and a pid expected "
                 "(different c10d builds, or C10D_SHM_RING_BYTES differs between ranks?)",
                 rank, q, ph.magic, ph.version, ph.rank, ph.rings, ph.ring_bytes, ph.pid,
                 kSegmentMagic, kVersion, q, rings, ring_bytes);
    }
    p.pid = ph.pid;
    p.pidfd = core::Fd(static_cast<int>(::syscall(SYS_pidfd_open, p.pid, 0)));
    p.out = ring_at(p.segment.data(), ring_of(rank, q));
    p.in = ring_at(own.data(), ring_of(q, rank));
    p.slots = p.segment.data() + slot_offset(0, rings, ring_bytes);
    peer_index[static_cast<std::size_t>(q)] = static_cast<int>(peers.size() - 1);
    probe_single_copy(p);
  }
  if (slots) {
    slots->slots_of.assign(static_cast<std::size_t>(world), nullptr);
    for (Peer& p : peers) {
      slots->peers.push_back(&p);
      slots->slots_of[static_cast<std::size_t>(p.rank)] = p.slots;
    }
  }
  core::fault_point("shm:after_map");
  // Which peers this rank copies single-copy messages out of, before it says it mapped them.
  store.set(key("cma", rank), single_copy_sources());
  store.set(key("mapped", rank), "1");
  std::vector<std::string> mapped;
  std::vector<std::string> cma;
  for (int q : local) {
    if (q == rank) continue;
    mapped.push_back(key("mapped", q));
    cma.push_back(key("cma", q));
  }
  watch.wait(mapped, deadline);
  const std::vector<Bytes> sources = store.multi_get(cma);
  for (std::size_t i = 0; i < peers.size(); ++i) {
    learn_single_copy(peers[i], std::string_view(reinterpret_cast<const char*>(sources[i].data()),
                                                 sources[i].size()));
  }
  core::fault_point("shm:after_all_mapped");
  own.unlink();  // every same-host peer holds its mapping now
}

ShmTransport::ShmTransport(std::shared_ptr<Store> store, int rank, int world_size,
                           ShmTransportOptions options)
    : rank_(rank), world_size_(world_size), impl_(std::make_shared<Impl>()) {
  C10D_CHECK(store != nullptr, "ShmTransport rank {}: needs a store", rank);
  C10D_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
             "ShmTransport: rank {} is outside a world of size {}", rank, world_size);
  core::check_timeout(options.timeout, fmt::format("ShmTransport rank {}", rank));
  impl_->rank = rank;
  impl_->who = fmt::format("rank {} (shared memory)", rank);
  impl_->world = world_size;
  auto watch = options.setup_watch;
  if (!watch) watch = std::make_shared<backends::SetupWatch>(store, options.group_name, rank);
  try {
    impl_->ring_bytes = ring_bytes_from(options.ring_bytes);
    impl_->max_unexpected = transport::max_unexpected_bytes(options.max_unexpected_bytes);
    // A malformed C10D_SPIN_US or LOCAL_WORLD_SIZE fails here, not in a wait.
    core::spin_window();
    core::has_own_core();
    impl_->setup(*store, *watch, options);
  } catch (...) {
    watch->fail(std::current_exception());
  }
}

}  // namespace c10d::inline v1::gloo_like
