// The job-wide list of ranks whose op timed out, and whom they found stalled: the TCP transport
// appends a line to kStallRecordsKey in the job's store when an op of its group times out
// (Transport::find_stalled), and c10drun reads it when a rank fails, to report the rank that made
// no progress rather than the first one that gave up (tools/launcher/supervisor.h).
//
// One line per record: "<rank> <awaited> <suspect> <doing>\n", ranks as the group numbers them
// (the default group's are the launcher's), suspect -1 when the ranks wait for each other.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace c10d::inline v1::transport {

inline constexpr std::string_view kStallRecordsKey = "c10d/stalls";
// A record's `doing` as decoded: at most this many bytes, control characters made '?'.
inline constexpr std::size_t kMaxStallDoingBytes = 256;

struct StallRecord {
  int rank = -1;      // whose op timed out
  int awaited = -1;   // the peer it waited for
  int suspect = -1;   // the rank at the end of the wait chain; -1: a cycle
  std::string doing;  // e.g. "all_reduce #12"
};

std::string encode_stall_record(const StallRecord& record);
// What a rank says it was doing, as read back from the store (here and in the records the TCP
// transport follows, <group>/stall/...): at most kMaxStallDoingBytes, control characters '?'.
std::string stall_doing(std::string_view text);
// The well-formed lines of `text` for a job of `world_size` ranks: three decimal ints, each
// followed by a space, rank and awaited in [0, world_size), suspect in [-1, world_size). Others
// are skipped: anyone who can write the store can write them, and a record that names a rank
// outside the job is not evidence.
std::vector<StallRecord> decode_stall_records(std::string_view text, int world_size);

}  // namespace c10d::inline v1::transport
