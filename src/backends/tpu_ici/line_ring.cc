#include "backends/tpu_ici/line_ring.h"

#include <algorithm>

#include "algorithms/ring_pattern.h"

namespace c10d::inline v1::tpu_ici {
namespace {

int mod(int a, int n) { return ((a % n) + n) % n; }

// Which part of a block a transfer carries.
enum class Half { kWhole, kL, kR };

Range part_of(Range b, Half h) {
  const std::int64_t l = b.count / 2;
  if (h == Half::kL) return {b.offset, l};
  if (h == Half::kR) return {b.offset + l, b.count - l};
  return b;
}

struct StepWriter {
  const LineRing& line;
  Range range;
  std::size_t elem;
  int n() const { return static_cast<int>(line.ranks.size()); }
  int rank_at(int c) const { return line.ranks[static_cast<std::size_t>(mod(c, n()))]; }
  Range block(int c) const { return line_block(range, n(), mod(c, n())); }
  void add(Step& step, TransferKind kind, int peer, Range r) const {
    if (r.count <= 0) return;
    step.transfers.push_back({kind, 0, peer, r.offset * static_cast<std::int64_t>(elem),
                              r.count * static_cast<std::int64_t>(elem)});
  }
};

void bidirectional(const LineRing& line, Range range, std::size_t elem, bool reduce,
                   std::vector<Step>& steps) {
  const StepWriter w{line, range, elem};
  const int n = w.n();
  const int p = line.coord;
  const int s_max = n / 2;
  const bool even = n % 2 == 0;
  const TransferKind recv = reduce ? TransferKind::kRecvReduce : TransferKind::kRecv;
  for (int s = 1; s <= s_max; ++s) {
    // For even n the block at distance n/2 is split: the reduce-scatter's first step and the
    // all-gather's last step carry half R clockwise and half L counterclockwise.
    const bool split = even && (reduce ? s == 1 : s == s_max);
    const Half cw_half = split ? Half::kR : Half::kWhole;
    const Half ccw_half = split ? Half::kL : Half::kWhole;
    Step step;
    // Clockwise: to p+1, from p-1.
    const int cw_send = reduce ? p + s_max - s + 1 : p - s + 1;
    const int cw_recv = reduce ? p + s_max - s : p - s;
    // Counterclockwise: to p-1, from p+1 (the mirror image).
    const int ccw_send = reduce ? p - s_max + s - 1 : p + s - 1;
    const int ccw_recv = reduce ? p - s_max + s : p + s;
    w.add(step, TransferKind::kSend, w.rank_at(p + 1), part_of(w.block(cw_send), cw_half));
    w.add(step, TransferKind::kSend, w.rank_at(p - 1), part_of(w.block(ccw_send), ccw_half));
    w.add(step, recv, w.rank_at(p - 1), part_of(w.block(cw_recv), cw_half));
    w.add(step, recv, w.rank_at(p + 1), part_of(w.block(ccw_recv), ccw_half));
    steps.push_back(std::move(step));
  }
}

void folded(const LineRing& line, Range range, std::size_t elem, bool reduce,
            std::vector<Step>& steps) {
  const StepWriter w{line, range, elem};
  const int n = w.n();
  const std::vector<int> order = folded_order(n);
  const int p = static_cast<int>(std::find(order.begin(), order.end(), line.coord) - order.begin());
  const auto coord_at = [&](int q) { return order[static_cast<std::size_t>(mod(q, n))]; };
  const int right = w.rank_at(coord_at(p + 1));
  const int left = w.rank_at(coord_at(p - 1));
  for (int s = 0; s < n - 1; ++s) {
    Step step;
    if (reduce) {
      w.add(step, TransferKind::kSend, right, w.block(coord_at(p - s - 1)));
      w.add(step, TransferKind::kRecvReduce, left, w.block(coord_at(p - s - 2)));
    } else {
      w.add(step, TransferKind::kSend, right, w.block(coord_at(p - s)));
      w.add(step, TransferKind::kRecv, left, w.block(coord_at(p - s - 1)));
    }
    steps.push_back(std::move(step));
  }
}

void append(const LineRing& line, Range range, std::size_t elem, bool reduce,
            std::vector<Step>& steps) {
  // An empty range still takes its steps (with no transfers): a part's step count must depend
  // on the torus only, or parts merged step by step would pair up differently on chips whose
  // ranges differ.
  if (line.ranks.size() <= 1) return;
  if (line.wrap && line.ranks.size() > 2) {
    bidirectional(line, range, elem, reduce, steps);
  } else {
    folded(line, range, elem, reduce, steps);
  }
}

}  // namespace

Range line_block(Range range, int n, int c) {
  const algorithms::Block b = algorithms::block_of(range.count, n, c);
  return {range.offset + b.offset, b.count};
}

std::vector<int> folded_order(int n) {
  std::vector<int> order;
  for (int c = 0; c < n; c += 2) order.push_back(c);
  for (int c = n - 1 - (n % 2); c >= 1; c -= 2) order.push_back(c);
  return order;
}

void append_reduce_scatter(const LineRing& line, Range range, std::size_t element_bytes,
                           std::vector<Step>& steps) {
  append(line, range, element_bytes, true, steps);
}

void append_all_gather(const LineRing& line, Range range, std::size_t element_bytes,
                       std::vector<Step>& steps) {
  append(line, range, element_bytes, false, steps);
}

}  // namespace c10d::inline v1::tpu_ici
