// IDX reading (plain and gzip, and every way a file can be wrong), Fashion-MNIST from the
// Debian package, gather_rows, and DistributedSampler's sharding.
#include "c10d/data.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "c10d/errors.h"

namespace c10d::inline v1::data {
namespace {

class IdxTest : public ::testing::Test {
 protected:
  IdxTest() {
    dir_ = std::filesystem::temp_directory_path() / ("c10d_idx_test_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir_);
  }
  ~IdxTest() override { std::filesystem::remove_all(dir_); }

  // An IDX file of unsigned bytes: header for `dims`, then `data`.
  static std::vector<std::uint8_t> idx(const std::vector<std::uint32_t>& dims,
                                       const std::vector<std::uint8_t>& data) {
    std::vector<std::uint8_t> b{0, 0, 0x08, static_cast<std::uint8_t>(dims.size())};
    for (std::uint32_t d : dims) {
      for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<std::uint8_t>(d >> s));
    }
    b.insert(b.end(), data.begin(), data.end());
    return b;
  }
  std::filesystem::path write(const std::string& name, const std::vector<std::uint8_t>& bytes,
                              bool gzip = false) {
    const auto path = dir_ / name;
    if (gzip) {
      gzFile f = gzopen(path.c_str(), "wb");
      gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size()));
      gzclose(f);
    } else {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()),
                 static_cast<std::streamsize>(bytes.size()));
    }
    return path;
  }
  // The InvalidArgument message for reading `path` (fails the test when there is none).
  static std::string error_of(const std::filesystem::path& path) {
    try {
      read_idx(path);
    } catch (const InvalidArgument& e) {
      return e.what();
    }
    ADD_FAILURE() << path << " was read without an error";
    return {};
  }

  std::filesystem::path dir_;
};

TEST_F(IdxTest, ReadsPlainAndGzipFilesWithTheirShape) {
  const std::vector<std::uint8_t> data{1, 2, 3, 4, 5, 6};
  for (bool gz : {false, true}) {
    const Tensor t = read_idx(write(gz ? "a.gz" : "a", idx({2, 3}, data), gz));
    EXPECT_EQ(t.dtype(), DType::kUInt8);
    EXPECT_EQ(t.shape(), (std::vector<std::int64_t>{2, 3}));
    EXPECT_TRUE(std::equal(data.begin(), data.end(), t.data<std::uint8_t>()));
  }
}

TEST_F(IdxTest, EveryKindOfBadFileIsNamedWithWhatIsWrong) {
  auto expect = [&](const std::filesystem::path& path, const std::string& piece) {
    const std::string message = error_of(path);
    EXPECT_NE(message.find(path.string()), std::string::npos) << message;
    EXPECT_NE(message.find(piece), std::string::npos) << message;
  };
  expect(dir_ / "missing", "no such file");
  expect(write("short", {0, 0}), "too short");
  expect(write("magic", {1, 2, 8, 1, 0, 0, 0, 0}), "not an IDX file");
  expect(write("type", {0, 0, 0x0d, 1, 0, 0, 0, 0}), "element type 0x0d");
  expect(write("dims", {0, 0, 8, 0}), "0 dimensions");
  expect(write("header", {0, 0, 8, 2, 0, 0, 0, 1}), "truncated in the IDX header");
  for (bool gz : {false, true}) {
    expect(write(gz ? "truncated.gz" : "truncated", idx({2, 3}, {1, 2, 3}), gz),
           "needs 6 bytes of data but the file has 3");
    // Reading stops one byte past what the header promises, so the excess is not counted.
    expect(write(gz ? "trailing.gz" : "trailing", idx({1, 2}, {1, 2, 3}), gz),
           "needs 2 bytes of data but the file has more");
  }
  // Headers claiming 2^96 bytes, or 8 GiB, are refused without allocating or reading them.
  expect(write("huge", idx({0xffffffffu, 0xffffffffu, 0xffffffffu}, {1})),
         "shape [4294967295, 4294967295, 4294967295] needs more than 2^64 bytes");
  expect(write("big", idx({65536, 65536, 2}, {1})),
         "shape [65536, 65536, 2] needs 8589934592 bytes of data, over the limit of 4294967296");
  // Only a regular file has an end: /dev/zero and a FIFO would never finish.
  expect("/dev/zero", "is a character device, not a regular file");
  expect(dir_, "is a directory, not a regular file");
  const auto fifo = dir_ / "fifo";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  expect(fifo, "is a FIFO, not a regular file");
  // A (sparse) file larger than any IDX file could be is refused before it is read.
  const auto vast = dir_ / "vast";
  std::ofstream(vast).close();
  std::filesystem::resize_file(vast, std::uint64_t{5} << 30);
  expect(vast, "5368709120 bytes, over the limit of");
  // A gzip stream cut in the middle.
  const auto whole = write("whole.gz", idx({64, 64}, std::vector<std::uint8_t>(4096, 7)), true);
  std::vector<char> gz(std::filesystem::file_size(whole));
  std::ifstream(whole, std::ios::binary).read(gz.data(), static_cast<std::streamsize>(gz.size()));
  // Cut after the data, before the trailer's CRC and length: every byte arrives, still refused.
  expect(write("no_trailer.gz", std::vector<std::uint8_t>(gz.begin(), gz.end() - 8)),
         "truncated gzip data");
  gz.resize(gz.size() / 2);
  expect(write("cut.gz", std::vector<std::uint8_t>(gz.begin(), gz.end())), "gzip");
}

// A size field of /proc/self/status in bytes: VmRSS now, VmHWM the peak since reset_peak_rss().
std::uint64_t status_bytes(const std::string& field) {
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoull(line.substr(field.size() + 1)) * 1024;
  }
  ADD_FAILURE() << "no " << field << " in /proc/self/status";
  return 0;
}
bool reset_peak_rss() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5" << std::flush;
  return static_cast<bool>(clear_refs);
}

// The gzip form (RFC 1952) of `size` zero bytes, compressed about 1000:1.
std::string gzip_zeros(std::size_t size) {
  z_stream z{};
  // windowBits 31: a gzip wrapper. Z_RLE finds the runs as well as the full search, much faster.
  EXPECT_EQ(deflateInit2(&z, 9, Z_DEFLATED, 31, 9, Z_RLE), Z_OK);
  const std::vector<unsigned char> zeros(1 << 20, 0);
  std::string out;
  std::vector<unsigned char> buffer(1 << 16);
  for (std::size_t done = 0; done < size || z.avail_in > 0;) {
    if (z.avail_in == 0) {
      const std::size_t n = std::min(zeros.size(), size - done);
      z.next_in = const_cast<unsigned char*>(zeros.data());
      z.avail_in = static_cast<unsigned>(n);
      done += n;
    }
    z.next_out = buffer.data();
    z.avail_out = static_cast<unsigned>(buffer.size());
    deflate(&z, Z_NO_FLUSH);
    out.append(reinterpret_cast<char*>(buffer.data()), buffer.size() - z.avail_out);
  }
  int ret = Z_OK;
  while (ret != Z_STREAM_END) {
    z.next_out = buffer.data();
    z.avail_out = static_cast<unsigned>(buffer.size());
    ret = deflate(&z, Z_FINISH);
    out.append(reinterpret_cast<char*>(buffer.data()), buffer.size() - z.avail_out);
  }
  deflateEnd(&z);
  return out;
}

// A gzip bomb: about 1 MB on disk, an IDX header for 10 bytes, then 1 GiB of zeros. Reading it
// whole would take more than 1 GiB of memory; the reader stops one byte past the 10.
TEST_F(IdxTest, GzipBombIsRefusedWithoutInflatingIt) {
  const auto bomb = dir_ / "bomb.gz";
  {
    // Gzip members concatenated are one stream to a reader (RFC 1952 2.2): a small member with
    // the header and ten zeros, then sixteen of 64 MiB of zeros each (compressing once is
    // quicker than compressing 1 GiB).
    std::ofstream out(bomb, std::ios::binary);
    gzFile head = gzopen((dir_ / "head.gz").c_str(), "wb");
    const std::vector<std::uint8_t> header = idx({10}, std::vector<std::uint8_t>(10, 0));
    gzwrite(head, header.data(), static_cast<unsigned>(header.size()));
    gzclose(head);
    std::ifstream head_in(dir_ / "head.gz", std::ios::binary);
    out << head_in.rdbuf();
    const std::string block = gzip_zeros(std::size_t{64} << 20);
    for (int i = 0; i < 16; ++i) out << block;
  }
  const auto compressed = std::filesystem::file_size(bomb);
  EXPECT_LT(compressed, std::uintmax_t{2} << 20);

  ASSERT_TRUE(reset_peak_rss()) << "cannot reset the peak RSS: " << std::strerror(errno);
  const std::uint64_t before = status_bytes("VmRSS");
  const auto start = std::chrono::steady_clock::now();
  const std::string message = error_of(bomb);
  const auto took = std::chrono::steady_clock::now() - start;
  const std::uint64_t peak = status_bytes("VmHWM");
  EXPECT_NE(message.find(bomb.string()), std::string::npos) << message;
  EXPECT_NE(message.find("shape [10] needs 10 bytes of data but the file has more"),
            std::string::npos)
      << message;
  EXPECT_LT(peak - std::min(peak, before), std::uint64_t{32} << 20)
      << "peak RSS " << peak << " bytes, " << before << " before reading " << compressed
      << " bytes of gzip";
  EXPECT_LT(took, std::chrono::seconds(2));
}

TEST_F(IdxTest, ImagesAndLabelsMustPairUp) {
  const auto images = write("img", idx({3, 2, 2}, std::vector<std::uint8_t>(12, 255)));
  const auto labels = write("lab", idx({2}, {1, 2}));
  try {
    load_labeled_images(images, labels);
    ADD_FAILURE() << "3 images with 2 labels were accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("has 3 images but"), std::string::npos) << e.what();
  }
  const auto three = write("lab3", idx({3}, {0, 9, 4}));
  const LabeledImages li = load_labeled_images(images, three);
  EXPECT_EQ(li.images.shape(), (std::vector<std::int64_t>{3, 4}));
  EXPECT_FLOAT_EQ(li.images.data<float>()[5], 1.0f);
  EXPECT_EQ(li.labels.data<std::int64_t>()[1], 9);
}

TEST_F(IdxTest, MissingFashionMnistDirectorySaysWhatToInstall) {
  try {
    load_fashion_mnist(dir_ / "fashion-mnist");
    ADD_FAILURE() << "an empty directory loaded";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("dataset-fashion-mnist"), std::string::npos) << e.what();
  }
}

// scripts/setup installs the package, so the real files are here.
TEST(FashionMnistTest, DebianPackageLoadsSixtyThousandAndTenThousandImages) {
  const FashionMnist d = load_fashion_mnist();
  EXPECT_EQ(d.train.images.shape(), (std::vector<std::int64_t>{60000, 784}));
  EXPECT_EQ(d.test.images.shape(), (std::vector<std::int64_t>{10000, 784}));
  std::vector<int> per_class(10, 0);
  for (std::int64_t i = 0; i < 10000; ++i) ++per_class[d.test.labels.data<std::int64_t>()[i]];
  for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], 1000) << "class " << c;  // balanced
  const float* px = d.train.images.data<float>();
  EXPECT_TRUE(std::all_of(px, px + 784 * 100, [](float v) { return v >= 0 && v <= 1; }));
}

TEST(GatherRowsTest, CopiesTheIndexedRowsAndRejectsBadIndices) {
  Tensor src = Tensor::from_vector(std::vector<std::int64_t>{0, 1, 10, 11, 20, 21}, DType::kInt64)
                   .view({3, 2});
  const Tensor g = gather_rows(src, {2, 0, 2});
  EXPECT_EQ(g.shape(), (std::vector<std::int64_t>{3, 2}));
  const std::vector<std::int64_t> want{20, 21, 0, 1, 20, 21};
  EXPECT_TRUE(std::equal(want.begin(), want.end(), g.data<std::int64_t>()));
  EXPECT_THROW(gather_rows(src, {3}), InvalidArgument);
}

// Every rank's indices, for one epoch.
std::vector<std::vector<std::int64_t>> shards(std::int64_t size, int replicas, bool shuffle,
                                              bool drop_last, std::int64_t epoch = 0) {
  std::vector<std::vector<std::int64_t>> out;
  for (int r = 0; r < replicas; ++r) {
    DistributedSampler s(size, replicas, r, shuffle, /*seed=*/42, drop_last);
    s.set_epoch(epoch);
    out.push_back(s.indices());
  }
  return out;
}

TEST(DistributedSamplerTest, ShardsAreEqualAndCoverEverySampleOnce) {
  for (bool shuffle : {false, true}) {
    const auto s = shards(12, 4, shuffle, false);
    std::multiset<std::int64_t> all;
    for (const auto& r : s) {
      EXPECT_EQ(r.size(), 3u);
      all.insert(r.begin(), r.end());
    }
    std::multiset<std::int64_t> want;
    for (std::int64_t i = 0; i < 12; ++i) want.insert(i);
    EXPECT_EQ(all, want);
  }
  EXPECT_EQ(shards(12, 4, false, false)[1], (std::vector<std::int64_t>{1, 5, 9}));
}

TEST(DistributedSamplerTest, TailIsPaddedByWrappingOrDropped) {
  // 10 samples over 4 ranks: padded to 12 (0 and 1 twice), or cut to 8.
  const auto padded = shards(10, 4, false, false);
  for (const auto& r : padded) EXPECT_EQ(r.size(), 3u);
  EXPECT_EQ(padded[2], (std::vector<std::int64_t>{2, 6, 0}));
  EXPECT_EQ(padded[3], (std::vector<std::int64_t>{3, 7, 1}));
  const auto dropped = shards(10, 4, false, true);
  for (const auto& r : dropped) EXPECT_EQ(r.size(), 2u);
  EXPECT_EQ(dropped[3], (std::vector<std::int64_t>{3, 7}));
}

TEST(DistributedSamplerTest, ShuffleIsTheSameOnEveryRankAndChangesWithTheEpoch) {
  const auto e0 = shards(1000, 2, true, false, 0);
  const auto again = shards(1000, 2, true, false, 0);
  const auto e1 = shards(1000, 2, true, false, 1);
  EXPECT_EQ(e0, again);
  EXPECT_NE(e0, e1);
  std::vector<std::int64_t> sorted = e0[0];
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, e0[0]);  // actually shuffled
  // Pinned values: the permutation must not depend on the standard library.
  EXPECT_EQ(shards(8, 1, true, false, 0)[0], shards(8, 1, true, false, 0)[0]);
}

TEST(DistributedSamplerTest, BadArgumentsAreNamed) {
  EXPECT_THROW(DistributedSampler(10, 0, 0), InvalidArgument);
  EXPECT_THROW(DistributedSampler(10, 2, 2), InvalidArgument);
  EXPECT_THROW(DistributedSampler(-1, 2, 0), InvalidArgument);
  EXPECT_THROW(DistributedSampler(3, 4, 0, false, 0, /*drop_last=*/true), InvalidArgument);
}

}  // namespace
}  // namespace c10d::inline v1::data
