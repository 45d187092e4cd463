// The TCP backend's host map (transport.h: Hosts): which ranks of a group share a host, learned
// through the store from each rank's host key (shm_host_key(): C10D_SHM_HOST, else the host
// name, boot id and /dev/shm's device and inode). The shared-memory set-up exchanges the keys to
// find its same-host peers (shm_transport.h), so the ranks it joins through shared memory are
// exactly the ranks of one host; with shared memory off the TCP transport's set-up publishes
// them beside its address (TCPTransportOptions::host_key).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "backends/common/setup_watch.h"
#include "c10d/store.h"
#include "transport/transport.h"

namespace c10d::inline v1::gloo_like {

// The host map of `keys` (one per rank): equal keys are one host, and a rank whose key is empty
// (no POSIX shared memory there) is a host of its own; hosts numbered by their lowest rank.
std::vector<int> host_map_of_keys(const std::vector<std::string>& keys);

// How many of `keys` name the kernel whose boot id is `boot_id` (boot_id_of_host_key; keys of
// another shape, C10D_SHM_HOST's or empty, name none). Ranks of one
// kernel share its cores however many hosts (network namespaces, containers) they are split into.
int ranks_on_machine(const std::vector<std::string>& keys, std::string_view boot_id);

// Publishes `key` as this rank's under "<prefix>host/<rank>".
void publish_host_key(Store& store, const std::string& prefix, int rank, const std::string& key);
// Waits (through `watch`, up to `deadline`) for every rank's key under `prefix`, and answers
// host_map_of_keys of them. Notes ranks_on_machine of them for this machine's waiters
// (core::note_machine_processes).
std::vector<int> read_host_map(Store& store, backends::SetupWatch& watch, const std::string& prefix,
                               int world, transport::Clock::time_point deadline);
// Both: every rank of the group calls it with the same prefix.
std::vector<int> exchange_host_map(Store& store, backends::SetupWatch& watch,
                                   const std::string& prefix, int rank, int world,
                                   const std::string& key, transport::Clock::time_point deadline);

}  // namespace c10d::inline v1::gloo_like
