// Data for training: IDX files (the MNIST family's format), the Fashion-MNIST data set from
// Debian's dataset-fashion-mnist package, and a sampler that shards a data set across ranks.
//
// IDX layout (big-endian, as LeCun's MNIST page defines it):
//
//   0     2       3       4                 4+4*ndims
//   +-----+-------+-------+-----------------+--------------------------------+
//   | 0 0 | type  | ndims | dim u32 x ndims | data, row-major, prod(dims)    |
//   +-----+-------+-------+-----------------+--------------------------------+
//   type 0x08: unsigned byte (the only type the Fashion-MNIST files use; others are refused).
//
// Files may be gzip-compressed (read through zlib) or plain, and must be regular files. The
// header is read first; dims whose product exceeds kMaxIdxDataBytes are refused, and at most
// that product plus one byte is decompressed, so memory and time follow what the header
// promises, never what a gzip stream could inflate to. Errors are InvalidArgument naming the
// file and what is wrong with it (missing, not a regular file, too large, not gzip or IDX,
// truncated, more data than the header promises, images and labels that do not pair up), never
// a partial data set.
//
// Thread-safety: the functions are pure; a DistributedSampler is a value (copy it per thread).
// Lifetime: the tensors returned own their storage; no file stays open after a call returns.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "c10d/export.h"
#include "c10d/tensor.h"

namespace c10d::inline v1::data {

// The most data one IDX file may hold (the product of its dims): 4 GiB. Fashion-MNIST's largest
// file holds 47 MB.
inline constexpr std::uint64_t kMaxIdxDataBytes = std::uint64_t{4} << 30;

// The dims and bytes of one IDX file (type 0x08): a uint8 tensor of the file's shape.
C10D_API Tensor read_idx(const std::filesystem::path& path);

struct LabeledImages {
  Tensor images;  // float32 [N, rows*cols], pixels scaled to [0, 1]
  Tensor labels;  // int64 [N], in [0, classes)
};

struct FashionMnist {
  LabeledImages train;  // 60,000 images of 28x28
  LabeledImages test;   // 10,000
  static constexpr std::int64_t kClasses = 10;
  static constexpr std::int64_t kFeatures = 28 * 28;
};

// Where dataset-fashion-mnist installs the files; C10D_FASHION_MNIST overrides it.
C10D_API std::filesystem::path default_fashion_mnist_dir();
// Reads {train,t10k}-{images-idx3,labels-idx1}-ubyte[.gz] from `dir`.
C10D_API FashionMnist
load_fashion_mnist(const std::filesystem::path& dir = default_fashion_mnist_dir());
// Pairs an images file (N x rows x cols) with a labels file (N), checking that they agree.
C10D_API LabeledImages load_labeled_images(const std::filesystem::path& images,
                                           const std::filesystem::path& labels);

// Rows `indices` of `src` (any dtype, first axis indexed), copied into a new dense tensor.
C10D_API Tensor gather_rows(const Tensor& src, const std::vector<std::int64_t>& indices);

// Shards the indices [0, size) across `replicas` ranks, as torch.utils.data.DistributedSampler:
// every rank gets the same number of samples, so every rank takes the same number of steps.
// With shuffle, the order is a permutation drawn from (seed, epoch), the same on every rank;
// set_epoch() before each epoch reshuffles. The tail is padded by wrapping around to the start
// (drop_last = false) or dropped so that it divides evenly (drop_last = true). Rank r takes
// positions r, r + replicas, r + 2*replicas, ... of the (padded) order.
class C10D_API DistributedSampler {
 public:
  DistributedSampler(std::int64_t size, int replicas, int rank, bool shuffle = true,
                     std::uint64_t seed = 0, bool drop_last = false);
  void set_epoch(std::int64_t epoch) { epoch_ = epoch; }
  std::int64_t epoch() const { return epoch_; }
  std::int64_t num_samples() const { return num_samples_; }  // per rank
  std::int64_t total_size() const { return num_samples_ * replicas_; }
  // This rank's indices for the current epoch, in the order to visit them.
  std::vector<std::int64_t> indices() const;

 private:
  std::int64_t size_;
  int replicas_;
  int rank_;
  bool shuffle_;
  std::uint64_t seed_;
  bool drop_last_;
  std::int64_t num_samples_;
  std::int64_t epoch_ = 0;
};

}  // namespace c10d::inline v1::data
