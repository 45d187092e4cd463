// cli_args: the benchmark programs' flag values, parsed strictly, and the memory a size needs
// checked before it is allocated. Shared by the sweep (sweep_args.cc, nccl_sweep.cc), the other
// programs under bench/, and c10d-icisim.
//
// Strict means the whole text is the value: no trailing garbage ("1Q", "5x"), no leading space
// or '+', no silent overflow ("99999999999999999999"), and a range the caller names.
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <charconv>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace c10d::inline v1::bench {

// The byte count `s` names: "8", "64K", "1.5M", "2G" (powers of 1024, as nccl-tests'
// parsesize; K, M, G in either case). nullopt for anything else: a negative or unparsable
// number, an unknown suffix, a fraction of a byte ("1.3", "0.1K"), more than 10^18 bytes.
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
  if (!(bytes <= 1e18) || bytes != std::floor(bytes)) return std::nullopt;
  return static_cast<std::size_t>(bytes);
}

// An integer in [min, max], the whole of `s`.
template <std::integral T>
std::optional<T> parse_integer(std::string_view s, T min, T max) {
  T value{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || value < min || value > max) {
    return std::nullopt;
  }
  return value;
}

// A finite number in [min, max], the whole of `s`.
inline std::optional<double> parse_real(std::string_view s, double min, double max) {
  double value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(value) || value < min ||
      value > max) {
    return std::nullopt;
  }
  return value;
}

// Bytes for people: "512 bytes", "1.5 KiB", "8 GiB", "3.2 TiB".
inline std::string bytes_text(double bytes) {
  constexpr const char* kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = 0;
  while (bytes >= 1024 && unit < 6) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? fmt::format("{:.0f} bytes", bytes)
                   : fmt::format("{:.3g} {}", bytes, kUnits[unit]);
}

// What this host can still give a program without swapping: MemAvailable from /proc/meminfo,
// else the free physical pages; nullopt when neither is known (then nothing is refused).
inline std::optional<std::uint64_t> available_memory() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  std::string unit;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  const long pages = ::sysconf(_SC_AVPHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages > 0 && page > 0)
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(page);
  return std::nullopt;
}

// Why `processes` processes of this host cannot each hold `bytes` (touched, so it must be
// physical memory: overcommit would let the allocation succeed and the OOM killer end the run
// later), or "" when they can. `what` names the thing being sized, e.g. "-e 8G".
inline std::string memory_fault(const std::string& what, std::uint64_t bytes, int processes) {
  const auto available = available_memory();
  if (!available) return "";
  const auto n = static_cast<std::uint64_t>(processes < 1 ? 1 : processes);
  if (bytes <= *available / n) return "";
  return fmt::format(
      "{} needs {} of buffers per process{}, more than the {} this host has available "
      "(MemAvailable in /proc/meminfo)",
      what, bytes_text(static_cast<double>(bytes)),
      n > 1 ? fmt::format(" ({} for its {} processes here)",
                          bytes_text(static_cast<double>(bytes) * static_cast<double>(n)), n)
            : std::string(),
      bytes_text(static_cast<double>(*available)));
}

}  // namespace c10d::inline v1::bench
