#include "backends/common/op_checks.h"

#include <algorithm>
#include <string>
#include <utility>

#include "core/check.h"

namespace c10d::inline v1::backends {

void OpChecks::defined(const Tensor& t, std::string_view op, std::string_view what) const {
  C10D_CHECK(t.defined(), "{}: {} is an undefined tensor", op, what);
  t.raw_data();  // materializes a lazy value here, on the caller's thread
}

void OpChecks::like(const Tensor& t, const Tensor& like, std::string_view op,
                    std::string_view what) const {
  defined(t, op, what);
  C10D_CHECK(t.dtype() == like.dtype() && t.numel() == like.numel(),
             "{}: {} is {} but must match the input's {}", op, what, t.to_string(),
             like.to_string());
}

void OpChecks::tensors(const std::vector<Tensor>& ts, std::string_view op, bool same) const {
  C10D_CHECK(!ts.empty(), "{}: no tensors", op);
  for (const auto& t : ts) {
    if (same) {
      like(t, ts[0], op, "a tensor");
    } else {
      defined(t, op, "a tensor");
    }
  }
}

void OpChecks::root(std::string_view op, int root) const {
  C10D_CHECK(root >= 0 && root < size_, "{}: root {} is outside the group of size {}", op, root,
             size_);
}

void OpChecks::count(std::string_view op, std::string_view what, std::size_t n) const {
  C10D_CHECK(static_cast<int>(n) == size_, "{}: {} has {} tensors for a group of {}", op, what, n,
             size_);
}

void OpChecks::root_list(std::string_view op, int root_rank, const std::vector<Tensor>& list,
                         const Tensor& shape, std::string_view what) const {
  root(op, root_rank);
  if (rank_ != root_rank) {
    C10D_CHECK(list.empty(), "{}: rank {} is not the root ({}) and must pass no {}", op, rank_,
               root_rank, what);
    return;
  }
  count(op, what, list.size());
  const std::string one = fmt::format("one of the {}", what);
  for (const auto& t : list) like(t, shape, op, one);
}

void OpChecks::blocks(std::string_view op, const Tensor& big, std::string_view big_name,
                      const Tensor& small, std::string_view small_name) const {
  defined(big, op, big_name);
  defined(small, op, small_name);
  C10D_CHECK(big.dtype() == small.dtype() && big.numel() == small.numel() * size_,
             "{}: the {} is {} but must hold {} x the {}'s {}", op, big_name, big.to_string(),
             size_, small_name, small.to_string());
}

std::int64_t OpChecks::all_to_all_tensors(const Tensor& output, const Tensor& input) const {
  constexpr std::string_view kOp = "all_to_all";
  defined(input, kOp, "the input");
  defined(output, kOp, "the output");
  C10D_CHECK(input.dim() >= 1 && output.dim() >= 1,
             "{}: input {} and output {} need a first dimension to split", kOp, input.to_string(),
             output.to_string());
  C10D_CHECK(input.dtype() == output.dtype(), "{}: input {} and output {} differ in dtype", kOp,
             input.to_string(), output.to_string());
  const auto row_bytes = [](const Tensor& t) {
    return t.shape()[0] == 0 ? std::int64_t{-1}
                             : static_cast<std::int64_t>(t.nbytes()) / t.shape()[0];
  };
  const std::int64_t in_row = row_bytes(input);
  const std::int64_t out_row = row_bytes(output);
  C10D_CHECK(in_row < 0 || out_row < 0 || in_row == out_row,
             "{}: a row of the input {} and of the output {} differ in size", kOp,
             input.to_string(), output.to_string());
  return std::max<std::int64_t>({in_row, out_row, 0});
}

void OpChecks::all_to_all_even(const Tensor& output, const Tensor& input) const {
  constexpr std::string_view kOp = "all_to_all";
  all_to_all_tensors(output, input);
  for (const auto& [t, which] : {std::pair{&input, "input"}, std::pair{&output, "output"}}) {
    C10D_CHECK(t->shape()[0] % size_ == 0,
               "{}: the {} has {} rows, which do not split equally over {} ranks", kOp, which,
               t->shape()[0], size_);
  }
  all_to_all_same_bytes(output, input);
}

void OpChecks::all_to_all_same_bytes(const Tensor& output, const Tensor& input) const {
  // Without split sizes every rank sends and receives blocks of one size.
  C10D_CHECK(input.nbytes() == output.nbytes(),
             "all_to_all: without split sizes the input {} and the output {} must hold as many "
             "bytes",
             input.to_string(), output.to_string());
}

AllToAllLayout OpChecks::all_to_all(const Tensor& output, const Tensor& input,
                                    const AllToAllOptions& opts) const {
  constexpr std::string_view kOp = "all_to_all";
  const bool even = opts.input_split_sizes.empty() && opts.output_split_sizes.empty();
  const std::int64_t row = all_to_all_tensors(output, input);
  if (even) all_to_all_same_bytes(output, input);  // split() checks the rows divide
  const auto split = [&](const std::vector<std::int64_t>& sizes, const Tensor& t,
                         std::string_view which, std::vector<std::int64_t>& counts,
                         std::vector<std::int64_t>& offsets) {
    const std::int64_t rows = t.shape()[0];
    if (sizes.empty()) {
      C10D_CHECK(rows % size_ == 0,
                 "{}: the {} has {} rows, which do not split equally over {} ranks", kOp, which,
                 rows, size_);
    } else {
      C10D_CHECK(static_cast<int>(sizes.size()) == size_,
                 "{}: {} split sizes has {} entries for a group of {}", kOp, which, sizes.size(),
                 size_);
    }
    std::int64_t at = 0;
    for (int r = 0; r < size_; ++r) {
      const std::int64_t n = sizes.empty() ? rows / size_ : sizes[static_cast<std::size_t>(r)];
      C10D_CHECK(n >= 0, "{}: {} split size {} for rank {} is negative", kOp, which, n, r);
      counts.push_back(n * row);
      offsets.push_back(at * row);
      at += n;
    }
    C10D_CHECK(at == rows, "{}: {} split sizes add up to {} rows but the tensor has {}", kOp, which,
               at, rows);
  };
  AllToAllLayout layout;
  split(opts.input_split_sizes, input, "input", layout.send_counts, layout.send_offsets);
  split(opts.output_split_sizes, output, "output", layout.recv_counts, layout.recv_offsets);
  layout.even = even;
  return layout;
}

void OpChecks::point_to_point(std::string_view op, const std::vector<Tensor>& ts, int peer,
                              int tag) const {
  tensors(ts, op, /*same=*/false);
  C10D_CHECK(peer >= 0 && peer < size_ && peer != rank_,
             "{}: rank {} cannot {} rank {} in a group of size {}", op, rank_,
             op == "send" ? "send to" : "receive from", peer, size_);
  C10D_CHECK(tag >= 0, "{}: tag {} is negative", op, tag);
}

void OpChecks::recv_any_source(const std::vector<Tensor>& ts, int tag) const {
  constexpr std::string_view kOp = "recv_any_source";
  C10D_CHECK(ts.size() == 1,
             "{}: takes one tensor (the sender is known only once it arrives), got {}", kOp,
             ts.size());
  defined(ts[0], kOp, "the tensor");
  C10D_CHECK(size_ > 1, "{}: rank {} is alone in its group: no other rank can send to it", kOp,
             rank_);
  C10D_CHECK(tag >= 0, "{}: tag {} is negative", kOp, tag);
}

bool OpChecks::new_group(const std::vector<int>& ranks) const {
  C10D_CHECK(!ranks.empty(), "new_group: no ranks");
  std::vector<int> seen(static_cast<std::size_t>(size_), 0);
  for (int r : ranks) {
    C10D_CHECK(r >= 0 && r < size_, "new_group: rank {} is outside the group of size {}", r, size_);
    C10D_CHECK(seen[static_cast<std::size_t>(r)]++ == 0, "new_group: rank {} is listed twice", r);
  }
  return seen[static_cast<std::size_t>(rank_)] != 0;
}

}  // namespace c10d::inline v1::backends
