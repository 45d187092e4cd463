// The TCP backend's host map (host_map.h) and what rides on it, every rank a thread: host keys
// make the map (C10D_SHM_HOST is this process's key); over the routed transport with ranks on two
// pretend hosts (host keys), shared memory joins exactly the ranks of one host and the map says
// so; the hierarchical all_reduce over it, which uses both channels, gives the closed forms; the
// ranks of one kernel count as sharing its cores whatever hosts they are on; and a group without
// shared memory still learns its hosts.
#include "backends/gloo_like/host_map.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "../algorithms/ranks.h"
#include "algorithms/hierarchical.h"
#include "backends/common/transport_process_group.h"
#include "backends/gloo_like/routed_transport.h"
#include "backends/gloo_like/shm_transport.h"
#include "backends/gloo_like/tcp_transport.h"
#include "c10d/init.h"
#include "c10d/store.h"
#include "core/host.h"

namespace c10d::inline v1::gloo_like {
namespace {

using namespace std::chrono_literals;

std::atomic<int> group_counter{0};

TEST(HostMapTest, EqualKeysAreOneHostAndAnEmptyKeyIsAHostOfItsOwn) {
  EXPECT_EQ(host_map_of_keys({"a", "a", "b", "b"}), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(host_map_of_keys({"b", "a", "b", "a"}), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(host_map_of_keys({"", "", "x", "x", ""}), (std::vector<int>{0, 1, 2, 2, 3}));
  EXPECT_EQ(host_map_of_keys({}), (std::vector<int>{}));
}

TEST(HostMapTest, TheShmHostVariableIsThisProcesssKey) {
  ::setenv("C10D_SHM_HOST", "pretend-host-7", 1);
  EXPECT_EQ(shm_host_key(), "pretend-host-7");
  ::unsetenv("C10D_SHM_HOST");
  EXPECT_NE(shm_host_key(), "pretend-host-7");
}

TEST(HostMapTest, RanksOnOneKernelAreCountedByTheBootIdInTheirKeys) {
  const std::vector<std::string> keys{
      "h0|boot-a|1:2", "h1|boot-a|3:4", "h2|boot-b|1:2", "boot-a", "", "x|boot-a"};
  EXPECT_EQ(ranks_on_machine(keys, "boot-a"), 2);  // other shapes name no kernel
  EXPECT_EQ(ranks_on_machine(keys, "boot-b"), 1);
  EXPECT_EQ(ranks_on_machine(keys, "boot"), 0);
  EXPECT_EQ(ranks_on_machine(keys, ""), 0);
  EXPECT_EQ(ranks_on_machine({}, "boot-a"), 0);
  // The key this process makes carries this kernel's boot id where the count looks for it.
  ::unsetenv("C10D_SHM_HOST");
  ASSERT_FALSE(boot_id().empty());
  EXPECT_EQ(boot_id_of_host_key(shm_host_key()), boot_id());
  EXPECT_EQ(ranks_on_machine({shm_host_key(), shm_host_key()}, boot_id()), 2);
}

// The TCP backend's transport over `keys` (one host key per rank), each rank's shared-memory
// channel kept in `shms`.
void run_routed(const std::vector<std::string>& keys,
                std::vector<std::shared_ptr<ShmTransport>>& shms,
                const std::function<void(int, transport::Transport&)>& fn) {
  const int n = static_cast<int>(keys.size());
  auto store = std::make_shared<HashStore>(20s);
  const std::string group = "hosts" + std::to_string(group_counter++);
  shms.assign(keys.size(), nullptr);
  algorithms::testing::run_ranks(
      n,
      [&](int r) -> std::unique_ptr<transport::Transport> {
        auto arrivals = std::make_shared<transport::ArrivalClock>();
        auto shm = std::make_shared<ShmTransport>(
            store, r, n,
            ShmTransportOptions{.group_name = group,
                                .timeout = 20s,
                                .host_key = keys[static_cast<std::size_t>(r)],
                                .arrivals = arrivals});
        TCPTransportOptions options{"127.0.0.1", 20s};
        options.arrivals = arrivals;
        options.host_of_rank = shm->host_of_rank();
        auto tcp = std::make_shared<TCPTransport>(store, r, n, group, options);
        shms[static_cast<std::size_t>(r)] = shm;
        return std::make_unique<RoutedTransport>(std::move(shm), std::move(tcp));
      },
      fn);
}

TEST(HostMapTest, SharedMemoryJoinsExactlyTheRanksOfOneHost) {
  // Two pretend hosts of two ranks, the ranks of a host together and apart.
  for (const std::vector<std::string>& keys : {std::vector<std::string>{"A", "A", "B", "B"},
                                               std::vector<std::string>{"A", "B", "A", "B"}}) {
    const std::vector<int> want = host_map_of_keys(keys);
    std::vector<std::shared_ptr<ShmTransport>> shms;
    std::vector<std::vector<float>> out(keys.size());
    const std::int64_t count = 100'003;
    run_routed(keys, shms, [&](int r, transport::Transport& t) {
      EXPECT_EQ(t.host_of_rank(), want) << "rank " << r;
      // Both channels carry the hierarchical all_reduce: the local phases shared memory, the
      // cross-host ring TCP.
      std::vector<float> data(count);
      for (std::int64_t i = 0; i < count; ++i) {
        data[i] = static_cast<float>(algorithms::testing::value(r, i));
      }
      algorithms::hier_all_reduce(algorithms::testing::context(t),
                                  algorithms::HostLayout(t.host_of_rank()), DType::kFloat32, {},
                                  data.data(), count);
      out[static_cast<std::size_t>(r)] = std::move(data);
    });
    for (int r = 0; r < 4; ++r) {
      const auto& shm = *shms[static_cast<std::size_t>(r)];
      EXPECT_EQ(shm.host_of_rank(), want);
      EXPECT_EQ(shm.same_host_peers(), 1) << "rank " << r;
      for (int q = 0; q < 4; ++q) {
        EXPECT_EQ(shm.serves(q), q != r && want[q] == want[r]) << "rank " << r << " peer " << q;
      }
      for (std::int64_t i = 0; i < count; ++i) {
        ASSERT_EQ(out[r][i],
                  static_cast<float>(algorithms::testing::expected(ReduceOp::kSum, 4, i)))
            << "rank " << r << " i " << i;
      }
    }
  }
}

TEST(HostMapTest, PretendHostsOnThisKernelCountAllTheirRanksAsSharingItsCores) {
  // Four ranks on two hosts of one kernel, as network namespaces make them: each host has two,
  // the machine's cores serve four (core/host.h).
  ASSERT_FALSE(boot_id().empty());
  std::vector<std::string> keys;
  for (int r = 0; r < 4; ++r) keys.push_back(fmt::format("ns{}|{}|{}:1", r / 2, boot_id(), r / 2));
  std::vector<std::shared_ptr<ShmTransport>> shms;
  run_routed(keys, shms, [&](int r, transport::Transport& t) {
    EXPECT_EQ(t.host_of_rank(), (std::vector<int>{0, 0, 1, 1})) << "rank " << r;
  });
  EXPECT_GE(core::machine_processes_noted().load(), 4);
}

TEST(HostMapTest, AGroupWithoutSharedMemoryStillLearnsItsHosts) {
  // Threads of one process share its host key: one host, whichever way the bytes go.
  for (bool shared_memory : {false, true}) {
    auto store = std::make_shared<HashStore>(20s);
    ProcessGroupTCPOptions options;
    options.timeout = 20s;
    options.group_name = "hosts" + std::to_string(group_counter++);
    options.shared_memory = shared_memory;
    test::run_rank_threads(3, [&](int r) {
      const auto pg = make_process_group_tcp(store, r, 3, options);
      EXPECT_EQ(backends::transport_of(*pg)->host_of_rank(), (std::vector<int>{0, 0, 0}))
          << "shared memory " << shared_memory;
    });
  }
}

}  // namespace
}  // namespace c10d::inline v1::gloo_like
