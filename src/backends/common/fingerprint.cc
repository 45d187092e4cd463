#include "backends/common/fingerprint.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/check.h"

namespace c10d::inline v1::backends {
namespace {

constexpr std::array<std::string_view, 14> kOpNames = {"?",
                                                       "all_reduce",
                                                       "broadcast",
                                                       "reduce",
                                                       "all_gather",
                                                       "all_gather_into_tensor",
                                                       "reduce_scatter",
                                                       "reduce_scatter_tensor",
                                                       "all_to_all",
                                                       "gather",
                                                       "scatter",
                                                       "barrier",
                                                       "send",
                                                       "recv"};

// pack_call's fields, from the top: op id 4 bits, dtype 5 (all ones: none), reduce op 4 (all
// ones: none), root + 1 16 (0: none), count 35 (all ones: none).
static_assert(kOpNames.size() <= 16 && kNumDTypes < 31 &&
              static_cast<int>(ReduceOp::kPremulSum) < 15);
constexpr std::uint64_t kCountBits = 35;
constexpr std::uint64_t kCountMask = (std::uint64_t{1} << kCountBits) - 1;
constexpr std::uint64_t kRootMask = 0xffff;

// "all_reduce(float32, count 2, sum, root 1)": what is set of a call.
std::string describe_parts(std::uint64_t id, std::uint64_t dtype, std::uint64_t redop,
                           std::int32_t root, std::int64_t count, bool split_sizes) {
  std::string s(id < kOpNames.size() ? kOpNames[id] : std::string_view("unknown op"));
  std::vector<std::string> parts;
  if (dtype < kNumDTypes) parts.emplace_back(dtype_name(static_cast<DType>(dtype)));
  if (count >= 0) parts.push_back(fmt::format("count {}", count));
  if (redop <= static_cast<std::uint64_t>(ReduceOp::kPremulSum)) {
    parts.emplace_back(reduce_op_name(static_cast<ReduceOp>(redop)));
  }
  if (root >= 0) parts.push_back(fmt::format("root {}", root));
  if (split_sizes) parts.emplace_back("with split sizes");
  return fmt::format("{}({})", s, fmt::join(parts, ", "));
}

}  // namespace

std::uint64_t pack_call(const Fingerprint& fp) {
  // Roots past 65534 wrap: ranks that differ by a multiple of 65535 look alike (a miss, never a
  // false alarm), as do counts that differ by a multiple of 2^35.
  const std::uint64_t root = fp.root < 0 ? 0 : static_cast<std::uint64_t>(fp.root) % kRootMask + 1;
  return std::uint64_t{fp.op_id} << 60 | (std::uint64_t{fp.dtype} & 0x1f) << 55 |
         (std::uint64_t{fp.reduce_op} & 0xf) << 51 | root << kCountBits |
         (static_cast<std::uint64_t>(fp.count) & kCountMask);
}

std::string describe_call(std::uint64_t packed) {
  const std::uint64_t count = packed & kCountMask;
  const std::uint64_t root = (packed >> kCountBits) & kRootMask;
  const std::uint64_t dtype = (packed >> 55) & 0x1f;
  const std::uint64_t redop = (packed >> 51) & 0xf;
  return describe_parts(packed >> 60, dtype == 0x1f ? 0xff : dtype, redop == 0xf ? 0xff : redop,
                        static_cast<std::int32_t>(root) - 1,
                        count == kCountMask ? -1 : static_cast<std::int64_t>(count), false);
}

std::string describe_call_mismatch(const transport::CallMismatch& m) {
  const auto seq = m.tag & transport::kSequenceMask;  // the same on both sides: they matched
  if (m.outgoing) {
    return fmt::format("rank {}: its {} #{} sent a frame to rank {}'s {} #{}: {}", m.self,
                       describe_call(m.expected), seq, m.peer, describe_call(m.received), seq,
                       kSameCallsRule);
  }
  return fmt::format("rank {}: its {} #{} received a frame of rank {}'s {} #{}: {}", m.self,
                     describe_call(m.expected), seq, m.peer, describe_call(m.received), seq,
                     kSameCallsRule);
}

bool detail_from_env() {
  const char* value = std::getenv("C10D_DEBUG");
  return value != nullptr && std::string_view(value) == "DETAIL";
}

Fingerprint Fingerprint::of(const OpRecord& r) {
  Fingerprint fp;
  fp.set_op(r.op);
  fp.dtype = r.dtype;
  fp.reduce_op = r.reduce_op;
  fp.root = r.rank;
  fp.count = r.count;
  fp.sequence = r.sequence;
  return fp;
}

void Fingerprint::set_op(std::string_view op) {
  const auto it = std::find(kOpNames.begin(), kOpNames.end(), op);
  op_id = it == kOpNames.end() ? 0 : static_cast<std::uint8_t>(it - kOpNames.begin());
}

std::array<std::byte, Fingerprint::kBytes> Fingerprint::encode() const {
  std::array<std::byte, kBytes> out{};
  std::size_t at = 0;
  const auto put = [&](std::uint64_t v, std::size_t n) {
    for (std::size_t i = 0; i < n; ++i) out[at++] = std::byte((v >> (8 * i)) & 0xff);
  };
  put(op_id, 1);
  put(dtype, 1);
  put(reduce_op, 1);
  put(split_sizes ? 1 : 0, 1);
  put(static_cast<std::uint32_t>(root), 4);
  put(static_cast<std::uint64_t>(count), 8);
  put(sequence, 8);
  return out;
}

std::string describe_fingerprint(std::span<const std::byte, Fingerprint::kBytes> b) {
  const auto get = [&](std::size_t at, std::size_t n) {
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) v |= static_cast<std::uint64_t>(b[at + i]) << (8 * i);
    return v;
  };
  const auto id = get(0, 1);
  const auto dtype = get(1, 1);
  const auto redop = get(2, 1);
  const auto root = static_cast<std::int32_t>(get(4, 4));
  const auto count = static_cast<std::int64_t>(get(8, 8));
  return fmt::format("{} #{}", describe_parts(id, dtype, redop, root, count, get(3, 1) != 0),
                     get(16, 8));
}

std::exception_ptr fingerprint_mismatch(std::span<const std::byte> all, int size,
                                        std::string_view group) {
  C10D_CHECK(all.size() == Fingerprint::kBytes * static_cast<std::size_t>(size),
             "fingerprint_mismatch: {} bytes for {} ranks", all.size(), size);
  const auto at = [&](int r) {
    return std::span<const std::byte, Fingerprint::kBytes>(
        all.data() + Fingerprint::kBytes * static_cast<std::size_t>(r), Fingerprint::kBytes);
  };
  std::vector<std::string> differ;
  for (int r = 1; r < size; ++r) {
    if (std::memcmp(at(r).data(), at(0).data(), Fingerprint::kBytes) != 0) {
      differ.push_back(fmt::format("rank {} called {}", r, describe_fingerprint(at(r))));
    }
  }
  if (differ.empty()) return nullptr;
  return std::make_exception_ptr(InvalidArgument(
      fmt::format("C10D_DEBUG=DETAIL: the ranks of group {} called different collectives: rank 0 "
                  "called {} but {}",
                  group, describe_fingerprint(at(0)), fmt::join(differ, ", "))));
}

}  // namespace c10d::inline v1::backends
