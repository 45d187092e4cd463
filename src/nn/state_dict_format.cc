// Encoder, decoder and file I/O of the state_dict format drawn in state_dict_format.h.
#include "nn/state_dict_format.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string_view>
#include <utility>

#include "core/check.h"
#include "core/fd.h"
#include "core/regular_file.h"
#include "core/shape.h"

namespace c10d::inline v1::nn {
namespace format {
namespace {

// Tensor bytes are written as they sit in memory; the format says little-endian.
static_assert(std::endian::native == std::endian::little,
              "the state_dict format stores little-endian elements; add byte swapping here");

template <typename T>
void put(std::vector<std::uint8_t>& out, T v) {
  for (std::size_t i = 0; i < sizeof(T); ++i) {
    out.push_back(static_cast<std::uint8_t>(static_cast<std::uint64_t>(v) >> (8 * i)));
  }
}

// Where decode() reads from: a byte span, or a regular file of a size known up front (so every
// length in the file is checked against the bytes that remain before anything is allocated).
// read() copies n bytes and returns false, reading nothing, when fewer than n remain.
class SpanSource {
 public:
  explicit SpanSource(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  std::uint64_t offset() const { return at_; }
  std::uint64_t remaining() const { return bytes_.size() - at_; }
  bool read(void* out, std::uint64_t n) {
    if (remaining() < n) return false;
    if (n != 0) std::memcpy(out, bytes_.data() + at_, n);
    at_ += n;
    return true;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

// A file descriptor of a regular file of `size` bytes, read in order through a small buffer
// (the fields are a few bytes each); tensor data goes straight into the tensor. A file that
// shrinks while it is read shows as a short read (read() false, error() says so).
class FileSource {
 public:
  FileSource(int fd, std::uint64_t size) : fd_(fd), size_(size) {}
  std::uint64_t offset() const { return at_; }
  std::uint64_t remaining() const { return size_ - at_; }
  const std::string& error() const { return error_; }
  bool read(void* out, std::uint64_t n) {
    if (remaining() < n) return false;
    auto* dst = static_cast<std::uint8_t*>(out);
    std::uint64_t done = 0;
    while (done < n) {
      if (begin_ == end_) {
        if (n - done >= kBuffer) {  // a large read bypasses the buffer
          const std::uint64_t got = fill(dst + done, n - done);
          if (got == 0) return false;
          done += got;
          continue;
        }
        begin_ = 0;
        end_ =
            static_cast<std::size_t>(fill(buffer_.data(), std::min(kBuffer, remaining_on_disk())));
        if (end_ == 0) return false;
      }
      const std::size_t take =
          static_cast<std::size_t>(std::min<std::uint64_t>(end_ - begin_, n - done));
      std::memcpy(dst + done, buffer_.data() + begin_, take);
      begin_ += take;
      done += take;
    }
    at_ += n;
    return true;
  }
  // True when the file holds more than `size` bytes now (it grew while it was read).
  bool grew() {
    std::uint8_t extra = 0;
    return begin_ == end_ && remaining() == 0 && fill(&extra, 1) != 0;
  }

 private:
  static constexpr std::uint64_t kBuffer = 64 << 10;
  // Bytes of the file not yet in the buffer or consumed, by the size taken at open.
  std::uint64_t remaining_on_disk() const { return size_ - read_; }
  // One read(2) of up to n bytes, retried on EINTR; 0 at end of file or on an error.
  std::uint64_t fill(std::uint8_t* out, std::uint64_t n) {
    for (;;) {
      const ssize_t got =
          ::read(fd_, out, static_cast<std::size_t>(std::min<std::uint64_t>(n, 1u << 30)));
      if (got > 0) {
        read_ += static_cast<std::uint64_t>(got);
        return static_cast<std::uint64_t>(got);
      }
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        error_ = fmt::format("read error at byte {}: {}", read_, std::strerror(errno));
      } else if (read_ < size_) {
        error_ =
            fmt::format("the file ended at byte {} but was {} bytes when opened", read_, size_);
      }
      return 0;
    }
  }

  int fd_;
  std::uint64_t size_;
  std::uint64_t at_ = 0;    // bytes consumed by read()
  std::uint64_t read_ = 0;  // bytes read from the file
  std::vector<std::uint8_t> buffer_ = std::vector<std::uint8_t>(kBuffer);
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  std::string error_;
};

// A little-endian integer from `in`.
template <typename T, typename Source>
bool get(Source& in, T& v) {
  std::uint8_t bytes[sizeof(T)];
  if (!in.read(bytes, sizeof(T))) return false;
  std::uint64_t x = 0;
  for (std::size_t i = 0; i < sizeof(T); ++i) x |= static_cast<std::uint64_t>(bytes[i]) << (8 * i);
  v = static_cast<T>(x);
  return true;
}

// The fewest bytes an entry takes: name length, a 1-byte name, dtype, ndim and nbytes.
constexpr std::uint64_t kMinEntryBytes = 4 + 1 + 1 + 1 + 8;

template <typename Source>
Decoded decode_from(Source& in) {
  Decoded result;
  auto fail = [&](std::string why) {
    result.entries.clear();
    result.error = std::move(why);
    return result;
  };
  char magic[sizeof(kMagic)] = {};
  if (!in.read(magic, sizeof(magic)) || std::memcmp(magic, kMagic, sizeof(kMagic)) != 0) {
    return fail("not a c10d state_dict file (bad magic; expected \"C10DSDCT\")");
  }
  std::uint32_t version = 0;
  std::uint32_t count = 0;
  if (!get(in, version) || !get(in, count)) return fail("truncated header");
  if (version != kVersion) {
    return fail(fmt::format("unsupported version {} (this build reads {})", version, kVersion));
  }
  if (count > kMaxEntries) {
    return fail(fmt::format("{} entries exceeds the limit of {}", count, kMaxEntries));
  }
  if (count * kMinEntryBytes > in.remaining()) {
    return fail(fmt::format("truncated: {} entries need at least {} bytes, {} remain", count,
                            count * kMinEntryBytes, in.remaining()));
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::string where = fmt::format("entry {} at offset {}", i, in.offset());
    std::uint32_t name_len = 0;
    if (!get(in, name_len)) return fail(fmt::format("truncated: {} has no name length", where));
    if (name_len == 0 || name_len > kMaxNameBytes) {
      return fail(
          fmt::format("{}: name length {} is outside 1..{}", where, name_len, kMaxNameBytes));
    }
    std::string name(name_len, '\0');
    if (!in.read(name.data(), name_len)) {
      return fail(fmt::format("truncated in the name of {}", where));
    }
    std::uint8_t dtype = 0;
    std::uint8_t ndim = 0;
    if (!get(in, dtype) || !get(in, ndim)) {
      return fail(fmt::format("truncated in the header of '{}' ({})", name, where));
    }
    if (dtype >= kNumDTypes) return fail(fmt::format("'{}': unknown dtype code {}", name, dtype));
    if (ndim > kMaxDims) {
      return fail(fmt::format("'{}': {} dims exceeds the limit of {}", name, ndim, kMaxDims));
    }
    std::vector<std::int64_t> shape(ndim);
    for (auto& d : shape) {
      if (!get(in, d)) return fail(fmt::format("truncated in the shape of '{}'", name));
      if (d < 0) return fail(fmt::format("'{}': negative dimension {}", name, d));
    }
    const auto dt = static_cast<DType>(dtype);
    // Bounded by the file size below, so a shape too large to count can only mean a lie.
    const auto bytes = core::shape_bytes(shape, element_size(dt));
    if (!bytes) {
      return fail(fmt::format("'{}': shape [{}] of {} is too large to count its bytes", name,
                              fmt::join(shape, ", "), dtype_name(dt)));
    }
    std::uint64_t nbytes = 0;
    if (!get(in, nbytes)) return fail(fmt::format("truncated before the data of '{}'", name));
    if (nbytes != static_cast<std::uint64_t>(*bytes)) {
      return fail(fmt::format("'{}': {} data bytes do not match {} elements of {}", name, nbytes,
                              *bytes / static_cast<std::int64_t>(element_size(dt)),
                              dtype_name(dt)));
    }
    if (in.remaining() < nbytes) {
      return fail(fmt::format("truncated in the data of '{}': {} bytes needed, {} left", name,
                              nbytes, in.remaining()));
    }
    // Only now, with the bytes known to be there, is the tensor allocated.
    Tensor t = Tensor::empty(shape, dt);
    if (!in.read(t.raw_data(), nbytes)) {
      return fail(fmt::format("truncated in the data of '{}'", name));
    }
    result.entries.emplace_back(std::move(name), std::move(t));
  }
  if (in.remaining() != 0) {
    return fail(fmt::format("{} unexpected bytes after the last entry", in.remaining()));
  }
  return result;
}

}  // namespace

void encode(const NamedTensors& state, std::vector<std::uint8_t>& out) {
  C10D_CHECK(state.size() <= kMaxEntries, "state_dict has {} entries, the format allows {}",
             state.size(), kMaxEntries);
  // Byte by byte: GCC 12 takes vector::insert of a range into the empty vector, inlined into
  // save_state_dict by link-time optimization, for an overflow (-Wstringop-overflow).
  for (const char c : kMagic) out.push_back(static_cast<std::uint8_t>(c));
  put<std::uint32_t>(out, kVersion);
  put<std::uint32_t>(out, static_cast<std::uint32_t>(state.size()));
  for (const auto& [name, t] : state) {
    C10D_CHECK(!name.empty() && name.size() <= kMaxNameBytes,
               "state_dict entry name '{}' must have 1 to {} bytes", name, kMaxNameBytes);
    C10D_CHECK(t.defined(), "state_dict entry '{}' is undefined", name);
    C10D_CHECK(t.dim() <= kMaxDims, "state_dict entry '{}' has {} dims, the format allows {}", name,
               t.dim(), kMaxDims);
    put<std::uint32_t>(out, static_cast<std::uint32_t>(name.size()));
    out.insert(out.end(), name.begin(), name.end());
    put<std::uint8_t>(out, static_cast<std::uint8_t>(t.dtype()));
    put<std::uint8_t>(out, static_cast<std::uint8_t>(t.dim()));
    for (std::int64_t d : t.shape()) put<std::int64_t>(out, d);
    put<std::uint64_t>(out, t.nbytes());
    auto bytes = t.bytes();
    out.insert(out.end(), bytes.begin(), bytes.end());
  }
}

Decoded decode(std::span<const std::uint8_t> bytes) {
  SpanSource in(bytes);
  return decode_from(in);
}

}  // namespace format

namespace {

using core::Fd;

void write_all(int fd, const std::uint8_t* data, std::size_t n, const std::string& path) {
  while (n > 0) {
    const ssize_t put = ::write(fd, data, std::min<std::size_t>(n, 1u << 30));
    if (put < 0 && errno == EINTR) continue;
    C10D_CHECK(put > 0, "save_state_dict: writing '{}' failed: {}", path,
               put < 0 ? std::strerror(errno) : "no progress");
    data += put;
    n -= static_cast<std::size_t>(put);
  }
}

// The directory `path` is in ("." for a bare name).
std::string parent_dir(const std::string& path) {
  const std::string parent = std::filesystem::path(path).parent_path().string();
  return parent.empty() ? std::string(".") : parent;
}

}  // namespace

void save_state_dict(const NamedTensors& state, const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    C10D_CHECK(S_ISREG(st.st_mode), "save_state_dict: '{}' exists and is {}, not a file to replace",
               path, core::file_kind(st.st_mode));
  }
  std::vector<std::uint8_t> bytes;
  format::encode(state, bytes);
  // Write a sibling file, flush it to disk, then rename it over `path` and flush the directory:
  // a crash at any point leaves the old file or the new one, never half of one.
  const std::string tmp = path + ".tmp";
  Fd fd(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  C10D_CHECK(fd.get() >= 0, "save_state_dict: cannot open '{}' for writing: {}", tmp,
             std::strerror(errno));
  try {
    write_all(fd.get(), bytes.data(), bytes.size(), tmp);
    C10D_CHECK(::fsync(fd.get()) == 0, "save_state_dict: fsync of '{}' failed: {}", tmp,
               std::strerror(errno));
    C10D_CHECK(::close(fd.release()) == 0, "save_state_dict: closing '{}' failed: {}", tmp,
               std::strerror(errno));
    C10D_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
               "save_state_dict: cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  const std::string dir = parent_dir(path);
  Fd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  C10D_CHECK(dir_fd.get() >= 0 && ::fsync(dir_fd.get()) == 0,
             "save_state_dict: '{}' was written but flushing its directory '{}' failed: {}", path,
             dir, std::strerror(errno));
}

void save_state_dict(const Module& module, const std::string& path) {
  save_state_dict(module.state_dict(), path);
}

NamedTensors read_state_dict(const std::string& path) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY));
  C10D_CHECK(fd.get() >= 0, "state_dict file '{}' cannot be opened: {}", path,
             std::strerror(errno));
  // Only a regular file has a size to check the header's lengths against (/dev/zero never ends).
  const std::uint64_t size =
      core::regular_file_size(fd.get(), fmt::format("state_dict file '{}'", path));
  format::FileSource in(fd.get(), size);
  format::Decoded decoded = format::decode_from(in);
  C10D_CHECK(in.error().empty(), "state_dict file '{}': {}", path, in.error());
  C10D_CHECK(decoded.error.empty(), "state_dict file '{}': {}", path, decoded.error);
  C10D_CHECK(!in.grew(), "state_dict file '{}' grew while it was read ({} bytes when opened)", path,
             size);
  return std::move(decoded.entries);
}

void load_state_dict(Module& module, const std::string& path, bool strict) {
  NamedTensors state = read_state_dict(path);
  try {
    module.load_state_dict(state, strict);
  } catch (const InvalidArgument& e) {
    C10D_THROW(InvalidArgument, "state_dict file '{}': {}", path, e.what());
  }
}

}  // namespace c10d::inline v1::nn
