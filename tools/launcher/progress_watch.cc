#include "launcher/progress_watch.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "c10d/errors.h"
#include "core/progress_file.h"

namespace c10d::inline v1::launcher {
namespace {

// How often the counters are read: often enough to see a hang within a tenth of the timeout,
// never more than 4 times a second.
std::chrono::milliseconds look_every(std::chrono::seconds timeout) {
  return std::max<std::chrono::milliseconds>(timeout / 10, std::chrono::milliseconds(250));
}

std::string temp_root() {
  if (::access("/dev/shm", W_OK | X_OK) == 0) return "/dev/shm";
  std::error_code ec;
  const auto tmp = std::filesystem::temp_directory_path(ec);
  return ec ? std::string("/tmp") : tmp.string();
}

}  // namespace

ProgressWatch::ProgressWatch(std::chrono::seconds timeout, int processes) : timeout_(timeout) {
  std::string pattern = temp_root() + "/c10drun-progress-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr) {
    throw Error(fmt::format("--hang-timeout: cannot make a directory like {}: {}", pattern,
                            std::strerror(errno)));
  }
  dir_ = pattern;
  const char zeros[core::progress::kFileBytes] = {};
  for (int r = 0; r < processes; ++r) {
    std::string path = fmt::format("{}/rank_{}", dir_, r);
    UniqueFd fd(::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600));
    if (!fd.valid() || ::pwrite(fd.get(), zeros, sizeof(zeros), 0) != sizeof(zeros)) {
      throw Error(fmt::format("--hang-timeout: cannot make {}: {}", path, std::strerror(errno)));
    }
    files_.push_back(std::move(path));
    fds_.push_back(std::move(fd));
  }
  last_move_ = Clock::now();
  next_look_ = last_move_ + look_every(timeout_);
}

ProgressWatch::~ProgressWatch() {
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

bool ProgressWatch::hung(Clock::time_point now) {
  if (now < next_look_) return false;
  next_look_ = now + look_every(timeout_);
  std::uint64_t total = 0;
  for (const UniqueFd& fd : fds_) {
    std::uint64_t count = 0;
    if (::pread(fd.get(), &count, sizeof(count), 0) == sizeof(count)) total += count;
  }
  if (total != total_) {
    total_ = total;
    last_move_ = now;
  }
  return now - last_move_ >= timeout_;
}

}  // namespace c10d::inline v1::launcher
