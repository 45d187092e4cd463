// IDX files and Fashion-MNIST (include/c10d/data.h). A file is read through zlib (which also
// reads plain files): first its header, then the bytes its dims promise and one more, to tell a
// file that goes on. Nothing is decompressed or allocated beyond that, so a gzip bomb (a small
// file that inflates without end) costs a few reads, not its inflated size.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string_view>

#include "c10d/data.h"
#include "core/check.h"
#include "core/regular_file.h"

namespace c10d::inline v1::data {
namespace {

constexpr std::uint8_t kUnsignedByte = 0x08;
constexpr int kMaxDims = 8;
// The largest file to open: the largest payload and header, plus deflate's worst-case growth of
// incompressible data (5 bytes per 64 KiB stored block) and room for gzip's optional header
// fields. No IDX file this reader accepts is larger, so a larger one is refused unread.
constexpr std::uint64_t kMaxFileBytes =
    kMaxIdxDataBytes + (kMaxIdxDataBytes >> 10) + (std::uint64_t{1} << 20);
// Deflate's largest expansion: a 258-byte match from at best 2 bits of code. It bounds the
// data a file can hold, so a header's claim is never allocated beyond what the file could give.
constexpr std::uint64_t kMaxInflateRatio = 1032;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Opens `path` for gzread, refusing anything but a regular file of at most kMaxFileBytes: the
// compressed input is then finite and bounded. Sets `size` to the file's size.
GzFile open_idx(const std::filesystem::path& path, std::uint64_t& size) {
  const std::string name = path.string();
  // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0 && (errno == ENOENT || errno == ENOTDIR)) {
    C10D_THROW(InvalidArgument, "{}: no such file{}", name,
               name.find("fashion-mnist") != std::string::npos
                   ? " (install Debian's dataset-fashion-mnist, or set C10D_FASHION_MNIST)"
                   : "");
  }
  C10D_CHECK(fd >= 0, "{}: cannot open: {}", name, std::strerror(errno));
  // Closes fd on every refusal below, until the gzFile owns it.
  std::unique_ptr<const int, void (*)(const int*)> guard(&fd, [](const int* p) { ::close(*p); });
  // Only a regular file has an end (/dev/zero and a FIFO may never have one).
  size = core::regular_file_size(fd, name);
  C10D_CHECK(size <= kMaxFileBytes, "{}: is {} bytes, over the limit of {} bytes for an IDX file",
             name, size, kMaxFileBytes);
  GzFile f(gzdopen(fd, "rb"));
  C10D_CHECK(f != nullptr, "{}: cannot read through zlib: out of memory", name);
  guard.release();  // gzclose closes fd now
  return f;
}

// Throws unless the stream ended cleanly. A gzip stream cut short reads as a clean end of file
// with Z_BUF_ERROR pending.
void check_clean_end(gzFile f, const std::string& name) {
  int code = 0;
  const char* why = gzerror(f, &code);
  C10D_CHECK(code == Z_OK || code == Z_STREAM_END, "{}: corrupt or truncated gzip data: {}", name,
             why);
}

// Reads up to `n` bytes into `dst`: fewer only at the end of the file.
std::size_t read_some(gzFile f, std::uint8_t* dst, std::size_t n, const std::string& name) {
  std::size_t done = 0;
  while (done < n) {
    // gzread counts in int; 1 GiB steps stay clear of that.
    const auto step = static_cast<unsigned>(std::min<std::size_t>(n - done, std::size_t{1} << 30));
    const int got = gzread(f, dst + done, step);
    if (got < 0) {
      int code = 0;
      C10D_THROW(InvalidArgument, "{}: corrupt gzip data: {}", name, gzerror(f, &code));
    }
    done += static_cast<std::size_t>(got);
    if (static_cast<unsigned>(got) < step) break;
  }
  return done;
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

}  // namespace

Tensor read_idx(const std::filesystem::path& path) {
  const std::string name = path.string();
  std::uint64_t file_size = 0;
  const GzFile in = open_idx(path, file_size);
  std::uint8_t head[4 + 4 * kMaxDims];
  std::size_t got = read_some(in.get(), head, 4, name);
  if (got < 4) {
    check_clean_end(in.get(), name);
    C10D_THROW(InvalidArgument, "{}: {} bytes is too short for an IDX header", name, got);
  }
  C10D_CHECK(head[0] == 0 && head[1] == 0,
             "{}: not an IDX file (magic bytes {:#04x} {:#04x}, expected 0x00 0x00)", name, head[0],
             head[1]);
  C10D_CHECK(head[2] == kUnsignedByte,
             "{}: IDX element type {:#04x} is not supported (only 0x08, unsigned byte)", name,
             head[2]);
  const int ndims = head[3];
  C10D_CHECK(ndims >= 1 && ndims <= kMaxDims, "{}: IDX header claims {} dimensions (1 to {})", name,
             ndims, kMaxDims);
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  got += read_some(in.get(), head + 4, header - 4, name);
  if (got < header) {
    check_clean_end(in.get(), name);
    C10D_THROW(InvalidArgument, "{}: truncated in the IDX header ({} of {} bytes)", name, got,
               header);
  }
  std::vector<std::int64_t> shape;
  // The product of the dims, unless it overflows 64 bits (then it is surely wrong).
  std::uint64_t elements = 1;
  bool overflow = false;
  for (int d = 0; d < ndims; ++d) {
    const std::uint32_t dim = be32(head + 4 + 4 * d);
    shape.push_back(dim);
    if (dim != 0 && elements > UINT64_MAX / dim) overflow = true;
    if (!overflow) elements *= dim;
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    elements = 0;
    overflow = false;
  }
  if (overflow) {
    C10D_THROW(InvalidArgument,
               "{}: the IDX header's shape [{}] needs more than 2^64 bytes of data (the limit is "
               "{} bytes)",
               name, fmt::join(shape, ", "), kMaxIdxDataBytes);
  }
  C10D_CHECK(elements <= kMaxIdxDataBytes,
             "{}: the IDX header's shape [{}] needs {} bytes of data, over the limit of {} bytes",
             name, fmt::join(shape, ", "), elements, kMaxIdxDataBytes);

  // One byte past the promise tells a file that goes on; no more is ever decompressed.
  const std::uint64_t wanted = elements + 1;
  std::vector<std::uint8_t> bytes;
  bytes.reserve(std::min(wanted, file_size * kMaxInflateRatio + 1));
  constexpr std::size_t kChunk = 1 << 20;
  while (bytes.size() < wanted) {
    const std::size_t at = bytes.size();
    const std::size_t n = std::min<std::uint64_t>(kChunk, wanted - at);
    bytes.resize(at + n);
    const std::size_t read = read_some(in.get(), bytes.data() + at, n, name);
    bytes.resize(at + read);
    if (read < n) break;
  }
  C10D_CHECK(bytes.size() <= elements,
             "{}: the IDX header's shape [{}] needs {} bytes of data but the file has more", name,
             fmt::join(shape, ", "), elements);
  check_clean_end(in.get(), name);
  C10D_CHECK(bytes.size() == elements,
             "{}: the IDX header's shape [{}] needs {} bytes of data but the file has {}", name,
             fmt::join(shape, ", "), elements, bytes.size());
  Tensor t = Tensor::empty(shape, DType::kUInt8);
  if (elements > 0) std::memcpy(t.raw_data(), bytes.data(), elements);
  return t;
}

LabeledImages load_labeled_images(const std::filesystem::path& images_path,
                                  const std::filesystem::path& labels_path) {
  const Tensor images = read_idx(images_path);
  const Tensor labels = read_idx(labels_path);
  C10D_CHECK(images.dim() == 3, "{}: expected images N x rows x cols, found {} dimensions",
             images_path.string(), images.dim());
  C10D_CHECK(labels.dim() == 1, "{}: expected N labels, found {} dimensions", labels_path.string(),
             labels.dim());
  const std::int64_t n = images.shape()[0];
  C10D_CHECK(labels.shape()[0] == n, "{} has {} images but {} has {} labels", images_path.string(),
             n, labels_path.string(), labels.shape()[0]);
  const std::int64_t features = images.shape()[1] * images.shape()[2];
  LabeledImages out;
  out.images = Tensor::empty({n, features}, DType::kFloat32);
  out.labels = Tensor::empty({n}, DType::kInt64);
  const auto* px = images.data<std::uint8_t>();
  float* dst = out.images.data<float>();
  for (std::int64_t i = 0; i < n * features; ++i) dst[i] = static_cast<float>(px[i]) / 255.0f;
  const auto* lb = labels.data<std::uint8_t>();
  auto* lout = out.labels.data<std::int64_t>();
  for (std::int64_t i = 0; i < n; ++i) lout[i] = lb[i];
  return out;
}

std::filesystem::path default_fashion_mnist_dir() {
  if (const char* dir = std::getenv("C10D_FASHION_MNIST"); dir != nullptr && *dir != '\0') {
    return dir;
  }
  return "/usr/share/datasets/fashion-mnist";
}

FashionMnist load_fashion_mnist(const std::filesystem::path& dir) {
  const auto file = [&](const std::string& stem) {
    const auto gz = dir / (stem + ".gz");
    std::error_code ec;
    return std::filesystem::exists(gz, ec) ? gz : dir / stem;
  };
  FashionMnist data;
  data.train =
      load_labeled_images(file("train-images-idx3-ubyte"), file("train-labels-idx1-ubyte"));
  data.test = load_labeled_images(file("t10k-images-idx3-ubyte"), file("t10k-labels-idx1-ubyte"));
  for (const LabeledImages* part : {&data.train, &data.test}) {
    C10D_CHECK(part->images.shape()[1] == FashionMnist::kFeatures,
               "{}: Fashion-MNIST images are 28x28, these have {} pixels", dir.string(),
               part->images.shape()[1]);
    const auto* l = part->labels.data<std::int64_t>();
    for (std::int64_t i = 0; i < part->labels.numel(); ++i) {
      C10D_CHECK(l[i] >= 0 && l[i] < FashionMnist::kClasses,
                 "{}: label {} of sample {} is outside 0..9", dir.string(), l[i], i);
    }
  }
  return data;
}

Tensor gather_rows(const Tensor& src, const std::vector<std::int64_t>& indices) {
  C10D_CHECK(src.dim() >= 1, "gather_rows: {} has no rows", src.to_string());
  std::vector<std::int64_t> shape = src.shape();
  const std::int64_t rows = shape[0];
  shape[0] = static_cast<std::int64_t>(indices.size());
  Tensor out = Tensor::empty(shape, src.dtype());
  const std::size_t row_bytes = rows == 0 ? 0 : src.nbytes() / static_cast<std::size_t>(rows);
  const auto* from = static_cast<const std::uint8_t*>(src.raw_data());
  auto* to = static_cast<std::uint8_t*>(out.raw_data());
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::int64_t r = indices[i];
    C10D_CHECK(r >= 0 && r < rows, "gather_rows: index {} is outside [0, {}) of {}", r, rows,
               src.to_string());
    std::memcpy(to + i * row_bytes, from + static_cast<std::size_t>(r) * row_bytes, row_bytes);
  }
  return out;
}

}  // namespace c10d::inline v1::data
