// The argument checks every ProcessGroup backend makes on the caller's thread before it queues
// an op, written once so that every backend rejects the same calls with the same words. Each
// throws InvalidArgument naming the op and what was wrong; none sends anything. Checking a
// tensor also materializes a lazy one, here on the caller's thread (process_group.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "c10d/tensor.h"
#include "c10d/types.h"

namespace c10d::inline v1::backends {

// Byte counts and offsets of an all_to_all: block r of the input goes to rank r, block s of the
// output comes from rank s.
struct AllToAllLayout {
  std::vector<std::int64_t> send_counts, send_offsets, recv_counts, recv_offsets;
  bool even = true;  // equal splits on both sides (the same count on every rank)
};

class OpChecks {
 public:
  OpChecks(int rank, int size) : rank_(rank), size_(size) {}

  void defined(const Tensor& t, std::string_view op, std::string_view what) const;
  // Defined, and the same dtype and element count as `like`.
  void like(const Tensor& t, const Tensor& like, std::string_view op, std::string_view what) const;
  // Non-empty, every tensor defined (and, with `same`, shaped like the first).
  void tensors(const std::vector<Tensor>& ts, std::string_view op, bool same) const;
  void root(std::string_view op, int root) const;
  // One tensor per rank.
  void count(std::string_view op, std::string_view what, std::size_t n) const;
  // Gather's outputs, scatter's inputs: at the root one tensor per rank shaped like `like`,
  // elsewhere none.
  void root_list(std::string_view op, int root, const std::vector<Tensor>& list, const Tensor& like,
                 std::string_view what) const;
  // `big` holds size() x `small`'s elements, same dtype (all_gather_into_tensor's output,
  // reduce_scatter_tensor's input).
  void blocks(std::string_view op, const Tensor& big, std::string_view big_name,
              const Tensor& small, std::string_view small_name) const;
  AllToAllLayout all_to_all(const Tensor& output, const Tensor& input,
                            const AllToAllOptions& opts) const;
  // all_to_all without split sizes: the checks of all_to_all(), without building the layout.
  void all_to_all_even(const Tensor& output, const Tensor& input) const;
  // send/recv: tensors, a peer other than this rank, a tag >= 0.
  void point_to_point(std::string_view op, const std::vector<Tensor>& ts, int peer, int tag) const;
  // recv_any_source: one tensor, a tag >= 0, another rank in the group to send it.
  void recv_any_source(const std::vector<Tensor>& ts, int tag) const;
  // new_group: distinct ranks of this group; returns whether this rank is among them.
  bool new_group(const std::vector<int>& ranks) const;

 private:
  // all_to_all's checks of the two tensors on their own; returns the bytes of a row.
  std::int64_t all_to_all_tensors(const Tensor& output, const Tensor& input) const;
  void all_to_all_same_bytes(const Tensor& output, const Tensor& input) const;

  int rank_;
  int size_;
};

}  // namespace c10d::inline v1::backends
