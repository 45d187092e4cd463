// The process-wide arrival stamps of matcher.h.
#include "transport/matcher.h"

namespace c10d::inline v1::transport {

std::uint64_t next_arrival() {
  // Relaxed: a stamp orders messages that one lock (a transport's) already orders, or that no
  // one can order better (two transports' threads, the routed transport's comparison).
  static std::atomic<std::uint64_t> next{0};
  return next.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace c10d::inline v1::transport
