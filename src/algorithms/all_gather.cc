#include "algorithms/all_gather.h"

#include <cstdint>
#include <cstring>

#include "core/check.h"

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
  // memmove, not memcpy: the in-place form passes this very block as the input.
  if (block > 0 && own != input.data()) std::memmove(own, input.data(), block);
  ring_all_gather(ctx, DType::kUInt8, output.data(), static_cast<std::int64_t>(output.size()),
                  options);
}

}  // namespace c10d::inline v1::algorithms
