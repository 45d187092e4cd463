#include "backends/gloo_like/host_map.h"

#include <fmt/format.h>

#include <algorithm>

#include "backends/gloo_like/shm_transport.h"
#include "core/host.h"

namespace c10d::inline v1::gloo_like {

std::vector<int> host_map_of_keys(const std::vector<std::string>& keys) {
  std::vector<int> ids;  // the index of each key's first rank; an empty key's own
  ids.reserve(keys.size());
  for (std::size_t r = 0; r < keys.size(); ++r) {
    const auto first = keys[r].empty() ? keys.begin() + static_cast<std::ptrdiff_t>(r)
                                       : std::find(keys.begin(), keys.end(), keys[r]);
    ids.push_back(static_cast<int>(first - keys.begin()));
  }
  return transport::number_hosts(ids);
}

int ranks_on_machine(const std::vector<std::string>& keys, std::string_view boot_id) {
  if (boot_id.empty()) return 0;
  return static_cast<int>(std::count_if(keys.begin(), keys.end(), [&](std::string_view key) {
    return boot_id_of_host_key(key) == boot_id;
  }));
}

void publish_host_key(Store& store, const std::string& prefix, int rank, const std::string& key) {
  store.set(fmt::format("{}host/{}", prefix, rank), key);
}

std::vector<int> exchange_host_map(Store& store, backends::SetupWatch& watch,
                                   const std::string& prefix, int rank, int world,
                                   const std::string& key, transport::Clock::time_point deadline) {
  publish_host_key(store, prefix, rank, key);
  return read_host_map(store, watch, prefix, world, deadline);
}

std::vector<int> read_host_map(Store& store, backends::SetupWatch& watch, const std::string& prefix,
                               int world, transport::Clock::time_point deadline) {
  std::vector<std::string> names;
  for (int r = 0; r < world; ++r) names.push_back(fmt::format("{}host/{}", prefix, r));
  watch.wait(names, deadline);
  std::vector<std::string> keys;
  for (const Bytes& k : store.multi_get(names)) keys.emplace_back(k.begin(), k.end());
  core::note_machine_processes(ranks_on_machine(keys, boot_id()));
  return host_map_of_keys(keys);
}

}  // namespace c10d::inline v1::gloo_like
