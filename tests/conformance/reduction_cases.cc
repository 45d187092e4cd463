// The reducing collectives: all_reduce, reduce, reduce_scatter, reduce_scatter_tensor, swept
// over dtype x reduce op x count (x root) x variant against the closed forms of elements.h,
// and NaN propagation.
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "cases.h"
#include "elements.h"

namespace c10d::inline v1::conformance {
namespace {

// What a rejection must name: the op and the dtype.
std::vector<std::string> names(DType dtype, ReduceOp op) {
  return {std::string(dtype_name(dtype)), std::string(reduce_op_name(op))};
}

// A tensor of `count` elements holding a key pattern: what an output holds before the op, so
// an op that writes nothing is caught.
Tensor stale(DType dtype, std::int64_t count, int rank) {
  return key_tensor({count}, dtype, 9000 + static_cast<std::uint64_t>(rank));
}

}  // namespace

void all_reduce_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                     ReduceOp op, std::int64_t count, bool view) {
  const Call call{"all_reduce", dtype, op, count, -1, view ? "view" : "plain"};
  Guarded g;
  Tensor t;
  if (view) {
    g = Guarded::make(dtype, count, 100 + static_cast<std::uint64_t>(pg.rank()));
    t = g.view;
  } else {
    t = stale(dtype, count, pg.rank());
  }
  const AllreduceOptions opts{.reduce = {op, kPremulFactor}};
  if (!supported(dtype, op)) {
    expect_rejected(
        rep, call, config, [&] { return pg.all_reduce({t}, opts); }, names(dtype, op));
    return;
  }
  const ReductionPattern pattern(dtype, op, pg.size(), pg.rank(), count);
  pattern.fill(t, 0);
  const auto work = run(rep, call, config, [&] { return pg.all_reduce({t}, opts); });
  if (!work) return;
  expect_result(rep, call, *work, {t});
  expect_equal(rep, call, "the tensor", t, pattern.expected({count}, 0));
  if (view) g.expect_guards(rep, call);
}

void reduce_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype, ReduceOp op,
                 std::int64_t count, int root, bool view) {
  const Call call{"reduce", dtype, op, count, root, view ? "view" : "plain"};
  Guarded g;
  Tensor t;
  if (view) {
    g = Guarded::make(dtype, count, 200 + static_cast<std::uint64_t>(pg.rank()));
    t = g.view;
  } else {
    t = stale(dtype, count, pg.rank());
  }
  const ReduceOptions opts{.reduce = {op, kPremulFactor}, .root = root};
  if (!supported(dtype, op)) {
    expect_rejected(
        rep, call, config, [&] { return pg.reduce(t, opts); }, names(dtype, op));
    return;
  }
  const ReductionPattern pattern(dtype, op, pg.size(), pg.rank(), count);
  pattern.fill(t, 0);
  const auto work = run(rep, call, config, [&] { return pg.reduce(t, opts); });
  if (!work) return;
  expect_result(rep, call, *work, {t});
  // Only the root's tensor is specified; the others' may hold partial results.
  if (pg.rank() == root)
    expect_equal(rep, call, "the root's tensor", t, pattern.expected({count}, 0));
  if (view) g.expect_guards(rep, call);
}

void reduce_scatter_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                         ReduceOp op, std::int64_t count, bool in_place) {
  const Call call{"reduce_scatter", dtype, op, count, -1, in_place ? "in-place" : "out-of-place"};
  const int n = pg.size();
  const ReductionPattern pattern(dtype, op, n, pg.rank(), n * count);
  std::vector<Tensor> inputs;
  for (int b = 0; b < n; ++b) {
    inputs.push_back(Tensor::empty({count}, dtype));
    if (supported(dtype, op)) pattern.fill(inputs.back(), b * count);
  }
  const Tensor output = in_place ? inputs[pg.rank()] : stale(dtype, count, pg.rank());
  const ReduceScatterOptions opts{.reduce = {op, kPremulFactor}};
  if (!supported(dtype, op)) {
    expect_rejected(
        rep, call, config, [&] { return pg.reduce_scatter(output, inputs, opts); },
        names(dtype, op));
    return;
  }
  std::vector<Tensor> before;
  for (const auto& t : inputs) before.push_back(t.clone());
  const auto work = run(rep, call, config, [&] { return pg.reduce_scatter(output, inputs, opts); });
  if (!work) return;
  expect_result(rep, call, *work, {output});
  expect_equal(rep, call, "the output", output, pattern.expected({count}, pg.rank() * count));
  for (int b = 0; b < n; ++b) {
    if (in_place && b == pg.rank()) continue;
    expect_equal(rep, call, fmt::format("inputs[{}] (must be unchanged)", b), inputs[b], before[b]);
  }
}

void reduce_scatter_tensor_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                                ReduceOp op, std::int64_t count, bool in_place) {
  const Call call{
      "reduce_scatter_tensor", dtype, op, count, -1, in_place ? "in-place" : "out-of-place"};
  const int n = pg.size();
  const int r = pg.rank();
  const ReductionPattern pattern(dtype, op, n, r, n * count);
  const Tensor input = Tensor::empty({n * count}, dtype);
  if (supported(dtype, op)) pattern.fill(input, 0);
  const Tensor output =
      in_place ? input.narrow_rows(r * count, (r + 1) * count) : stale(dtype, count, r);
  const ReduceScatterOptions opts{.reduce = {op, kPremulFactor}};
  if (!supported(dtype, op)) {
    expect_rejected(
        rep, call, config, [&] { return pg.reduce_scatter_tensor(output, input, opts); },
        names(dtype, op));
    return;
  }
  const Tensor before = input.clone();
  const auto work =
      run(rep, call, config, [&] { return pg.reduce_scatter_tensor(output, input, opts); });
  if (!work) return;
  expect_result(rep, call, *work, {output});
  expect_equal(rep, call, "the output", output, pattern.expected({count}, r * count));
  if (in_place) {
    expect_equal(rep, call, "the input's blocks before this rank's (must be unchanged)",
                 input.narrow_rows(0, r * count), before.narrow_rows(0, r * count));
    expect_equal(rep, call, "the input's blocks after this rank's (must be unchanged)",
                 input.narrow_rows((r + 1) * count, n * count),
                 before.narrow_rows((r + 1) * count, n * count));
  } else {
    expect_equal(rep, call, "the input (must be unchanged)", input, before);
  }
}

void all_reduce_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (std::int64_t count : config.counts) {
        for (bool view : {false, true}) all_reduce_once(pg, config, rep, dtype, op, count, view);
      }
    }
  }
}

void reduce_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (std::int64_t count : config.counts) {
        for (int root : roots(pg)) {
          for (bool view : {false, true}) {
            reduce_once(pg, config, rep, dtype, op, count, root, view);
          }
        }
      }
    }
  }
}

void reduce_scatter_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (std::int64_t count : config.counts) {
        for (bool in_place : {false, true}) {
          reduce_scatter_once(pg, config, rep, dtype, op, count, in_place);
        }
      }
    }
  }
}

void reduce_scatter_tensor_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (ReduceOp op : kAllReduceOps) {
      for (std::int64_t count : config.counts) {
        for (bool in_place : {false, true}) {
          reduce_scatter_tensor_once(pg, config, rep, dtype, op, count, in_place);
        }
      }
    }
  }
}

// Element g holds a NaN on rank (g / 5) mod n when g mod 5 == 2, so every rank contributes
// some; the reduction must be NaN exactly there, for all_reduce and for reduce at the last
// rank.
void nan_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  const Num nan{std::numeric_limits<double>::quiet_NaN(), 0};
  for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kFloat16, DType::kBFloat16}) {
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kProduct, ReduceOp::kMin, ReduceOp::kMax}) {
      for (std::int64_t count : config.counts) {
        if (count < 3) continue;
        const ReductionPattern pattern(dtype, op, n, pg.rank(), count);
        const Tensor t = Tensor::empty({count}, dtype);
        const Tensor u = Tensor::empty({count}, dtype);
        pattern.fill(t, 0);
        const Tensor want = pattern.expected({count}, 0);
        for (std::int64_t g = 2; g < count; g += 5) {
          if ((g / 5) % n == pg.rank()) put(t, g, nan);
          put(want, g, nan);
        }
        pattern.fill(u, 0);
        for (std::int64_t g = 2; g < count; g += 5) {
          if ((g / 5) % n == pg.rank()) put(u, g, nan);
        }
        const Call all{"all_reduce", dtype, op, count, -1, "NaN inputs"};
        const AllreduceOptions all_opts{.reduce = {op, kPremulFactor}};
        if (run(rep, all, config, [&] { return pg.all_reduce({t}, all_opts); })) {
          expect_equal(rep, all, "the tensor", t, want);
        }
        const Call one{"reduce", dtype, op, count, n - 1, "NaN inputs"};
        const ReduceOptions one_opts{.reduce = {op, kPremulFactor}, .root = n - 1};
        if (run(rep, one, config, [&] { return pg.reduce(u, one_opts); }) && pg.rank() == n - 1) {
          expect_equal(rep, one, "the root's tensor", u, want);
        }
      }
    }
  }
}

// all_reduce and broadcast take a list of tensors (as torch's one per device): each one is
// reduced or broadcast on its own, and result() hands back the whole list.
void tensor_lists_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  const int r = pg.rank();
  for (DType dtype : {DType::kFloat32, DType::kInt32}) {
    const Call call{"all_reduce", dtype, ReduceOp::kSum, 1000, -1, "a list of 3 tensors"};
    // Tensor k takes the pattern's global indices [k * 1000, (k + 1) * 1000), so the three
    // differ.
    const ReductionPattern pattern(dtype, ReduceOp::kSum, n, r, 3 * 1000);
    std::vector<Tensor> tensors;
    for (int k = 0; k < 3; ++k) {
      tensors.push_back(Tensor::empty({1000}, dtype));
      pattern.fill(tensors.back(), k * 1000);
    }
    if (const auto work = run(rep, call, config, [&] { return pg.all_reduce(tensors); })) {
      expect_result(rep, call, *work, tensors);
      for (int k = 0; k < 3; ++k) {
        expect_equal(rep, call, fmt::format("tensors[{}]", k), tensors[k],
                     pattern.expected({1000}, k * 1000));
      }
    }
  }
  for (int root : roots(pg)) {
    const Call call{"broadcast", DType::kInt64, std::nullopt, 7, root, "a list of 3 tensors"};
    std::vector<Tensor> tensors;
    for (int k = 0; k < 3; ++k) {
      tensors.push_back(key_tensor({7}, DType::kInt64, r == root ? 9500 + k : 9600 + r));
    }
    const auto work = run(rep, call, config,
                          [&] { return pg.broadcast(tensors, BroadcastOptions{.root = root}); });
    if (!work) continue;
    expect_result(rep, call, *work, tensors);
    for (int k = 0; k < 3; ++k) {
      expect_equal(rep, call, fmt::format("tensors[{}]", k), tensors[k],
                   key_tensor({7}, DType::kInt64, 9500 + k));
    }
  }
}

}  // namespace c10d::inline v1::conformance
