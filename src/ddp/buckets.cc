// assign_buckets (include/c10d/ddp.h): consecutive runs of parameters under a byte cap.
#include "c10d/ddp.h"
#include "core/check.h"

namespace c10d::inline v1::ddp {

std::vector<std::vector<int>> assign_buckets(const std::vector<std::int64_t>& bytes,
                                             const std::vector<DType>& dtypes,
                                             const std::vector<int>& order, std::int64_t first_cap,
                                             std::int64_t cap) {
  C10D_CHECK(bytes.size() == dtypes.size() && order.size() == bytes.size(),
             "assign_buckets: {} sizes, {} dtypes and an order of {}", bytes.size(), dtypes.size(),
             order.size());
  C10D_CHECK(first_cap > 0 && cap > 0, "assign_buckets: caps must be positive ({} and {})",
             first_cap, cap);
  std::vector<char> seen(bytes.size(), 0);
  std::vector<std::vector<int>> buckets;
  std::int64_t filled = 0;  // bytes in the last bucket
  for (int p : order) {
    C10D_CHECK(p >= 0 && static_cast<std::size_t>(p) < bytes.size() && !seen[p],
               "assign_buckets: the order is not a permutation (at parameter {})", p);
    seen[p] = 1;
    const std::int64_t limit = buckets.size() == 1 ? first_cap : cap;
    const bool start =
        buckets.empty() || dtypes[buckets.back().front()] != dtypes[p] || filled + bytes[p] > limit;
    if (start) {
      buckets.emplace_back();
      filled = 0;
    }
    buckets.back().push_back(p);
    filled += bytes[p];
  }
  return buckets;
}

}  // namespace c10d::inline v1::ddp
