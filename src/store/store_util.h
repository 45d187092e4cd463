// Small pieces every store implementation shares: deadlines that cannot overflow, the checks of
// a request against StoreLimits (with messages in one format), key lists for messages, and the
// decimal int64 that ADD keeps in a value, and the atomic write of a port file.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "c10d/store.h"

namespace c10d::inline v1::store {

using Clock = std::chrono::steady_clock;

// now + timeout, saturating: Milliseconds::max() means "no deadline", not an overflow.
Clock::time_point deadline_after(Milliseconds timeout);

// InvalidArgument unless the request fits `limits`; `who` opens the message ("HashStore",
// "FileStore '/p'", "store 10.0.0.1:29500"): "<who>: key of 9000 bytes exceeds the limit of 8192
// bytes".
void check_key(std::string_view who, std::string_view key, const StoreLimits& limits);
void check_value(std::string_view who, std::string_view key, std::size_t size,
                 const StoreLimits& limits);
void check_keys(std::string_view who, std::span<const std::string> keys, const StoreLimits& limits);

// "'a', 'b'" for messages; long keys and long lists are cut so a message stays readable.
std::string describe_keys(std::span<const std::string> keys);

// The whole of `text` as a decimal int64, or nothing.
std::optional<std::int64_t> parse_int64(std::span<const std::uint8_t> text);

// Writes `text` to `path` by way of `path`.tmp, made anew with `mode` (one left by a process that
// died there is removed, never followed through a link), and a rename over `path`, so that a
// reader sees no file or all of it (port files). A StoreError opened by `who` on failure.
void write_file_atomically(const std::filesystem::path& path, std::string_view text, mode_t mode,
                           std::string_view who);

inline Bytes to_bytes(std::span<const std::uint8_t> bytes) {
  return Bytes(bytes.begin(), bytes.end());
}

}  // namespace c10d::inline v1::store
