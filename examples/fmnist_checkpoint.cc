#include "fmnist_checkpoint.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <system_error>
#include <utility>

#include "c10d/errors.h"

namespace fmnist {
namespace {

namespace nn = c10d::nn;
using c10d::DType;
using c10d::Tensor;

constexpr int kProgressFields = 7;
constexpr std::string_view kPrefix = "step-";
constexpr std::string_view kSuffix = ".ckpt";

// CRC-32 over `entries`' names, dtypes, shapes and bytes, and how many bytes that was.
std::pair<std::uint32_t, std::int64_t> checksum(const nn::NamedTensors& entries) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  std::int64_t covered = 0;
  const auto feed = [&](const void* data, std::size_t n) {
    // zlib takes at most a uInt at a time.
    for (std::size_t done = 0; done < n;) {
      const auto chunk = static_cast<uInt>(std::min<std::size_t>(n - done, 1u << 30));
      crc = ::crc32(crc, static_cast<const Bytef*>(data) + done, chunk);
      done += chunk;
    }
    covered += static_cast<std::int64_t>(n);
  };
  for (const auto& [name, t] : entries) {
    feed(name.data(), name.size());
    const auto dtype = static_cast<std::uint8_t>(t.dtype());
    feed(&dtype, 1);
    feed(t.shape().data(), t.shape().size() * sizeof(std::int64_t));
    feed(t.raw_data(), t.nbytes());
  }
  return {static_cast<std::uint32_t>(crc), covered};
}

Tensor int64s(std::vector<std::int64_t> values) {
  return Tensor::from_vector(std::move(values), DType::kInt64);
}

[[noreturn]] void refuse(const std::string& path, const std::string& why) {
  throw c10d::InvalidArgument(fmt::format("checkpoint '{}' is refused: {}", path, why));
}

// The entries of the file at `path` with a good checksum (which is dropped), and its progress.
std::pair<nn::NamedTensors, Progress> read_verified(const std::string& path) {
  nn::NamedTensors entries = nn::read_state_dict(path);  // throws naming the file's fault
  if (entries.empty() || entries.back().first != "checksum") refuse(path, "it has no checksum");
  const Tensor sum = entries.back().second;
  entries.pop_back();
  if (sum.dtype() != DType::kInt64 || sum.numel() != 2) {
    refuse(path, fmt::format("its checksum is {}, not int64[2]", sum.to_string()));
  }
  const auto [crc, covered] = checksum(entries);
  const std::int64_t* want = sum.data<std::int64_t>();
  if (want[0] != crc || want[1] != covered) {
    refuse(path, fmt::format("checksum mismatch (the file says crc32 {:08x} over {} bytes; its "
                             "entries give {:08x} over {} bytes): it is damaged",
                             want[0], want[1], crc, covered));
  }
  Progress p;
  bool seen_progress = false;
  for (const auto& [name, t] : entries) {
    if (name == "progress") {
      if (t.dtype() != DType::kInt64 || t.numel() != kProgressFields) {
        refuse(path,
               fmt::format("'progress' is {}, not int64[{}]", t.to_string(), kProgressFields));
      }
      const std::int64_t* v = t.data<std::int64_t>();
      p = Progress{v[0], v[1], v[2], v[3], v[4], v[5], std::bit_cast<std::uint64_t>(v[6]), {}};
      seen_progress = true;
    } else if (name == "loss_sums") {
      if (t.dtype() != DType::kFloat64) refuse(path, "'loss_sums' is not float64");
      p.loss_sums.assign(t.data<double>(), t.data<double>() + t.numel());
    }
  }
  if (!seen_progress) refuse(path, "not a train_fmnist checkpoint (no 'progress')");
  if (p.epoch < 0 || p.step < 0 || p.global_step < p.step || p.world < 1 ||
      static_cast<std::int64_t>(p.loss_sums.size()) != p.world) {
    refuse(path, fmt::format("its progress is inconsistent (epoch {}, step {}, global step {}, "
                             "world {}, {} loss sums)",
                             p.epoch, p.step, p.global_step, p.world, p.loss_sums.size()));
  }
  return {std::move(entries), std::move(p)};
}

// Why `tmp` cannot be made in `dir` ("<label>: ..."), or "".
std::string write_fault(const std::string& label, const std::string& dir, const std::string& tmp) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) {
    return fmt::format("{}: directory '{}' {}", label, dir, std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) return fmt::format("{}: '{}' is not a directory", label, dir);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) {
    return fmt::format("{}: cannot write '{}' in '{}': {}", label, tmp, dir, std::strerror(errno));
  }
  ::close(fd);
  ::unlink(tmp.c_str());
  return "";
}

}  // namespace

std::string checkpoint_fault(const std::string& path) {
  const std::filesystem::path p(path);
  const std::string label = "--checkpoint " + path;
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return label + ": it exists and is not a regular file";
  }
  return write_fault(label, p.has_parent_path() ? p.parent_path().string() : ".", path + ".tmp");
}

std::string checkpoint_dir_fault(const std::string& dir) {
  const std::string label = "--checkpoint-dir " + dir;
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return fmt::format("{}: cannot make it: {}", label, ec.message());
  return write_fault(label, dir, (std::filesystem::path(dir) / "probe.tmp").string());
}

void save_checkpoint(const std::string& path, const nn::Module& model,
                     const c10d::optim::Optimizer& opt, const Progress& progress) {
  nn::NamedTensors all;
  for (auto& [name, t] : model.state_dict()) all.emplace_back("model." + name, t);
  for (auto& [name, t] : opt.state_dict()) all.emplace_back("optim." + name, t);
  all.emplace_back("progress", int64s({progress.epoch, progress.step, progress.global_step,
                                       progress.world, progress.batch, progress.limit,
                                       std::bit_cast<std::int64_t>(progress.seed)}));
  all.emplace_back("loss_sums", Tensor::from_vector(progress.loss_sums, DType::kFloat64));
  const auto [crc, covered] = checksum(all);
  all.emplace_back("checksum", int64s({static_cast<std::int64_t>(crc), covered}));
  nn::save_state_dict(all, path);
}

Progress verify_checkpoint(const std::string& path) { return read_verified(path).second; }

Progress load_checkpoint(const std::string& path, nn::Module& model, c10d::optim::Optimizer& opt) {
  auto [entries, progress] = read_verified(path);
  nn::NamedTensors model_state, opt_state;
  for (auto& [name, t] : entries) {
    if (name.starts_with("model.")) model_state.emplace_back(name.substr(6), t);
    if (name.starts_with("optim.")) opt_state.emplace_back(name.substr(6), t);
  }
  model.load_state_dict(model_state);
  opt.load_state_dict(opt_state);
  return progress;
}

std::string mismatch(const Progress& have, const Progress& want) {
  std::string why;
  const auto differ = [&](const char* what, auto a, auto b) {
    if (a != b) why += fmt::format("{}{} {} (this run: {})", why.empty() ? "" : ", ", what, a, b);
  };
  differ("world size", have.world, want.world);
  differ("--batch-size", have.batch, want.batch);
  differ("--limit", have.limit, want.limit);
  differ("--seed", have.seed, want.seed);
  return why;
}

std::string CheckpointDir::path_for(std::int64_t global_step) const {
  return (dir_ / fmt::format("{}{:010}{}", kPrefix, global_step, kSuffix)).string();
}

std::vector<std::int64_t> CheckpointDir::steps_newest_first() const {
  std::vector<std::int64_t> steps;
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with(kPrefix) || !name.ends_with(kSuffix)) continue;
    const std::string_view digits(name.data() + kPrefix.size(),
                                  name.size() - kPrefix.size() - kSuffix.size());
    std::int64_t step = -1;
    const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), step);
    if (ec == std::errc() && end == digits.data() + digits.size() && step >= 0) {
      steps.push_back(step);
    }
  }
  std::sort(steps.rbegin(), steps.rend());
  return steps;
}

void CheckpointDir::prune() const {
  std::vector<std::filesystem::path> doomed;
  const std::vector<std::int64_t> steps = steps_newest_first();
  for (std::size_t i = kKeepCheckpoints; i < steps.size(); ++i)
    doomed.emplace_back(path_for(steps[i]));
  for (const auto& entry : std::filesystem::directory_iterator(dir_)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with(kPrefix) && name.ends_with(std::string(kSuffix) + ".tmp")) {
      doomed.push_back(entry.path());
    }
  }
  for (const auto& path : doomed) std::filesystem::remove(path);
}

}  // namespace fmnist
