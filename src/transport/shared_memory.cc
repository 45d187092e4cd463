#include "transport/shared_memory.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <limits>
#include <utility>

#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::transport {
namespace {

// Closes an fd on every path.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

}  // namespace

SharedSegment SharedSegment::create(const std::string& name, std::size_t bytes) {
  C10D_CHECK(bytes > 0 && bytes <= static_cast<std::size_t>(std::numeric_limits<off_t>::max()),
             "shared memory {}: a size of {} bytes is out of range [1, {}]", name, bytes,
             std::numeric_limits<off_t>::max());
  Fd fd{::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)};
  if (fd.fd < 0) {
    C10D_THROW(NetworkError, "cannot create shared memory {}: {}", name, std::strerror(errno));
  }
  SharedSegment s;
  s.name_ = name;
  s.owns_name_ = true;  // from here on the destructor unlinks it on failure
  if (const int rc = ::posix_fallocate(fd.fd, 0, static_cast<off_t>(bytes)); rc != 0) {
    C10D_THROW(NetworkError,
               "cannot reserve {} bytes of shared memory for {}: {} (is /dev/shm full or too "
               "small?)",
               bytes, name, std::strerror(rc));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (p == MAP_FAILED) {
    C10D_THROW(NetworkError, "cannot map shared memory {}: {}", name, std::strerror(errno));
  }
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = bytes;
  return s;
}

SharedSegment SharedSegment::open(const std::string& name) {
  Fd fd{::shm_open(name.c_str(), O_RDWR, 0600)};
  if (fd.fd < 0) {
    C10D_THROW(NetworkError, "cannot open shared memory {}: {}", name, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0 || st.st_size <= 0) {
    C10D_THROW(NetworkError, "shared memory {} has no size", name);
  }
  void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd.fd, 0);
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

}  // namespace c10d::transport
