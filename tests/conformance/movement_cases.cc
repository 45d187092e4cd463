// The data-movement ops: broadcast, all_gather, all_gather_into_tensor, all_to_all (equal and
// split sizes), gather, scatter, send/recv. They carry key patterns (elements.h); a seed names
// whose data a tensor holds, so an expected tensor is built from the seeds of the ranks it
// should have come from. Outputs start out holding another pattern, so an op that writes
// nothing is caught.
#include <fmt/format.h>

#include <memory>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "cases.h"
#include "elements.h"

namespace c10d::inline v1::conformance {
namespace {

// Seeds: one range per op, plus the rank whose data it is.
constexpr std::uint64_t kBroadcastSeed = 1000;
constexpr std::uint64_t kGatherSeed = 1100;
constexpr std::uint64_t kAllToAllSeed = 1200;
constexpr std::uint64_t kScatterSeed = 1300;
constexpr std::uint64_t kSendSeed = 1400;
constexpr std::uint64_t kSendSeed2 = 1500;
constexpr std::uint64_t kAnySourceSeed = 1600;
constexpr std::uint64_t kAnySourceSeed2 = 1700;
constexpr std::uint64_t kStaleSeed = 9100;

std::uint64_t seed(std::uint64_t base, int rank) { return base + static_cast<std::uint64_t>(rank); }

Tensor stale(DType dtype, std::vector<std::int64_t> shape, int rank) {
  return key_tensor(std::move(shape), dtype, seed(kStaleSeed, rank));
}

const char* placement(bool in_place) { return in_place ? "in-place" : "out-of-place"; }

// Rows rank `src` sends to rank `dst` in all_to_all_split_once.
std::int64_t split_rows(int src, int dst, std::int64_t unit) {
  return ((src + 2 * dst + 1) % 3) * unit;
}

}  // namespace

void broadcast_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                    std::int64_t count, int root, bool view) {
  const Call call{"broadcast", dtype, std::nullopt, count, root, view ? "view" : "plain"};
  Guarded g;
  Tensor t;
  if (view) {
    g = Guarded::make(dtype, count, seed(kStaleSeed, pg.rank()));
    t = g.view;
  } else {
    t = stale(dtype, {count}, pg.rank());
  }
  if (pg.rank() == root) fill_key(t, seed(kBroadcastSeed, root));
  const auto work =
      run(rep, call, config, [&] { return pg.broadcast({t}, BroadcastOptions{.root = root}); });
  if (!work) return;
  expect_result(rep, call, *work, {t});
  expect_equal(rep, call, "the tensor", t, key_tensor({count}, dtype, seed(kBroadcastSeed, root)));
  if (view) g.expect_guards(rep, call);
}

void all_gather_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                     std::int64_t count, bool in_place) {
  const Call call{"all_gather", dtype, std::nullopt, count, -1, placement(in_place)};
  const Tensor input = key_tensor({count}, dtype, seed(kGatherSeed, pg.rank()));
  const Tensor before = input.clone();
  std::vector<Tensor> outputs;
  for (int q = 0; q < pg.size(); ++q) {
    outputs.push_back(in_place && q == pg.rank() ? input : stale(dtype, {count}, pg.rank()));
  }
  const auto work = run(rep, call, config, [&] { return pg.all_gather(outputs, input); });
  if (!work) return;
  expect_result(rep, call, *work, outputs);
  for (int q = 0; q < pg.size(); ++q) {
    expect_equal(rep, call, fmt::format("outputs[{}]", q), outputs[q],
                 key_tensor({count}, dtype, seed(kGatherSeed, q)));
  }
  if (!in_place) expect_equal(rep, call, "the input (must be unchanged)", input, before);
}

void all_gather_into_tensor_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                                 std::int64_t count, bool in_place) {
  const Call call{"all_gather_into_tensor", dtype, std::nullopt, count, -1, placement(in_place)};
  const int n = pg.size();
  const int r = pg.rank();
  const Tensor output = stale(dtype, {n * count}, r);
  const Tensor input =
      in_place ? output.narrow_rows(r * count, (r + 1) * count) : Tensor::empty({count}, dtype);
  fill_key(input, seed(kGatherSeed, r));
  const Tensor before = input.clone();
  const auto work =
      run(rep, call, config, [&] { return pg.all_gather_into_tensor(output, input); });
  if (!work) return;
  expect_result(rep, call, *work, {output});
  const Tensor want = Tensor::empty({n * count}, dtype);
  for (int q = 0; q < n; ++q) {
    fill_key(want.narrow_rows(q * count, (q + 1) * count), seed(kGatherSeed, q));
  }
  expect_equal(rep, call, "the output", output, want);
  if (!in_place) expect_equal(rep, call, "the input (must be unchanged)", input, before);
}

void all_to_all_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                     std::int64_t count) {
  const Call call{"all_to_all", dtype, std::nullopt, count, -1, "equal splits"};
  const int n = pg.size();
  const int r = pg.rank();
  // Element j of rank s's input is key(s, j): block d (elements [d count, (d+1) count)) goes
  // to rank d.
  const Tensor input = key_tensor({n * count}, dtype, seed(kAllToAllSeed, r));
  const Tensor before = input.clone();
  const Tensor output = stale(dtype, {n * count}, r);
  const auto work = run(rep, call, config, [&] { return pg.all_to_all(output, input); });
  if (!work) return;
  expect_result(rep, call, *work, {output});
  const Tensor want = Tensor::empty({n * count}, dtype);
  for (int s = 0; s < n; ++s) {
    fill_key(want.narrow_rows(s * count, (s + 1) * count), seed(kAllToAllSeed, s), r * count);
  }
  expect_equal(rep, call, "the output", output, want);
  expect_equal(rep, call, "the input (must be unchanged)", input, before);
}

void all_to_all_split_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                           std::int64_t unit) {
  const Call call{"all_to_all", dtype, std::nullopt, unit, -1, "split sizes, rows of 3"};
  constexpr std::int64_t kCols = 3;
  const int n = pg.size();
  const int r = pg.rank();
  AllToAllOptions opts;
  for (int q = 0; q < n; ++q) {
    opts.input_split_sizes.push_back(split_rows(r, q, unit));
    opts.output_split_sizes.push_back(split_rows(q, r, unit));
  }
  const auto sum = [](const std::vector<std::int64_t>& v) {
    return std::accumulate(v.begin(), v.end(), std::int64_t{0});
  };
  const Tensor input =
      key_tensor({sum(opts.input_split_sizes), kCols}, dtype, seed(kAllToAllSeed, r));
  const Tensor before = input.clone();
  const Tensor output = stale(dtype, {sum(opts.output_split_sizes), kCols}, r);
  const auto work = run(rep, call, config, [&] { return pg.all_to_all(output, input, opts); });
  if (!work) return;
  expect_result(rep, call, *work, {output});
  // Rank s's rows for this rank start after the rows it sends to ranks 0..r-1.
  const Tensor want = Tensor::empty(output.shape(), dtype);
  std::int64_t at = 0;
  for (int s = 0; s < n; ++s) {
    std::int64_t offset = 0;
    for (int d = 0; d < r; ++d) offset += split_rows(s, d, unit);
    const std::int64_t rows = split_rows(s, r, unit);
    fill_key(want.narrow_rows(at, at + rows), seed(kAllToAllSeed, s), offset * kCols);
    at += rows;
  }
  expect_equal(rep, call, "the output", output, want);
  expect_equal(rep, call, "the input (must be unchanged)", input, before);
}

void gather_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                 std::int64_t count, int root, bool in_place) {
  const Call call{"gather", dtype, std::nullopt, count, root, placement(in_place)};
  const int r = pg.rank();
  const Tensor input = key_tensor({count}, dtype, seed(kGatherSeed, r));
  const Tensor before = input.clone();
  std::vector<Tensor> outputs;
  if (r == root) {
    for (int q = 0; q < pg.size(); ++q) {
      outputs.push_back(in_place && q == root ? input : stale(dtype, {count}, r));
    }
  }
  const auto work = run(rep, call, config,
                        [&] { return pg.gather(outputs, input, GatherOptions{.root = root}); });
  if (!work) return;
  if (r == root) {
    expect_result(rep, call, *work, outputs);
    for (int q = 0; q < pg.size(); ++q) {
      expect_equal(rep, call, fmt::format("outputs[{}]", q), outputs[q],
                   key_tensor({count}, dtype, seed(kGatherSeed, q)));
    }
  }
  if (!(in_place && r == root)) {
    expect_equal(rep, call, "the input (must be unchanged)", input, before);
  }
}

void scatter_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                  std::int64_t count, int root, bool in_place) {
  const Call call{"scatter", dtype, std::nullopt, count, root, placement(in_place)};
  const int r = pg.rank();
  const Tensor output = stale(dtype, {count}, r);
  std::vector<Tensor> inputs;
  std::vector<Tensor> before;
  if (r == root) {
    for (int q = 0; q < pg.size(); ++q) {
      inputs.push_back(in_place && q == root ? output : Tensor::empty({count}, dtype));
      fill_key(inputs.back(), seed(kScatterSeed, q));
      before.push_back(inputs.back().clone());
    }
  }
  const auto work = run(rep, call, config,
                        [&] { return pg.scatter(output, inputs, ScatterOptions{.root = root}); });
  if (!work) return;
  expect_result(rep, call, *work, {output});
  expect_equal(rep, call, "the output", output, key_tensor({count}, dtype, seed(kScatterSeed, r)));
  for (std::size_t q = 0; q < inputs.size(); ++q) {
    if (in_place && static_cast<int>(q) == root) continue;
    expect_equal(rep, call, fmt::format("inputs[{}] (must be unchanged)", q), inputs[q], before[q]);
  }
}

void send_recv_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                    std::int64_t count) {
  const int n = pg.size();
  const int r = pg.rank();
  const int next = (r + 1) % n;
  const int prev = (r + n - 1) % n;
  const Tensor a = key_tensor({count}, dtype, seed(kSendSeed, r));
  const Tensor b = key_tensor({count}, dtype, seed(kSendSeed2, r));
  const Tensor got_a = stale(dtype, {count}, r);
  const Tensor got_b = stale(dtype, {count}, r);
  const Call recv2{"recv", dtype, std::nullopt, count, prev, "tag 2, posted before tag 1"};
  const Call recv1{"recv", dtype, std::nullopt, count, prev, "tag 1, posted after tag 2"};
  const Call send1{"send", dtype, std::nullopt, count, next, "tag 1"};
  const Call send2{"send", dtype, std::nullopt, count, next, "tag 2"};
  // Every rank posts both receives before either send: a backend that ran point-to-point ops
  // one at a time in issue order would deadlock here, and one that matched by order instead of
  // by tag would swap the tensors.
  const auto w_recv2 = issue(rep, recv2, [&] { return pg.recv({got_b}, prev, {.tag = 2}); });
  const auto w_recv1 = issue(rep, recv1, [&] { return pg.recv({got_a}, prev, {.tag = 1}); });
  const auto w_send1 = issue(rep, send1, [&] { return pg.send({a}, next, {.tag = 1}); });
  const auto w_send2 = issue(rep, send2, [&] { return pg.send({b}, next, {.tag = 2}); });
  if (w_recv2) finish(rep, recv2, *w_recv2, config);
  if (w_recv1) finish(rep, recv1, *w_recv1, config);
  if (w_send1) finish(rep, send1, *w_send1, config);
  if (w_send2) finish(rep, send2, *w_send2, config);
  if (w_recv2) {
    expect_result(rep, recv2, *w_recv2, {got_b});
    expect_equal(rep, recv2, "the received tensor", got_b,
                 key_tensor({count}, dtype, seed(kSendSeed2, prev)));
  }
  if (w_recv1) {
    expect_result(rep, recv1, *w_recv1, {got_a});
    expect_equal(rep, recv1, "the received tensor", got_a,
                 key_tensor({count}, dtype, seed(kSendSeed, prev)));
  }
  if (w_send1)
    expect_equal(rep, send1, "the sent tensor (must be unchanged)", a,
                 key_tensor({count}, dtype, seed(kSendSeed, r)));
}

void recv_any_source_once(ProcessGroup& pg, const Config& config, Reporter& rep, DType dtype,
                          std::int64_t count, int tag) {
  const int n = pg.size();
  const int r = pg.rank();
  const std::string variant = fmt::format("tag {}, from every other rank", tag);
  if (r != 0) {
    const Tensor mine = key_tensor({count}, dtype, seed(kAnySourceSeed, r));
    run(rep, {"send", dtype, std::nullopt, count, 0, variant}, config,
        [&] { return pg.send({mine}, 0, {.tag = tag}); });
    return;
  }
  const Call call{"recv_any_source", dtype, std::nullopt, count, -1, variant};
  std::vector<Tensor> got;
  std::vector<std::shared_ptr<Work>> works;
  for (int i = 1; i < n; ++i) {
    got.push_back(stale(dtype, {count}, r));
    works.push_back(
        issue(rep, call, [&] { return pg.recv_any_source({got.back()}, {.tag = tag}); }));
  }
  std::vector<int> seen(static_cast<std::size_t>(n), 0);
  for (std::size_t i = 0; i < works.size(); ++i) {
    if (!works[i]) continue;
    finish(rep, call, *works[i], config);
    expect_result(rep, call, *works[i], {got[i]});
    int from = -1;
    try {
      from = works[i]->source_rank();
    } catch (const Error& e) {
      rep.fail(call, fmt::format("source_rank() threw: {}", e.what()));
      continue;
    }
    if (from < 1 || from >= n || seen[static_cast<std::size_t>(from)]++ != 0) {
      rep.fail(call, fmt::format("source_rank() is {}: not a sender, or one received twice", from));
      continue;
    }
    rep.pass();
    expect_equal(rep, call, fmt::format("the tensor from rank {}", from), got[i],
                 key_tensor({count}, dtype, seed(kAnySourceSeed, from)));
  }
}

// Every other rank sends rank 0 a tensor per dtype and count, each round on a tag of its own;
// rank 0's recv_any_source calls, all posted first, take each sender exactly once, and each
// Work's source_rank() names the sender whose data it holds. Then rank 1's two tensors on one tag
// go to rank 0's recv_any_source and recv(1), posted in that order, in that order (recv's Work
// names rank 1 too). Two tensors, or a group of one (nobody could send), are rejected.
void recv_any_source_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  const int r = pg.rank();
  const Tensor one = Tensor::empty({3}, DType::kFloat32);
  if (n < 2) {
    expect_rejected(rep, {"recv_any_source", DType::kFloat32, std::nullopt, 3, -1, "group of one"},
                    config, [&] { return pg.recv_any_source({one}, {.tag = 1}); },
                    {"recv_any_source"});
    return;
  }
  expect_rejected(rep, {"recv_any_source", DType::kFloat32, std::nullopt, 3, -1, "two tensors"},
                  config,
                  [&] {
                    return pg.recv_any_source({one, one}, {.tag = 1});
                  },
                  {"recv_any_source", "one tensor"});
  int tag = 100;
  for (DType dtype : {DType::kFloat32, DType::kInt8}) {
    for (std::int64_t count : config.counts)
      recv_any_source_once(pg, config, rep, dtype, count, tag++);
  }
  constexpr std::int64_t kCount = 7;
  if (r == 1) {
    const Tensor x = key_tensor({kCount}, DType::kInt32, seed(kAnySourceSeed, 1));
    const Tensor y = key_tensor({kCount}, DType::kInt32, seed(kAnySourceSeed2, 1));
    const Call send{"send", DType::kInt32, std::nullopt, kCount, 0, "tag 30, two in a row"};
    const auto w_x = issue(rep, send, [&] { return pg.send({x}, 0, {.tag = 30}); });
    const auto w_y = issue(rep, send, [&] { return pg.send({y}, 0, {.tag = 30}); });
    if (w_x) finish(rep, send, *w_x, config);
    if (w_y) finish(rep, send, *w_y, config);
  } else if (r == 0) {
    const Tensor a = stale(DType::kInt32, {kCount}, r);
    const Tensor b = stale(DType::kInt32, {kCount}, r);
    const Call any{"recv_any_source",
                   DType::kInt32,
                   std::nullopt,
                   kCount,
                   -1,
                   "tag 30, posted before a recv from rank 1"};
    const Call from1{
        "recv", DType::kInt32, std::nullopt, kCount, 1, "tag 30, posted after a recv_any_source"};
    const auto w_any = issue(rep, any, [&] { return pg.recv_any_source({a}, {.tag = 30}); });
    const auto w_from1 = issue(rep, from1, [&] { return pg.recv({b}, 1, {.tag = 30}); });
    if (w_any) finish(rep, any, *w_any, config);
    if (w_from1) finish(rep, from1, *w_from1, config);
    for (const auto& [call, work] : {std::pair{any, w_any}, std::pair{from1, w_from1}}) {
      if (!work) continue;
      try {
        if (work->source_rank() != 1) {
          rep.fail(call, fmt::format("source_rank() is {}, not 1", work->source_rank()));
        } else {
          rep.pass();
        }
      } catch (const Error& e) {
        rep.fail(call, fmt::format("source_rank() threw: {}", e.what()));
      }
    }
    if (w_any) {
      expect_equal(rep, any, "the first tensor rank 1 sent", a,
                   key_tensor({kCount}, DType::kInt32, seed(kAnySourceSeed, 1)));
    }
    if (w_from1) {
      expect_equal(rep, from1, "the second tensor rank 1 sent", b,
                   key_tensor({kCount}, DType::kInt32, seed(kAnySourceSeed2, 1)));
    }
  }
}

void broadcast_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : config.counts) {
      for (int root : roots(pg)) {
        for (bool view : {false, true}) broadcast_once(pg, config, rep, dtype, count, root, view);
      }
    }
  }
}

void all_gather_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : config.counts) {
      for (bool in_place : {false, true}) all_gather_once(pg, config, rep, dtype, count, in_place);
    }
  }
}

void all_gather_into_tensor_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : config.counts) {
      for (bool in_place : {false, true}) {
        all_gather_into_tensor_once(pg, config, rep, dtype, count, in_place);
      }
    }
  }
}

void all_to_all_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : config.counts) all_to_all_once(pg, config, rep, dtype, count);
  }
}

void all_to_all_split_sizes_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : config.counts) all_to_all_split_once(pg, config, rep, dtype, count);
  }
}

void gather_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : config.counts) {
      for (int root : roots(pg)) {
        for (bool in_place : {false, true}) {
          gather_once(pg, config, rep, dtype, count, root, in_place);
        }
      }
    }
  }
}

void scatter_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : config.counts) {
      for (int root : roots(pg)) {
        for (bool in_place : {false, true}) {
          scatter_once(pg, config, rep, dtype, count, root, in_place);
        }
      }
    }
  }
}

void send_recv_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  if (pg.size() < 2) return;  // a rank does not send to itself
  for (DType dtype : kAllDTypes) {
    for (std::int64_t count : config.counts) send_recv_once(pg, config, rep, dtype, count);
  }
  // Two tensors of different dtypes and sizes in one send, to the next rank on tag 3.
  const int n = pg.size();
  const int r = pg.rank();
  const int prev = (r + n - 1) % n;
  const Call recv{"recv", std::nullopt, std::nullopt, -1, prev, "two tensors, tag 3"};
  const Call send{"send", std::nullopt, std::nullopt, -1, (r + 1) % n, "two tensors, tag 3"};
  const Tensor x = key_tensor({5}, DType::kFloat64, seed(kSendSeed, r));
  const Tensor y = key_tensor({9}, DType::kInt8, seed(kSendSeed2, r));
  const Tensor got_x = stale(DType::kFloat64, {5}, r);
  const Tensor got_y = stale(DType::kInt8, {9}, r);
  const auto w_recv = issue(rep, recv, [&] { return pg.recv({got_x, got_y}, prev, {.tag = 3}); });
  const auto w_send = issue(rep, send, [&] { return pg.send({x, y}, (r + 1) % n, {.tag = 3}); });
  if (w_recv) finish(rep, recv, *w_recv, config);
  if (w_send) finish(rep, send, *w_send, config);
  if (w_recv) {
    expect_result(rep, recv, *w_recv, {got_x, got_y});
    expect_equal(rep, recv, "the first tensor", got_x,
                 key_tensor({5}, DType::kFloat64, seed(kSendSeed, prev)));
    expect_equal(rep, recv, "the second tensor", got_y,
                 key_tensor({9}, DType::kInt8, seed(kSendSeed2, prev)));
  }
}

}  // namespace c10d::inline v1::conformance
