#include "algorithms/all_gather.h"

#include <cstdint>

#include "core/check.h"
#include "core/copy.h"

namespace c10d::inline v1::algorithms {

void all_gather(const Context& ctx, std::span<const std::byte> input, std::span<std::byte> output,
                const RingOptions& options) {
  const int n = ctx.size();
  const std::size_t block = input.size();
  C10D_CHECK(output.size() / static_cast<std::size_t>(n) == block &&
                 output.size() % static_cast<std::size_t>(n) == 0,
             "all_gather on rank {}: {} blocks of {} bytes need a {}-byte output, got {} bytes",
             ctx.rank(), n, block, block * static_cast<std::size_t>(n), output.size());
  std::byte* own = output.data() + static_cast<std::size_t>(ctx.rank()) * block;
  // The in-place form passes this very block as the input.
  if (own != input.data()) core::copy_bytes(own, input.data(), block);
  ring_all_gather(ctx, DType::kUInt8, output.data(), static_cast<std::int64_t>(output.size()),
                  options);
}

}  // namespace c10d::inline v1::algorithms
