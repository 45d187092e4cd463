#include "algorithms/slot_all_reduce.h"

#include "algorithms/reduce_kernels.h"
#include "core/check.h"

namespace c10d::inline v1::algorithms {

void slot_all_reduce(const Context& ctx, transport::SharedSlots& slots, std::uint64_t check,
                     DType dtype, const Reduction& reduction, void* data, std::int64_t count) {
  validate_reduction(dtype, reduction.op);
  C10D_CHECK(count >= 0, "slot_all_reduce of {} elements", count);
  if (reduction.op == ReduceOp::kPremulSum) {
    premul_in_place(dtype, reduction.premul_factor, data, count);
  }
  const std::size_t bytes = static_cast<std::size_t>(count) * element_size(dtype);
  slots.gather(ctx.tag, check, {static_cast<const std::byte*>(data), bytes}, ctx.deadline);
  if (ctx.size() > 1 && count > 0) {
    // Rank order on every rank: the same bits everywhere, whatever the reduction's rounding.
    reduce_to(dtype, reduction, data, slots.part(0).data(), slots.part(1).data(), count);
    for (int r = 2; r < ctx.size(); ++r)
      reduce_into(dtype, reduction, data, slots.part(r).data(), count);
  }
  if (reduction.op == ReduceOp::kAvg) finish_average(dtype, data, count, ctx.size());
}

}  // namespace c10d::inline v1::algorithms
