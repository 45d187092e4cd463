#include "backends/tpu_ici/shm_segment.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <utility>

#include "c10d/errors.h"
#include "core/check.h"

namespace c10d::tpu_ici {
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
  Fd fd{::shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600)};
  if (fd.fd < 0) {
    C10D_THROW(NetworkError, "ICI: cannot create shared memory {}: {}", name, std::strerror(errno));
  }
  SharedSegment s;
  s.name_ = name;
  s.owns_name_ = true;  // from here on the destructor unlinks it on failure
  if (::ftruncate(fd.fd, static_cast<off_t>(bytes)) != 0) {
    C10D_THROW(NetworkError, "ICI: cannot size shared memory {} to {} bytes: {}", name, bytes,
               std::strerror(errno));
  }
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.fd, 0);
  if (p == MAP_FAILED) {
    C10D_THROW(NetworkError, "ICI: cannot map shared memory {}: {}", name, std::strerror(errno));
  }
  s.data_ = static_cast<std::byte*>(p);
  s.size_ = bytes;
  return s;
}

SharedSegment SharedSegment::open(const std::string& name) {
  Fd fd{::shm_open(name.c_str(), O_RDWR, 0600)};
  if (fd.fd < 0) {
    C10D_THROW(NetworkError, "ICI: cannot open shared memory {}: {}", name, std::strerror(errno));
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0 || st.st_size <= 0) {
    C10D_THROW(NetworkError, "ICI: shared memory {} has no size", name);
  }
  void* p = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ | PROT_WRITE,
                   MAP_SHARED, fd.fd, 0);
  if (p == MAP_FAILED) {
    C10D_THROW(NetworkError, "ICI: cannot map shared memory {}: {}", name, std::strerror(errno));
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

bool ByteRing::has_room(std::size_t bytes) const {
  const std::uint64_t head = header_->head.load(std::memory_order_acquire);
  const std::uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  return capacity_ - (tail - head) >= bytes;
}

void ByteRing::copy_in(std::uint64_t at, const void* src, std::size_t n) {
  const std::size_t pos = static_cast<std::size_t>(at % capacity_);
  const std::size_t first = std::min(n, capacity_ - pos);
  std::memcpy(data_ + pos, src, first);
  if (first < n) std::memcpy(data_, static_cast<const std::byte*>(src) + first, n - first);
}

void ByteRing::copy_out(std::uint64_t at, void* dst, std::size_t n) const {
  const std::size_t pos = static_cast<std::size_t>(at % capacity_);
  const std::size_t first = std::min(n, capacity_ - pos);
  std::memcpy(dst, data_ + pos, first);
  if (first < n) std::memcpy(static_cast<std::byte*>(dst) + first, data_, n - first);
}

void ByteRing::write(const PacketHeader& h, std::span<const std::byte> payload) {
  const std::uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  copy_in(tail, &h, sizeof(h));
  if (!payload.empty()) copy_in(tail + sizeof(h), payload.data(), payload.size());
  header_->tail.store(tail + packet_bytes(h), std::memory_order_release);
}

bool ByteRing::peek(PacketHeader& h) const {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  const std::uint64_t tail = header_->tail.load(std::memory_order_acquire);
  if (tail - head < sizeof(PacketHeader)) return false;
  copy_out(head, &h, sizeof(h));
  return true;
}

void ByteRing::read_payload(std::size_t from, std::span<std::byte> out) const {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  if (!out.empty()) copy_out(head + sizeof(PacketHeader) + from, out.data(), out.size());
}

void ByteRing::consume(const PacketHeader& h) {
  const std::uint64_t head = header_->head.load(std::memory_order_relaxed);
  header_->head.store(head + packet_bytes(h), std::memory_order_release);
}

bool ByteRing::empty() const {
  return header_->tail.load(std::memory_order_acquire) ==
         header_->head.load(std::memory_order_relaxed);
}

}  // namespace c10d::tpu_ici
