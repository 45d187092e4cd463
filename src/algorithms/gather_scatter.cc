#include "algorithms/gather_scatter.h"

#include <algorithm>
#include <memory>
#include <vector>

#include "core/check.h"
#include "core/copy.h"

namespace c10d::inline v1::algorithms {
namespace {

// Checks the per-rank buffers of `op`: n of them at the root, whose own slot matches its local
// buffer's size; none elsewhere.
template <typename Buffer>
void check_buffers(const Context& ctx, const char* op, int root, std::span<const Buffer> buffers,
                   std::size_t local_bytes) {
  const int n = ctx.size();
  const int rank = ctx.rank();
  C10D_CHECK(root >= 0 && root < n, "{}: root {} is outside a group of size {} (rank {})", op, root,
             n, rank);
  if (rank != root) {
    C10D_CHECK(buffers.empty(), "{}: rank {} is not the root ({}) but passed {} per-rank buffers",
               op, rank, root, buffers.size());
    return;
  }
  C10D_CHECK(static_cast<int>(buffers.size()) == n,
             "{}: root rank {} passed {} per-rank buffers for a group of size {}", op, rank,
             buffers.size(), n);
  C10D_CHECK(buffers[static_cast<std::size_t>(root)].size() == local_bytes,
             "{}: root rank {} has a slot of {} bytes for its own {} bytes", op, rank,
             buffers[static_cast<std::size_t>(root)].size(), local_bytes);
}

// The root's own block: the in-place forms pass the same buffer on both sides.
void copy_own(std::span<const std::byte> from, std::span<std::byte> to) {
  if (from.data() != to.data()) core::copy_bytes(to.data(), from.data(), from.size());
}

}  // namespace

void gather(const Context& ctx, std::span<const std::byte> input,
            std::span<const std::span<std::byte>> outputs, int root) {
  check_buffers(ctx, "gather", root, outputs, input.size());
  auto& t = ctx.transport;
  if (ctx.rank() != root) {
    // Zero-byte messages still go out, so a size mismatch with the root is reported, not hung.
    t.isend(root, ctx.tag, input, ctx.call)->wait(ctx.deadline);
    return;
  }
  std::vector<std::unique_ptr<transport::Request>> recvs;
  for (int q = 0; q < ctx.size(); ++q) {
    if (q != root)
      recvs.push_back(t.irecv(q, ctx.tag, outputs[static_cast<std::size_t>(q)], ctx.call));
  }
  copy_own(input, outputs[static_cast<std::size_t>(root)]);
  transport::wait_all(recvs, ctx.deadline);
}

void scatter(const Context& ctx, std::span<const std::span<const std::byte>> inputs,
             std::span<std::byte> output, int root) {
  check_buffers(ctx, "scatter", root, inputs, output.size());
  auto& t = ctx.transport;
  if (ctx.rank() != root) {
    t.irecv(root, ctx.tag, output, ctx.call)->wait(ctx.deadline);
    return;
  }
  std::vector<std::unique_ptr<transport::Request>> sends;
  for (int q = 0; q < ctx.size(); ++q) {
    if (q != root)
      sends.push_back(t.isend(q, ctx.tag, inputs[static_cast<std::size_t>(q)], ctx.call));
  }
  copy_own(inputs[static_cast<std::size_t>(root)], output);
  transport::wait_all(sends, ctx.deadline);
}

}  // namespace c10d::inline v1::algorithms
