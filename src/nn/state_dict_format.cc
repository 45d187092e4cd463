// Encoder, decoder and file I/O of the state_dict format drawn in state_dict_format.h.
#include "nn/state_dict_format.h"

#include <fmt/format.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <iterator>

#include "core/check.h"

namespace c10d::nn {
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

// A cursor over the input that never reads past its end.
class Reader {
 public:
  explicit Reader(std::span<const std::uint8_t> bytes) : bytes_(bytes) {}
  std::size_t offset() const { return at_; }
  std::size_t remaining() const { return bytes_.size() - at_; }
  template <typename T>
  bool get(T& v) {
    if (remaining() < sizeof(T)) return false;
    std::uint64_t x = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) {
      x |= static_cast<std::uint64_t>(bytes_[at_ + i]) << (8 * i);
    }
    at_ += sizeof(T);
    v = static_cast<T>(x);
    return true;
  }
  std::span<const std::uint8_t> take(std::size_t n) {
    auto s = bytes_.subspan(at_, n);
    at_ += n;
    return s;
  }

 private:
  std::span<const std::uint8_t> bytes_;
  std::size_t at_ = 0;
};

}  // namespace

void encode(const NamedTensors& state, std::vector<std::uint8_t>& out) {
  C10D_CHECK(state.size() <= kMaxEntries, "state_dict has {} entries, the format allows {}",
             state.size(), kMaxEntries);
  out.insert(out.end(), std::begin(kMagic), std::end(kMagic));
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
  Decoded result;
  auto fail = [&](std::string why) {
    result.entries.clear();
    result.error = std::move(why);
    return result;
  };
  Reader in(bytes);
  if (in.remaining() < sizeof(kMagic) || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return fail("not a c10d state_dict file (bad magic; expected \"C10DSDCT\")");
  }
  in.take(sizeof(kMagic));
  std::uint32_t version = 0;
  std::uint32_t count = 0;
  if (!in.get(version) || !in.get(count)) return fail("truncated header");
  if (version != kVersion) {
    return fail(fmt::format("unsupported version {} (this build reads {})", version, kVersion));
  }
  if (count > kMaxEntries) {
    return fail(fmt::format("{} entries exceeds the limit of {}", count, kMaxEntries));
  }
  for (std::uint32_t i = 0; i < count; ++i) {
    const std::string where = fmt::format("entry {} at offset {}", i, in.offset());
    std::uint32_t name_len = 0;
    if (!in.get(name_len)) return fail(fmt::format("truncated: {} has no name length", where));
    if (name_len == 0 || name_len > kMaxNameBytes) {
      return fail(
          fmt::format("{}: name length {} is outside 1..{}", where, name_len, kMaxNameBytes));
    }
    if (in.remaining() < name_len) return fail(fmt::format("truncated in the name of {}", where));
    auto name_bytes = in.take(name_len);
    std::string name(name_bytes.begin(), name_bytes.end());
    std::uint8_t dtype = 0;
    std::uint8_t ndim = 0;
    if (!in.get(dtype) || !in.get(ndim)) {
      return fail(fmt::format("truncated in the header of '{}' ({})", name, where));
    }
    if (dtype >= kNumDTypes) return fail(fmt::format("'{}': unknown dtype code {}", name, dtype));
    if (ndim > kMaxDims) {
      return fail(fmt::format("'{}': {} dims exceeds the limit of {}", name, ndim, kMaxDims));
    }
    std::vector<std::int64_t> shape(ndim);
    std::uint64_t numel = 1;
    for (auto& d : shape) {
      if (!in.get(d)) return fail(fmt::format("truncated in the shape of '{}'", name));
      if (d < 0) return fail(fmt::format("'{}': negative dimension {}", name, d));
      const auto ud = static_cast<std::uint64_t>(d);
      // Bounded by the file size below, so an overflow here can only mean a lie.
      if (ud != 0 && numel > (std::uint64_t{1} << 62) / ud) {
        return fail(fmt::format("'{}': shape overflows", name));
      }
      numel *= ud;
    }
    std::uint64_t nbytes = 0;
    if (!in.get(nbytes)) return fail(fmt::format("truncated before the data of '{}'", name));
    const auto dt = static_cast<DType>(dtype);
    if (numel > (std::uint64_t{1} << 62) / element_size(dt) || nbytes != numel * element_size(dt)) {
      return fail(fmt::format("'{}': {} data bytes do not match {} elements of {}", name, nbytes,
                              numel, dtype_name(dt)));
    }
    if (in.remaining() < nbytes) {
      return fail(fmt::format("truncated in the data of '{}': {} bytes needed, {} left", name,
                              nbytes, in.remaining()));
    }
    auto data = in.take(nbytes);
    Tensor t = Tensor::empty(shape, dt);
    if (nbytes != 0) std::memcpy(t.raw_data(), data.data(), nbytes);
    result.entries.emplace_back(std::move(name), std::move(t));
  }
  if (in.remaining() != 0) {
    return fail(fmt::format("{} unexpected bytes after the last entry", in.remaining()));
  }
  return result;
}

}  // namespace format

void save_state_dict(const NamedTensors& state, const std::string& path) {
  std::vector<std::uint8_t> bytes;
  format::encode(state, bytes);
  // Write a sibling file and rename it, so a crash never leaves a half-written checkpoint.
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    C10D_CHECK(out.good(), "save_state_dict: cannot open '{}' for writing: {}", tmp,
               std::strerror(errno));
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
    out.flush();
    C10D_CHECK(out.good(), "save_state_dict: writing '{}' failed", tmp);
  }
  C10D_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0,
             "save_state_dict: cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
}

void save_state_dict(const Module& module, const std::string& path) {
  save_state_dict(module.state_dict(), path);
}

NamedTensors read_state_dict(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  C10D_CHECK(in.good(), "state_dict file '{}' cannot be opened: {}", path, std::strerror(errno));
  std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)),
                                  std::istreambuf_iterator<char>());
  C10D_CHECK(!in.bad(), "state_dict file '{}': read error", path);
  format::Decoded decoded = format::decode(bytes);
  C10D_CHECK(decoded.error.empty(), "state_dict file '{}': {}", path, decoded.error);
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

}  // namespace c10d::nn
