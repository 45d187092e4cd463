#include "store/store_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>

#include "core/check.h"
#include "core/fd.h"

namespace c10d::inline v1::store {

Clock::time_point deadline_after(Milliseconds timeout) {
  const Clock::time_point now = Clock::now();
  if (timeout > std::chrono::duration_cast<Milliseconds>(Clock::time_point::max() - now)) {
    return Clock::time_point::max();
  }
  return now + timeout;
}

void check_key(std::string_view who, std::string_view key, const StoreLimits& limits) {
  C10D_CHECK(key.size() <= limits.max_key_bytes,
             "{}: key of {} bytes exceeds the limit of {} bytes", who, key.size(),
             limits.max_key_bytes);
}

void check_value(std::string_view who, std::string_view key, std::size_t size,
                 const StoreLimits& limits) {
  C10D_CHECK(size <= limits.max_value_bytes,
             "{}: value of {} bytes exceeds the limit of {} bytes{}", who, size,
             limits.max_value_bytes,
             key.empty() ? std::string() : fmt::format(" (key '{}')", key.substr(0, 200)));
}

void check_keys(std::string_view who, std::span<const std::string> keys,
                const StoreLimits& limits) {
  C10D_CHECK(keys.size() <= limits.max_keys_per_op,
             "{}: {} keys in one call exceed the limit of {}", who, keys.size(),
             limits.max_keys_per_op);
  for (const std::string& key : keys) check_key(who, key, limits);
}

std::string describe_keys(std::span<const std::string> keys) {
  constexpr std::size_t kShownKeys = 8;
  constexpr std::size_t kShownKeyBytes = 200;
  std::string out;
  for (std::size_t i = 0; i < keys.size() && i < kShownKeys; ++i) {
    if (!out.empty()) out += ", ";
    const std::string& key = keys[i];
    out += '\'';
    out += key.size() > kShownKeyBytes ? key.substr(0, kShownKeyBytes) + "..." : key;
    out += '\'';
  }
  if (keys.size() > kShownKeys) out += fmt::format(", ... ({} keys in all)", keys.size());
  return out;
}

std::optional<std::int64_t> parse_int64(std::span<const std::uint8_t> text) {
  const char* first = reinterpret_cast<const char*>(text.data());
  const char* last = first + text.size();
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(first, last, value);
  if (text.empty() || ec != std::errc() || end != last) return std::nullopt;
  return value;
}

void write_file_atomically(const std::filesystem::path& path, std::string_view text, mode_t mode,
                           std::string_view who) {
  const std::string tmp = path.string() + ".tmp";
  ::unlink(tmp.c_str());
  core::Fd out(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (!out.valid()) {
    C10D_THROW(StoreError, "{}: cannot create {}: {}", who, tmp, std::strerror(errno));
  }
  std::size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(out.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      ::unlink(tmp.c_str());
      C10D_THROW(StoreError, "{}: cannot write {}: {}", who, tmp, std::strerror(err));
    }
    done += static_cast<std::size_t>(n);
  }
  if (::close(out.release()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    C10D_THROW(StoreError, "{}: cannot write {}: {}", who, tmp, std::strerror(err));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    ::unlink(tmp.c_str());
    C10D_THROW(StoreError, "{}: cannot rename {} to {}: {}", who, tmp, path.string(), ec.message());
  }
}

}  // namespace c10d::inline v1::store
