// parse_size: a byte count as the benchmarks' flags write it, "8", "64K", "1.5M", "2G" (powers of
// 1024, as nccl-tests' parsesize); shared by the sweep's flags (sweep_args.cc) and
// c10d-loopback-bench.
#pragma once

#include <charconv>
#include <cstddef>
#include <optional>
#include <string_view>
#include <system_error>

namespace c10d::bench {

// The byte count `s` names, or nullopt for anything else (a negative or unparsable number, an
// unknown suffix, more than 10^18 bytes).
inline std::optional<std::size_t> parse_size(std::string_view s) {
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || !(value >= 0)) return std::nullopt;
  const std::string_view suffix(end, static_cast<std::size_t>(s.data() + s.size() - end));
  double unit = 1;
  if (suffix == "K" || suffix == "k") unit = 1024.0;
  if (suffix == "M" || suffix == "m") unit = 1024.0 * 1024;
  if (suffix == "G" || suffix == "g") unit = 1024.0 * 1024 * 1024;
  if (!suffix.empty() && unit == 1) return std::nullopt;
  const double bytes = value * unit;
  if (bytes > 1e18) return std::nullopt;
  return static_cast<std::size_t>(bytes);
}

}  // namespace c10d::bench
