#include "transport/shared_memory.h"

#include <dirent.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstring>
#include <ctime>
#include <fstream>
#include <limits>
#include <sstream>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "core/check.h"
#include "core/fd.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1::transport {
namespace {

// The most of a name that is not a segment's that goes into an error.
constexpr std::size_t kShownNameBytes = 80;

using core::Fd;

template <typename T>
std::optional<T> number(std::string_view text) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// This process's pid namespace: the inode in /proc/self/ns/pid ("pid:[4026531836]"); 0 when
// it cannot be read (then nothing is reclaimed: no name can be shown to be ours).
std::uint64_t own_pid_namespace() {
  static const std::uint64_t ns = [] {
    char link[64] = {};
    const ssize_t n = ::readlink("/proc/self/ns/pid", link, sizeof(link) - 1);
    if (n <= 0) return std::uint64_t{0};
    const std::string_view text(link, static_cast<std::size_t>(n));
    const auto open = text.find('[');
    const auto close = text.find(']');
    if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
      return std::uint64_t{0};
    }
    return number<std::uint64_t>(text.substr(open + 1, close - open - 1)).value_or(0);
  }();
  return ns;
}

// What /proc/<pid>/stat says of a process: its state letter and start time (kFound), that there
// is no such process (kGone), or nothing this process may rely on (kUnknown).
struct ProcStat {
  char state = '?';
  std::uint64_t start_time = 0;
};
enum class Lookup { kGone, kFound, kUnknown };
Lookup proc_stat(std::int64_t pid, ProcStat& out) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  if (!in) {
    struct stat st {};
    return ::stat(("/proc/" + std::to_string(pid)).c_str(), &st) != 0 && errno == ENOENT
               ? Lookup::kGone
               : Lookup::kUnknown;
  }
  std::string line;
  std::getline(in, line);
  // "pid (comm) state ..." where comm may hold spaces and parentheses: fields count from the
  // last ')'. The state is field 3, the start time field 22.
  const auto paren = line.rfind(')');
  if (paren == std::string::npos) return Lookup::kUnknown;
  std::istringstream fields(line.substr(paren + 1));
  std::string field;
  std::vector<std::string> rest;
  while (fields >> field && rest.size() < 20) rest.push_back(field);
  if (rest.size() < 20 || rest[0].size() != 1) return Lookup::kUnknown;
  const auto start = number<std::uint64_t>(rest[19]);
  if (!start) return Lookup::kUnknown;
  out.state = rest[0][0];
  out.start_time = *start;
  return Lookup::kFound;
}

SegmentOwner own_owner() {
  static const SegmentOwner owner = [] {
    SegmentOwner o;
    o.pid_namespace = own_pid_namespace();
    o.pid = ::getpid();
    ProcStat st;
    if (proc_stat(o.pid, st) == Lookup::kFound) o.start_time = st.start_time;
    return o;
  }();
  // A forked child is another owner: the cached fields hold only while the pid is the same.
  if (owner.pid != ::getpid()) {
    SegmentOwner o = owner;
    o.pid = ::getpid();
    ProcStat st;
    o.start_time = proc_stat(o.pid, st) == Lookup::kFound ? st.start_time : 0;
    return o;
  }
  return owner;
}

}  // namespace

std::string owned_segment_name(std::string_view kind, std::string_view suffix) {
  const SegmentOwner o = own_owner();
  return fmt::format("/{}-{}-{}-{}-{}", kind, o.pid_namespace, o.pid, o.start_time, suffix);
}

std::string own_segment_prefix(std::string_view kind) {
  const SegmentOwner o = own_owner();
  return fmt::format("{}-{}-{}-", kind, o.pid_namespace, o.pid);
}

std::optional<SegmentOwner> segment_owner(std::string_view entry, std::string_view kind) {
  if (!entry.starts_with(kind) || entry.size() <= kind.size() || entry[kind.size()] != '-') {
    return std::nullopt;
  }
  std::string_view rest = entry.substr(kind.size() + 1);
  std::string_view parts[3];
  for (auto& part : parts) {
    const auto dash = rest.find('-');
    if (dash == std::string_view::npos) return std::nullopt;
    part = rest.substr(0, dash);
    rest.remove_prefix(dash + 1);
  }
  const auto ns = number<std::uint64_t>(parts[0]);
  const auto pid = number<std::int64_t>(parts[1]);
  const auto start = number<std::uint64_t>(parts[2]);
  if (!ns || !pid || !start || *pid <= 0 || rest.empty()) return std::nullopt;
  return SegmentOwner{*ns, *pid, *start};
}

bool owner_alive(const SegmentOwner& owner) {
  if (owner.start_time == 0) return true;  // its owner could not read its own start time
  ProcStat st;
  switch (proc_stat(owner.pid, st)) {
    case Lookup::kGone:
      return false;
    case Lookup::kUnknown:
      return true;
    case Lookup::kFound:
      // A zombie (Z) or dead (X) process can no longer use the segment; another start time
      // is another process that got the same pid.
      return st.state != 'Z' && st.state != 'X' && st.start_time == owner.start_time;
  }
  return true;
}

std::size_t reclaim_orphan_segments(std::string_view kind) {
  const std::uint64_t ns = own_pid_namespace();
  if (ns == 0) return 0;
  DIR* dir = ::opendir("/dev/shm");
  if (dir == nullptr) return 0;
  std::vector<std::string> orphans;
  while (const dirent* e = ::readdir(dir)) {
    const std::string_view entry(e->d_name);
    const auto owner = segment_owner(entry, kind);
    if (!owner || owner->pid_namespace != ns) continue;
    struct stat st {};
    if (::fstatat(::dirfd(dir), e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (!S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) continue;
    if (!owner_alive(*owner)) orphans.emplace_back(entry);
  }
  ::closedir(dir);
  std::size_t removed = 0;
  for (const std::string& entry : orphans) {
    if (::shm_unlink(("/" + entry).c_str()) == 0) {
      ++removed;
      C10D_LOG_INFO("reclaimed shared memory /{}: its owner process is gone", entry);
    }
  }
  return removed;
}

SharedSegment SharedSegment::create(const std::string& name, std::size_t bytes) {
  C10D_CHECK(bytes > 0 && bytes <= static_cast<std::size_t>(std::numeric_limits<off_t>::max()),
             "shared memory {}: a size of {} bytes is out of range [1, {}]", name, bytes,
             std::numeric_limits<off_t>::max());
  Fd fd(::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600));
  if (fd.get() < 0) {
    C10D_THROW(NetworkError, "cannot create shared memory {}: {}", name, std::strerror(errno));
  }
  SharedSegment s;
  s.name_ = name;
  s.owns_name_ = true;  // from here on the destructor unlinks it on failure
  // The umask may have taken bits off, never added any; make it exactly owner-only.
  if (::fchmod(fd.get(), 0600) != 0) {
    C10D_THROW(NetworkError, "cannot set the mode of shared memory {}: {}", name,
               std::strerror(errno));
  }
  if (const int rc = ::posix_fallocate(fd.get(), 0, static_cast<off_t>(bytes)); rc != 0) {
    C10D_THROW(NetworkError,
               "cannot reserve {} bytes of shared memory for {}: {} (is /dev/shm full or too "
               "small?)",
               bytes, name, std::strerror(rc));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    C10D_THROW(NetworkError, "cannot map shared memory {}: {}", name, std::strerror(errno));
  }
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = bytes;
  return s;
}

SharedSegment SharedSegment::open(const std::string& name) {
  // Peers publish their segments' names in the store, which anyone who can write it can fill:
  // a name is what shm_open takes ('/' and at most NAME_MAX printable bytes, no other '/') before
  // it is opened, and only its start goes into the error.
  const bool printable = std::all_of(name.begin(), name.end(), [](char c) {
    return static_cast<unsigned char>(c) > 0x20 && static_cast<unsigned char>(c) < 0x7f;
  });
  if (name.size() < 2 || name.size() > NAME_MAX + 1 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos || !printable) {
    C10D_THROW(NetworkError,
               "cannot open shared memory '{}'{}: not a segment name ('/' and 1 to {} printable "
               "bytes, no other '/'), {} bytes",
               core::printable(name, kShownNameBytes), name.size() > kShownNameBytes ? "..." : "",
               NAME_MAX, name.size());
  }
  Fd fd(::shm_open(name.c_str(), O_RDWR, 0600));
  if (fd.get() < 0) {
    C10D_THROW(NetworkError, "cannot open shared memory {}: {}", name, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0 || st.st_size <= 0) {
    C10D_THROW(NetworkError, "shared memory {} has no size", name);
  }
  void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) {
    C10D_THROW(NetworkError, "cannot map shared memory {}: {}", name, std::strerror(errno));
  }
  SharedSegment s;
  s.name_ = name;
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = static_cast<std::size_t>(st.st_size);
  return s;
}

SharedSegment::SharedSegment(SharedSegment&& other) noexcept { *this = std::move(other); }

SharedSegment& SharedSegment::operator=(SharedSegment&& other) noexcept {
  if (this != &other) {
    reset();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owns_name_ = std::exchange(other.owns_name_, false);
  }
  return *this;
}

SharedSegment::~SharedSegment() { reset(); }

void SharedSegment::unlink() {
  if (owns_name_) ::shm_unlink(name_.c_str());
  owns_name_ = false;
}

void SharedSegment::reset() {
  if (data_ != nullptr) ::munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
  unlink();
}

void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                std::chrono::microseconds timeout) {
  struct timespec ts {};
  ts.tv_sec = static_cast<time_t>(timeout.count() / 1'000'000);
  ts.tv_nsec = static_cast<long>((timeout.count() % 1'000'000) * 1000);
  // Not FUTEX_PRIVATE: the word may live in a segment shared with other processes.
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAIT, expected, &ts, nullptr,
            0);
}

void futex_wake(std::atomic<std::uint32_t>& word) {
  ::syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word), FUTEX_WAKE, INT32_MAX, nullptr,
            nullptr, 0);
}

}  // namespace c10d::inline v1::transport
