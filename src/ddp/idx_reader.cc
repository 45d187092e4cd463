// IDX files and Fashion-MNIST (include/c10d/data.h). A file is read whole through zlib (which
// also reads plain files), then checked against its header: nothing is allocated from a size
// the file merely claims.
#include <fmt/format.h>
#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "c10d/data.h"
#include "core/check.h"

namespace c10d::data {
namespace {

constexpr std::uint8_t kUnsignedByte = 0x08;
constexpr int kMaxDims = 8;

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

std::vector<std::uint8_t> read_all(const std::filesystem::path& path) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    C10D_THROW(InvalidArgument, "{}: no such file{}", path.string(),
               path.string().find("fashion-mnist") != std::string::npos
                   ? " (install Debian's dataset-fashion-mnist, or set C10D_FASHION_MNIST)"
                   : "");
  }
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  C10D_CHECK(f != nullptr, "{}: cannot open: {}", path.string(), std::strerror(errno));
  std::vector<std::uint8_t> out;
  constexpr std::size_t kChunk = 1 << 20;
  for (;;) {
    const std::size_t at = out.size();
    out.resize(at + kChunk);
    const int n = gzread(f.get(), out.data() + at, static_cast<unsigned>(kChunk));
    if (n < 0) {
      int code = 0;
      const char* why = gzerror(f.get(), &code);
      C10D_THROW(InvalidArgument, "{}: corrupt gzip data: {}", path.string(), why);
    }
    out.resize(at + static_cast<std::size_t>(n));
    if (n == 0) break;
  }
  int code = 0;
  const char* why = gzerror(f.get(), &code);
  // A gzip stream cut short reads as a clean end of file with Z_BUF_ERROR pending.
  C10D_CHECK(code == Z_OK || code == Z_STREAM_END, "{}: corrupt or truncated gzip data: {}",
             path.string(), why);
  return out;
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

}  // namespace

Tensor read_idx(const std::filesystem::path& path) {
  const std::vector<std::uint8_t> bytes = read_all(path);
  const std::string name = path.string();
  C10D_CHECK(bytes.size() >= 4, "{}: {} bytes is too short for an IDX header", name, bytes.size());
  C10D_CHECK(bytes[0] == 0 && bytes[1] == 0,
             "{}: not an IDX file (magic bytes {:#04x} {:#04x}, expected 0x00 0x00)", name,
             bytes[0], bytes[1]);
  C10D_CHECK(bytes[2] == kUnsignedByte,
             "{}: IDX element type {:#04x} is not supported (only 0x08, unsigned byte)", name,
             bytes[2]);
  const int ndims = bytes[3];
  C10D_CHECK(ndims >= 1 && ndims <= kMaxDims, "{}: IDX header claims {} dimensions (1 to {})", name,
             ndims, kMaxDims);
  const std::size_t header = 4 + 4 * static_cast<std::size_t>(ndims);
  C10D_CHECK(bytes.size() >= header, "{}: truncated in the IDX header ({} of {} bytes)", name,
             bytes.size(), header);
  std::vector<std::int64_t> shape;
  const std::uint64_t payload = bytes.size() - header;
  // The product of the dims, unless it overflows 64 bits (then it is surely wrong).
  std::uint64_t elements = 1;
  bool overflow = false;
  for (int d = 0; d < ndims; ++d) {
    const std::uint32_t dim = be32(bytes.data() + 4 + 4 * d);
    shape.push_back(dim);
    if (dim != 0 && elements > UINT64_MAX / dim) overflow = true;
    if (!overflow) elements *= dim;
  }
  if (std::find(shape.begin(), shape.end(), 0) != shape.end()) {
    elements = 0;
    overflow = false;
  }
  C10D_CHECK(!overflow && elements == payload,
             "{}: the IDX header's shape [{}] needs {} bytes of data but the file has {}", name,
             fmt::join(shape, ", "),
             overflow ? fmt::format("more than {}", payload) : std::to_string(elements), payload);
  Tensor t = Tensor::empty(shape, DType::kUInt8);
  if (payload > 0) std::memcpy(t.raw_data(), bytes.data() + header, payload);
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

}  // namespace c10d::data
