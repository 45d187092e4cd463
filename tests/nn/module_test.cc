// Module: parameter order and names, registration rules, modes, Linear's init, Dropout,
// state_dict in memory and through a file, and the rejection of bad files.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <utility>

#include "../lazy/autograd_testing.h"
#include "c10d/errors.h"
#include "c10d/nn.h"
#include "nn/state_dict_format.h"

namespace c10d::inline v1 {
namespace {

using testing::values;

std::vector<std::string> names_of(const nn::NamedTensors& list) {
  std::vector<std::string> out;
  for (const auto& [name, t] : list) out.push_back(name);
  return out;
}

std::shared_ptr<nn::Sequential> mlp(std::uint64_t seed) {
  lazy::Generator gen(seed);
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(3, 4, gen));
  net->push_back(std::make_shared<nn::ReLU>());
  net->push_back(std::make_shared<nn::Linear>(4, 2, gen));
  return net;
}

// A module with a buffer and a nested child, for the order of state_dict().
class Block : public nn::Module {
 public:
  explicit Block(lazy::Generator& gen) : Module("Block") {
    scale_ = register_parameter("scale", lazy::ones({2}));
    register_buffer("count", Tensor::zeros({1}, DType::kInt64));
    inner_ = register_module("inner", std::make_shared<nn::Linear>(2, 2, gen));
  }
  Tensor forward(const Tensor& x) override { return inner_->forward(lazy::mul(x, scale_)); }
  void add_bad(const std::string& name) { register_parameter(name, lazy::ones({1})); }

 private:
  Tensor scale_;
  std::shared_ptr<nn::Linear> inner_;
};

// A file in the test's temporary directory, removed afterwards.
class TempFile {
 public:
  explicit TempFile(const std::string& stem)
      : path_((std::filesystem::temp_directory_path() /
               (stem + "." + std::to_string(::getpid()) + ".c10dsd"))
                  .string()) {}
  ~TempFile() { std::filesystem::remove(path_); }
  const std::string& path() const { return path_; }
  std::vector<char> read() const {
    std::ifstream in(path_, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }
  void write(const std::vector<char>& bytes) const {
    std::ofstream out(path_, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }

 private:
  std::string path_;
};

// The InvalidArgument message of `f`, or a failure.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  ADD_FAILURE() << "no InvalidArgument thrown";
  return "";
}

class ModuleTest : public testing::BothModes {};

TEST_P(ModuleTest, SequentialNamesParametersInOrderWithDots) {
  auto net = mlp(1);
  const auto params = net->named_parameters();
  EXPECT_EQ(names_of(params),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(params[0].second.shape(), (std::vector<std::int64_t>{4, 3}));
  EXPECT_EQ(params[1].second.shape(), (std::vector<std::int64_t>{4}));
  EXPECT_EQ(params[2].second.shape(), (std::vector<std::int64_t>{2, 4}));
  for (const auto& [name, p] : params) {
    EXPECT_TRUE(lazy::requires_grad(p)) << name;
    EXPECT_EQ(p.dtype(), DType::kFloat32) << name;
  }
  EXPECT_EQ(net->parameters().size(), 4u);
  Tensor y = net->forward(lazy::ones({5, 3}));
  EXPECT_EQ(y.shape(), (std::vector<std::int64_t>{5, 2}));
}

TEST_P(ModuleTest, StateDictListsParametersThenBuffersThenChildren) {
  lazy::Generator gen(3);
  Block block(gen);
  EXPECT_EQ(names_of(block.state_dict()),
            (std::vector<std::string>{"scale", "count", "inner.weight", "inner.bias"}));
  EXPECT_EQ(names_of(block.named_buffers()), (std::vector<std::string>{"count"}));
  EXPECT_THROW(block.add_bad("scale"), InvalidArgument);
  EXPECT_THROW(block.add_bad("a.b"), InvalidArgument);
  EXPECT_THROW(block.add_bad(""), InvalidArgument);
}

class Holder : public nn::Module {
 public:
  Holder() : Module("Holder") {}
  Tensor add(const std::string& name, const Tensor& t) { return register_parameter(name, t); }
};

TEST_P(ModuleTest, ParametersAreLeavesAndMayBeSharedBetweenModules) {
  Tensor a = lazy::ones({2});
  lazy::set_requires_grad(a);
  Holder h1, h2;
  // The result of an op becomes a fresh leaf; a leaf is shared as it is.
  Tensor p = h1.add("p", lazy::mul(a, lazy::scalar(2.0)));
  EXPECT_TRUE(lazy::is_leaf(p));
  EXPECT_TRUE(lazy::requires_grad(p));
  Tensor q = h2.add("tied", p);
  EXPECT_EQ(q.impl(), p.impl());
  lazy::backward(lazy::sum(lazy::add(h1.parameters()[0], h2.parameters()[0])));
  EXPECT_EQ(values(lazy::grad(p)), (std::vector<double>{2, 2}));
  EXPECT_FALSE(lazy::grad(a).defined());
}

TEST_P(ModuleTest, LinearInitIsTorchsKaimingUniformAndSeeded) {
  lazy::Generator g1(42), g2(42);
  nn::Linear a(16, 8, g1), b(16, 8, g2);
  const auto wa = values(a.weight());
  EXPECT_EQ(wa, values(b.weight()));
  EXPECT_EQ(values(a.bias()), values(b.bias()));
  const double bound = 1.0 / std::sqrt(16.0);
  double lo = 1, hi = -1;
  for (double v : wa) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -bound / 2);  // 128 draws spread over the range
  EXPECT_GT(hi, bound / 2);
  for (double v : values(a.bias())) EXPECT_LE(std::abs(v), bound);
  nn::Linear no_bias(4, 4, g1, /*bias=*/false);
  EXPECT_FALSE(no_bias.bias().defined());
  EXPECT_EQ(no_bias.parameters().size(), 1u);
}

TEST_P(ModuleTest, TrainEvalReachesChildrenAndDropoutFollowsIt) {
  auto gen = std::make_shared<lazy::Generator>(9);
  auto net = std::make_shared<nn::Sequential>();
  auto drop = net->push_back(std::make_shared<nn::Dropout>(0.25, gen));
  EXPECT_TRUE(drop->is_training());
  const Tensor x = lazy::ones({1000});
  const auto y = values(net->forward(x));
  int zeros = 0;
  for (double v : y) {
    if (v == 0) {
      ++zeros;
    } else {
      EXPECT_NEAR(v, 1 / 0.75, 1e-6);
    }
  }
  EXPECT_GT(zeros, 180);
  EXPECT_LT(zeros, 320);
  net->eval();
  EXPECT_FALSE(drop->is_training());
  for (double v : values(net->forward(x))) EXPECT_EQ(v, 1.0);
  EXPECT_THROW(nn::Dropout(1.0, gen), InvalidArgument);
}

TEST_P(ModuleTest, ZeroGradDropsEveryGradient) {
  auto net = mlp(2);
  lazy::backward(lazy::sum(net->forward(lazy::ones({2, 3}))));
  for (const auto& p : net->parameters()) EXPECT_TRUE(lazy::grad(p).defined());
  net->zero_grad();
  for (const auto& p : net->parameters()) EXPECT_FALSE(lazy::grad(p).defined());
}

TEST_P(ModuleTest, StateDictRoundTripsThroughAFile) {
  auto source = mlp(5);
  auto target = mlp(6);
  ASSERT_NE(values(source->parameters()[0]), values(target->parameters()[0]));
  TempFile file("roundtrip");
  nn::save_state_dict(*source, file.path());
  nn::load_state_dict(*target, file.path());
  const auto a = source->state_dict();
  const auto b = target->state_dict();
  ASSERT_EQ(names_of(a), names_of(b));
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(values(a[i].second), values(b[i].second)) << a[i].first;
  }
  // The loaded model computes what the source does, and stays a separate copy.
  const Tensor x = lazy::ones({1, 3});
  EXPECT_EQ(values(source->forward(x)), values(target->forward(x)));
  lazy::assign(source->parameters()[1], lazy::zeros({4}));
  EXPECT_NE(values(source->parameters()[1]), values(target->parameters()[1]));
  // Every dtype and a 0-d entry survive the format too.
  nn::NamedTensors mixed = {{"f64", testing::make({1.5, -2}, {2})},
                            {"i32", testing::make({7}, {}, DType::kInt32)},
                            {"empty", Tensor::zeros({0, 3}, DType::kFloat32)}};
  nn::save_state_dict(mixed, file.path());
  const auto back = nn::read_state_dict(file.path());
  ASSERT_EQ(names_of(back), names_of(mixed));
  EXPECT_EQ(values(back[0].second), (std::vector<double>{1.5, -2}));
  EXPECT_EQ(back[1].second.dtype(), DType::kInt32);
  EXPECT_EQ(back[1].second.dim(), 0);
  EXPECT_EQ(back[2].second.shape(), (std::vector<std::int64_t>{0, 3}));
}

TEST_P(ModuleTest, CorruptFilesAreRejectedNamingTheFileAndTheFault) {
  auto net = mlp(7);
  TempFile file("corrupt");
  nn::save_state_dict(*net, file.path());
  const std::vector<char> good = file.read();

  auto truncated = good;
  truncated.resize(good.size() - 4);
  file.write(truncated);
  std::string msg = error_of([&] { nn::load_state_dict(*net, file.path()); });
  EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("truncated in the data of '2.bias': 8 bytes needed, 4 left"),
            std::string::npos)
      << msg;

  auto bad_magic = good;
  bad_magic[0] = 'X';
  file.write(bad_magic);
  msg = error_of([&] { nn::load_state_dict(*net, file.path()); });
  EXPECT_NE(msg.find("bad magic"), std::string::npos) << msg;

  auto bad_version = good;
  bad_version[8] = 9;
  file.write(bad_version);
  msg = error_of([&] { nn::load_state_dict(*net, file.path()); });
  EXPECT_NE(msg.find("unsupported version 9"), std::string::npos) << msg;

  auto trailing = good;
  trailing.push_back(0);
  file.write(trailing);
  msg = error_of([&] { nn::load_state_dict(*net, file.path()); });
  EXPECT_NE(msg.find("1 unexpected bytes"), std::string::npos) << msg;

  // A huge length is refused before anything is allocated.
  auto huge_name = good;
  huge_name[16] = huge_name[17] = huge_name[18] = huge_name[19] = char(0xff);
  file.write(huge_name);
  msg = error_of([&] { nn::load_state_dict(*net, file.path()); });
  EXPECT_NE(msg.find("name length 4294967295"), std::string::npos) << msg;

  msg = error_of([&] { nn::load_state_dict(*net, file.path() + ".missing"); });
  EXPECT_NE(msg.find("cannot be opened"), std::string::npos) << msg;
}

// The decoder alone, on bytes built by hand: each fault is reported, never thrown.
TEST(StateDictFormatTest, DecoderReportsEachFaultWithoutThrowing) {
  std::vector<std::uint8_t> good;
  nn::format::encode({{"w", testing::make({1, 2}, {2}, DType::kFloat32)}}, good);
  // magic 8 | version 4 | count 4 | name_len 4 | "w" | dtype 1 | ndim 1 | dim 8 | nbytes 8 | data
  ASSERT_EQ(good.size(), 8u + 4 + 4 + 4 + 1 + 1 + 1 + 8 + 8 + 8);
  EXPECT_TRUE(nn::format::decode(good).error.empty());
  EXPECT_EQ(nn::format::decode(good).entries.size(), 1u);
  const std::size_t dtype_at = 21, ndim_at = 22, dim_at = 23, nbytes_at = 31;
  auto with = [&](std::size_t at, std::uint8_t v) {
    auto b = good;
    b[at] = v;
    return nn::format::decode(b).error;
  };
  EXPECT_NE(with(dtype_at, 99).find("unknown dtype code 99"), std::string::npos);
  EXPECT_NE(with(ndim_at, 17).find("17 dims exceeds the limit of 16"), std::string::npos);
  EXPECT_NE(with(dim_at + 7, 0x80).find("negative dimension"), std::string::npos);
  EXPECT_NE(with(nbytes_at, 9).find("9 data bytes do not match 2 elements of float32"),
            std::string::npos);
  EXPECT_NE(with(dim_at, 0xff).find("do not match"), std::string::npos);
  EXPECT_NE(with(12, 2).find("truncated"), std::string::npos);  // claims 2 entries
  for (std::size_t n = 0; n < good.size(); ++n) {
    const auto d = nn::format::decode(std::span(good).first(n));
    EXPECT_FALSE(d.error.empty()) << "prefix of " << n << " bytes";
    EXPECT_TRUE(d.entries.empty());
  }
  EXPECT_NE(nn::format::decode({}).error.find("bad magic"), std::string::npos);
}

// A scratch directory for the file tests below, removed with its contents.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "c10d_sd_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string operator/(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// A device, a FIFO or a directory has no size to bound the read: each is refused, naming the
// file and what it is, before a byte is read (/dev/zero never ends; a FIFO with no writer
// would block the open).
TEST(StateDictFileTest, NonRegularFilesAreRefusedBeforeAnyRead) {
  TempDir dir;
  const std::string fifo = dir / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"/dev/zero", "is a character device, not a regular file"},
      {fifo, "is a FIFO, not a regular file"},
      {dir / ".", "is a directory, not a regular file"},
  };
  for (const auto& [path, fault] : cases) {
    const std::string msg = error_of([&] { nn::read_state_dict(path); });
    EXPECT_NE(msg.find("'" + path + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(fault), std::string::npos) << msg;
  }
}

// The header is checked first and every length against the file's size, so a large file with
// a wrong header costs only its header: the reader's peak memory does not grow by the file.
TEST(StateDictFileTest, AWrongHeaderIsRefusedWithoutReadingTheFile) {
  TempDir dir;
  const std::string big = dir / "big";
  constexpr std::uint64_t kSize = std::uint64_t{512} << 20;  // sparse: no disk is used
  {
    std::ofstream out(big, std::ios::binary);
    out << "NOTASDCT";
  }
  std::filesystem::resize_file(big, kSize);
  rusage before{};
  ::getrusage(RUSAGE_SELF, &before);
  std::string msg = error_of([&] { nn::read_state_dict(big); });
  rusage after{};
  ::getrusage(RUSAGE_SELF, &after);
  EXPECT_NE(msg.find("'" + big + "'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("bad magic"), std::string::npos) << msg;
  EXPECT_LT(after.ru_maxrss - before.ru_maxrss, 64 << 10) << "KiB of peak memory grew";

  // A header claiming more entries than the file can hold is refused before the first entry.
  std::vector<std::uint8_t> header;
  nn::format::encode({}, header);
  header[12] = 0xe8;  // 1000 entries, little-endian
  header[13] = 0x03;
  {
    std::ofstream out(big, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(header.data()),
              static_cast<std::streamsize>(header.size()));
  }
  msg = error_of([&] { nn::read_state_dict(big); });
  EXPECT_NE(msg.find("1000 entries need at least 15000 bytes, 0 remain"), std::string::npos) << msg;
}

// save_state_dict writes <path>.tmp and renames it onto <path>: no temporary is left behind, an
// existing file is replaced whole, and a directory in the way is refused naming it.
TEST(StateDictFileTest, SaveReplacesTheFileWholeThroughOneTemporary) {
  TempDir dir;
  const std::string path = dir / "ckpt";
  nn::save_state_dict({{"a", testing::make({1, 2}, {2})}}, path);
  nn::save_state_dict({{"b", testing::make({3}, {1})}}, path);
  const auto back = nn::read_state_dict(path);
  ASSERT_EQ(names_of(back), (std::vector<std::string>{"b"}));
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / ".")) {
    files.push_back(e.path().filename().string());
  }
  EXPECT_EQ(files, (std::vector<std::string>{"ckpt"}));

  const std::string sub = dir / "sub";
  std::filesystem::create_directory(sub);
  std::string msg = error_of([&] { nn::save_state_dict(nn::NamedTensors{}, sub); });
  EXPECT_NE(msg.find("'" + sub + "' exists and is a directory"), std::string::npos) << msg;
  EXPECT_FALSE(std::filesystem::exists(sub + ".tmp"));
  msg = error_of([&] { nn::save_state_dict(nn::NamedTensors{}, dir / "missing/ckpt"); });
  EXPECT_NE(msg.find("cannot open '" + (dir / "missing/ckpt.tmp") + "' for writing"),
            std::string::npos)
      << msg;
}

TEST_P(ModuleTest, MismatchedStateIsRejectedNamingTheEntry) {
  auto net = mlp(8);
  TempFile file("mismatch");
  lazy::Generator gen(1);
  auto other = std::make_shared<nn::Sequential>();
  other->push_back(std::make_shared<nn::Linear>(3, 5, gen));
  nn::save_state_dict(*other, file.path());
  std::string msg = error_of([&] { nn::load_state_dict(*net, file.path()); });
  EXPECT_NE(msg.find(file.path()), std::string::npos) << msg;
  EXPECT_NE(msg.find("missing entry '2.weight'"), std::string::npos) << msg;
  msg = error_of([&] { nn::load_state_dict(*net, file.path(), /*strict=*/false); });
  EXPECT_NE(msg.find("entry '0.weight' is float32[5, 3] but the module's is float32[4, 3]"),
            std::string::npos)
      << msg;
  auto extra = net->state_dict();
  extra.emplace_back("3.weight", lazy::ones({1}));
  msg = error_of([&] { net->load_state_dict(extra); });
  EXPECT_NE(msg.find("unexpected entry '3.weight'"), std::string::npos) << msg;
}

INSTANTIATE_TEST_SUITE_P(Modes, ModuleTest, ::testing::Bool(), testing::mode_name);

}  // namespace
}  // namespace c10d::inline v1
