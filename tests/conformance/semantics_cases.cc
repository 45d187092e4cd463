// Behaviour beyond values: barrier, Work and Future semantics, issue order, subgroups, bad
// arguments, and a failing op.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "c10d/errors.h"
#include "cases.h"
#include "elements.h"

namespace c10d::inline v1::conformance {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

std::int64_t ms_since(Clock::time_point start) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start).count();
}

void barrier(ProcessGroup& pg, const Config& config, Reporter& rep, const std::string& why) {
  run(rep, {"barrier", std::nullopt, std::nullopt, -1, -1, why}, config,
      [&] { return pg.barrier(); });
}

// An int64 tensor of `count` elements, element j = a * (j + 1) + b.
Tensor affine(std::int64_t count, std::int64_t a, std::int64_t b) {
  Tensor t = Tensor::empty({count}, DType::kInt64);
  for (std::int64_t j = 0; j < count; ++j) t.data<std::int64_t>()[j] = a * (j + 1) + b;
  return t;
}

// Runs fn and expects it to throw an Error; records the failure otherwise. Answers the message.
template <typename Fn>
std::string expect_error(Reporter& rep, const Call& call, std::string_view what, Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    rep.pass();
    return e.what();
  } catch (const std::exception& e) {
    rep.fail(call, fmt::format("{} threw a non-c10d exception: {}", what, e.what()));
    return "";
  }
  rep.fail(call, fmt::format("{} did not throw", what));
  return "";
}

}  // namespace

// The last rank enters late; everyone else's barrier must last until it does. A second part
// issues barriers back to back and waits only for the last.
void barrier_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  barrier(pg, config, rep, "lining up");
  if (n >= 2) {
    constexpr auto kLate = 200ms;
    const std::string late = fmt::format("rank {} enters {} ms late", n - 1, kLate.count());
    const Call call{"barrier", std::nullopt, std::nullopt, -1, -1, late};
    if (pg.rank() == n - 1) std::this_thread::sleep_for(kLate);
    const auto start = Clock::now();
    if (run(rep, call, config, [&] { return pg.barrier(); }) && pg.rank() != n - 1) {
      const auto took = ms_since(start);
      // The ranks left the lining-up barrier within a few ms of each other.
      if (took < kLate.count() / 2) {
        rep.fail(call, fmt::format("the barrier returned after {} ms, before the last rank "
                                   "entered it",
                                   took));
      } else {
        rep.pass();
      }
    }
  }
  const Call call{"barrier", std::nullopt, std::nullopt, -1, -1, "8 back to back"};
  std::vector<std::shared_ptr<Work>> works;
  for (int k = 0; k < 8; ++k) {
    if (auto w = issue(rep, call, [&] { return pg.barrier(); })) works.push_back(w);
  }
  if (works.empty()) return;
  finish(rep, call, *works.back(), config);
  for (std::size_t k = 0; k + 1 < works.size(); ++k) {
    if (!works[k]->is_success()) {
      rep.fail(call,
               fmt::format("barrier {} is not complete when barrier {} is", k, works.size() - 1));
    }
  }
}

// Work::wait(timeout) past its deadline throws TimeoutError and the op goes on; a later
// wait() sees it complete. Future::then chains on the op's outputs.
void work_semantics_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  const int r = pg.rank();
  {
    const Call call{"all_reduce", DType::kInt64, ReduceOp::kSum, 7, -1, "future().then()"};
    const Tensor t = affine(7, r + 1, 0);
    if (const auto work = issue(rep, call, [&] { return pg.all_reduce({t}); })) {
      const auto chained = work->future()->then([](Future& f) { return f.value(); });
      finish(rep, call, *work, config);
      try {
        chained->wait(config.wait_timeout);
        const auto& value = chained->value();
        if (value.size() != 1 || value[0].raw_data() != t.raw_data()) {
          rep.fail(call, "then() did not see the op's output as the future's value");
        } else {
          rep.pass();
        }
      } catch (const std::exception& e) {
        rep.fail(call, fmt::format("the future made by then() failed: {}", e.what()));
      }
      expect_equal(rep, call, "the tensor", t, affine(7, n * (n + 1) / 2, 0));
    }
  }
  if (n < 2) return;
  // A collective its waiter gives up on while rank 0 is late: wait(50 ms) throws TimeoutError,
  // the op goes on (the MPI backend hands it from the waiter's thread to its worker) and a
  // later wait() sees the sum.
  barrier(pg, config, rep, "before the late all_reduce");
  {
    constexpr auto kLate = 300ms;
    const Call call{
        "all_reduce", DType::kInt64, ReduceOp::kSum, 5, -1, "wait(50 ms) while rank 0 is late"};
    if (r == 0) std::this_thread::sleep_for(kLate);
    const Tensor t = affine(5, r + 1, 0);
    if (const auto work = issue(rep, call, [&] { return pg.all_reduce({t}); })) {
      if (r != 0) {
        try {
          work->wait(50ms);
          rep.fail(call, "wait(50 ms) returned although rank 0 had not called yet");
        } catch (const TimeoutError&) {
          rep.pass();
        } catch (const std::exception& e) {
          rep.fail(call,
                   fmt::format("wait(50 ms) threw something else than TimeoutError: {}", e.what()));
        }
      }
      finish(rep, call, *work, config);
      expect_equal(rep, call, "the tensor", t, affine(5, n * (n + 1) / 2, 0));
    }
  }
  // A collective completed without Work::wait (its future only): the backend starts it on its
  // own.
  {
    const Call call{"all_reduce", DType::kInt64, ReduceOp::kSum, 3, -1, "future().wait() only"};
    const Tensor t = affine(3, r + 1, 0);
    if (const auto work = issue(rep, call, [&] { return pg.all_reduce({t}); })) {
      try {
        work->future()->wait(config.wait_timeout);
        rep.pass();
      } catch (const std::exception& e) {
        rep.fail(call, fmt::format("future().wait() threw: {}", e.what()));
      }
      expect_equal(rep, call, "the tensor", t, affine(3, n * (n + 1) / 2, 0));
    }
  }
  barrier(pg, config, rep, "before the pending recv");
  constexpr auto kLate = 300ms;
  const Call call{
      "recv", DType::kFloat32, std::nullopt, 5, 0, "tag 11, wait(50 ms) while the sender is late"};
  const Tensor sent = key_tensor({5}, DType::kFloat32, 1700);
  if (r == 0) {
    std::this_thread::sleep_for(kLate);
    run(rep, {"send", DType::kFloat32, std::nullopt, 5, 1, "tag 11, late"}, config,
        [&] { return pg.send({sent}, 1, {.tag = 11}); });
  } else if (r == 1) {
    const Tensor got = Tensor::empty({5}, DType::kFloat32);
    const auto work = issue(rep, call, [&] { return pg.recv({got}, 0, {.tag = 11}); });
    if (!work) return;
    try {
      work->wait(50ms);
      rep.fail(call, "wait(50 ms) returned although the sender had not sent yet");
    } catch (const TimeoutError&) {
      if (work->is_completed()) {
        rep.fail(call, "wait(50 ms) threw TimeoutError but the Work says it is completed");
      } else {
        rep.pass();
      }
    } catch (const std::exception& e) {
      rep.fail(call,
               fmt::format("wait(50 ms) threw something else than TimeoutError: {}", e.what()));
    }
    finish(rep, call, *work, config);
    expect_result(rep, call, *work, {got});
    expect_equal(rep, call, "the received tensor", got, sent);
  }
}

// Ops issued back to back without waiting: completion callbacks run in issue order, every
// earlier op is complete when the last is, sequence numbers increase, and values are right.
void in_order_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  const int r = pg.rank();
  constexpr int kOps = 15;
  // Callbacks run on the completing thread, possibly after wait() has returned, so the check
  // waits for all of them (bounded).
  // Shared with the callbacks, which may outlive this function when it ends early.
  struct Log {
    std::mutex mu;
    std::condition_variable cv;
    std::vector<int> completed;  // GUARDED_BY(mu)
  };
  const auto log = std::make_shared<Log>();
  std::vector<std::shared_ptr<Work>> works;
  std::vector<Call> calls;
  std::vector<Tensor> tensors;
  std::vector<Tensor> wants;
  for (int k = 0; k < kOps; ++k) {
    std::shared_ptr<Work> work;
    if (k % 3 == 0) {
      calls.push_back({"all_reduce", DType::kInt64, ReduceOp::kSum, 1000, -1,
                       fmt::format("op {} of {} back to back", k, kOps)});
      tensors.push_back(affine(1000, r + 1, k));
      wants.push_back(affine(1000, n * (n + 1) / 2, n * k));
      work = issue(rep, calls.back(), [&] { return pg.all_reduce({tensors.back()}); });
    } else if (k % 3 == 1) {
      const int root = k % n;
      calls.push_back({"broadcast", DType::kFloat32, std::nullopt, 1000, root,
                       fmt::format("op {} of {} back to back", k, kOps)});
      tensors.push_back(key_tensor({1000}, DType::kFloat32, 2000 + (r == root ? k : 100 + r)));
      wants.push_back(key_tensor({1000}, DType::kFloat32, 2000 + k));
      work = issue(rep, calls.back(),
                   [&] { return pg.broadcast({tensors.back()}, BroadcastOptions{.root = root}); });
    } else {
      calls.push_back({"all_gather_into_tensor", DType::kInt64, std::nullopt, 100, -1,
                       fmt::format("op {} of {} back to back", k, kOps)});
      const Tensor input = affine(100, 1, 1000 * (k * n + r));
      tensors.push_back(Tensor::empty({n * 100}, DType::kInt64));
      wants.push_back(Tensor::empty({n * 100}, DType::kInt64));
      for (int q = 0; q < n; ++q) {
        const Tensor block = affine(100, 1, 1000 * (k * n + q));
        std::copy_n(block.data<std::int64_t>(), 100, wants.back().data<std::int64_t>() + q * 100);
      }
      work = issue(rep, calls.back(),
                   [&] { return pg.all_gather_into_tensor(tensors.back(), input); });
    }
    if (!work) return;  // the failure is recorded; the other ranks go on and hang until timeout
    work->future()->add_callback([log, k](Future&) {
      {
        std::lock_guard lock(log->mu);
        log->completed.push_back(k);
      }
      log->cv.notify_all();
    });
    works.push_back(work);
  }
  finish(rep, calls.back(), *works.back(), config);
  for (int k = 0; k < kOps; ++k) {
    if (!works[k]->is_completed()) {
      rep.fail(calls[k], fmt::format("not complete when op {} (issued later) is", kOps - 1));
    }
  }
  for (int k = 0; k < kOps; ++k) finish(rep, calls[k], *works[k], config);
  {
    std::unique_lock lock(log->mu);
    log->cv.wait_for(lock, config.wait_timeout, [&] { return log->completed.size() >= kOps; });
    std::vector<int> in_order(kOps);
    for (int k = 0; k < kOps; ++k) in_order[k] = k;
    if (log->completed != in_order) {
      rep.fail(calls.back(), fmt::format("completion callbacks ran in the order {}, not in issue "
                                         "order",
                                         fmt::join(log->completed, " ")));
    } else {
      rep.pass();
    }
  }
  for (int k = 0; k + 1 < kOps; ++k) {
    if (works[k + 1]->sequence() <= works[k]->sequence()) {
      rep.fail(calls[k + 1], fmt::format("sequence {} does not follow the previous op's {}",
                                         works[k + 1]->sequence(), works[k]->sequence()));
    }
  }
  for (int k = 0; k < kOps; ++k) expect_equal(rep, calls[k], "the output", tensors[k], wants[k]);
}

// Subgroups of the odd ranks in reverse order, the even ranks, and all ranks reversed, each
// running collectives interleaved with the parent's, issued without waiting in between.
void subgroups_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  const int r = pg.rank();
  std::vector<int> odds, evens, reversed;
  for (int q = n - 1; q >= 0; --q) {
    if (q % 2 == 1) odds.push_back(q);
    reversed.push_back(q);
  }
  for (int q = 0; q < n; q += 2) evens.push_back(q);

  const auto make = [&](const std::vector<int>& ranks,
                        const std::string& name) -> std::shared_ptr<ProcessGroup> {
    const Call call{"new_group", std::nullopt, std::nullopt,
                    -1,          -1,           fmt::format("{} [{}]", name, fmt::join(ranks, " "))};
    rep.issued();
    std::shared_ptr<ProcessGroup> sub;
    try {
      sub = pg.new_group(ranks);
    } catch (const std::exception& e) {
      rep.fail(call, fmt::format("threw: {}", e.what()));
      throw StopRun(e.what());  // the ranks no longer agree on their groups
    }
    const auto at = std::find(ranks.begin(), ranks.end(), r);
    if (at == ranks.end()) {
      if (sub != nullptr) rep.fail(call, "a non-member got a group instead of nullptr");
      return nullptr;
    }
    if (sub == nullptr) {
      rep.fail(call, "a member got nullptr");
      throw StopRun("no subgroup");
    }
    const int want_rank = static_cast<int>(at - ranks.begin());
    if (sub->rank() != want_rank || sub->size() != static_cast<int>(ranks.size())) {
      rep.fail(call, fmt::format("the member is rank {} of {}, expected rank {} of {}", sub->rank(),
                                 sub->size(), want_rank, ranks.size()));
      throw StopRun("wrong subgroup ranks");
    }
    rep.pass();
    return sub;
  };
  const auto odd_group = odds.empty() ? nullptr : make(odds, "odd ranks, reversed");
  const auto even_group = make(evens, "even ranks");
  const auto reversed_group = make(reversed, "all ranks, reversed");
  const auto& mine = r % 2 == 1 ? odds : evens;
  ProcessGroup& sub = r % 2 == 1 ? *odd_group : *even_group;
  const int m = sub.size();

  // Parent all_reduce, subgroup all_reduce and broadcast, parent broadcast, all_gather on the
  // reversed group, point-to-point on the reversed group, parent barrier; issued without
  // waiting, then waited for in reverse order.
  std::vector<std::pair<Call, std::shared_ptr<Work>>> issued;
  const auto add = [&](const Call& call, const Issue& fn) {
    auto work = issue(rep, call, fn);
    if (work) issued.emplace_back(call, work);
    return work;
  };
  const std::string in_sub = fmt::format("subgroup [{}]", fmt::join(mine, " "));

  const Call parent_sum{"all_reduce", DType::kInt64, ReduceOp::kSum, 1000, -1, "parent"};
  const Tensor a = affine(1000, 1, 1000 * r);
  add(parent_sum, [&] { return pg.all_reduce({a}); });

  const Call sub_sum{"all_reduce", DType::kInt64, ReduceOp::kSum, 7, -1, in_sub};
  const Tensor b = affine(7, r + 1, 0);
  const auto w_sub_sum = add(sub_sum, [&] { return sub.all_reduce({b}); });

  const Call sub_bcast{"broadcast", DType::kFloat32, std::nullopt, 1000, m - 1, in_sub};
  const std::uint64_t sub_root_seed = 2500 + static_cast<std::uint64_t>(mine[m - 1]);
  const Tensor c = key_tensor({1000}, DType::kFloat32,
                              sub.rank() == m - 1 ? sub_root_seed : 2600 + std::uint64_t(r));
  const auto w_sub_bcast =
      add(sub_bcast, [&] { return sub.broadcast({c}, BroadcastOptions{.root = m - 1}); });

  const Call parent_bcast{"broadcast", DType::kBFloat16, std::nullopt, 100, n - 1, "parent"};
  const Tensor d = key_tensor({100}, DType::kBFloat16, r == n - 1 ? 2700 : 2800 + r);
  add(parent_bcast, [&] { return pg.broadcast({d}, BroadcastOptions{.root = n - 1}); });

  const Call rev_gather{"all_gather_into_tensor", DType::kInt32, std::nullopt, 7, -1,
                        "all ranks, reversed"};
  const Tensor gathered = Tensor::empty({n * 7}, DType::kInt32);
  const Tensor mine_in = key_tensor({7}, DType::kInt32, 2900 + static_cast<std::uint64_t>(r));
  add(rev_gather, [&] { return reversed_group->all_gather_into_tensor(gathered, mine_in); });

  // Rank 0 of the reversed group (parent rank n - 1) sends to its rank 1 (parent rank n - 2).
  const Call rev_send{"send", DType::kUInt8, std::nullopt, 9, 1, "all ranks reversed, tag 4"};
  const Call rev_recv{"recv", DType::kUInt8, std::nullopt, 9, 0, "all ranks reversed, tag 4"};
  const Tensor p2p = key_tensor({9}, DType::kUInt8, 3000);
  const Tensor p2p_got = Tensor::empty({9}, DType::kUInt8);
  if (n >= 2 && reversed_group->rank() == 0) {
    add(rev_send, [&] { return reversed_group->send({p2p}, 1, {.tag = 4}); });
  } else if (n >= 2 && reversed_group->rank() == 1) {
    add(rev_recv, [&] { return reversed_group->recv({p2p_got}, 0, {.tag = 4}); });
  }
  add({"barrier", std::nullopt, std::nullopt, -1, -1, "parent, after subgroup ops"},
      [&] { return pg.barrier(); });
  for (auto it = issued.rbegin(); it != issued.rend(); ++it) {
    finish(rep, it->first, *it->second, config);
  }

  expect_equal(rep, parent_sum, "the tensor", a, affine(1000, n, 1000 * n * (n - 1) / 2));
  std::int64_t member_sum = 0;
  for (int q : mine) member_sum += q + 1;
  expect_equal(rep, sub_sum, "the tensor", b, affine(7, member_sum, 0));
  expect_equal(rep, sub_bcast, "the tensor", c, key_tensor({1000}, DType::kFloat32, sub_root_seed));
  expect_equal(rep, parent_bcast, "the tensor", d, key_tensor({100}, DType::kBFloat16, 2700));
  const Tensor want = Tensor::empty({n * 7}, DType::kInt32);
  for (int s = 0; s < n; ++s) {  // block s comes from reversed rank s, parent rank n - 1 - s
    fill_key(want.narrow_rows(s * 7, (s + 1) * 7), 2900 + static_cast<std::uint64_t>(n - 1 - s));
  }
  expect_equal(rep, rev_gather, "the output (blocks in the subgroup's rank order)", gathered, want);
  if (n >= 2 && reversed_group->rank() == 1) {
    expect_equal(rep, rev_recv, "the received tensor", p2p_got, p2p);
  }
  // Sequence numbers are the subgroup's own: its two ops are consecutive there although the
  // parent issued ops in between.
  if (w_sub_sum && w_sub_bcast && w_sub_bcast->sequence() != w_sub_sum->sequence() + 1) {
    rep.fail(sub_bcast, fmt::format("subgroup sequence {} does not follow its previous op's {} "
                                    "(the parent's ops must not count)",
                                    w_sub_bcast->sequence(), w_sub_sum->sequence()));
  }
}

// Arguments no rank can run with: every rank must throw InvalidArgument from the call, and
// the group must stay in step (an all_reduce afterwards checks that).
void bad_arguments_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  const int r = pg.rank();
  const DType f32 = DType::kFloat32;
  const Tensor t = Tensor::empty({7}, f32);
  const Tensor big = Tensor::empty({n * 7 + 1}, f32);
  const auto bad = [&](std::string op, std::string what, const Issue& fn) {
    expect_rejected(rep, {std::move(op), f32, std::nullopt, 7, -1, std::move(what)}, config, fn);
  };
  bad("broadcast", "root = world size", [&] { return pg.broadcast({t}, {.root = n}); });
  bad("broadcast", "root -1", [&] { return pg.broadcast({t}, {.root = -1}); });
  bad("reduce", "root = world size", [&] { return pg.reduce(t, {.root = n}); });
  bad("gather", "root = world size", [&] { return pg.gather({}, t, {.root = n}); });
  bad("scatter", "root = world size", [&] { return pg.scatter(t, {}, {.root = n}); });
  bad("all_gather", "world size + 1 outputs", [&] {
    return pg.all_gather(std::vector<Tensor>(static_cast<std::size_t>(n + 1), t.clone()), t);
  });
  bad("all_gather_into_tensor", "output one element too long",
      [&] { return pg.all_gather_into_tensor(big, t); });
  bad("all_gather_into_tensor", "output of another dtype",
      [&] { return pg.all_gather_into_tensor(Tensor::empty({n * 7}, DType::kInt32), t); });
  bad("reduce_scatter_tensor", "input one element too long",
      [&] { return pg.reduce_scatter_tensor(t, big); });
  bad("all_to_all", "world size + 1 input split sizes", [&] {
    AllToAllOptions opts;
    opts.input_split_sizes.assign(static_cast<std::size_t>(n + 1), 0);
    return pg.all_to_all(Tensor::empty({0}, f32), Tensor::empty({0}, f32), opts);
  });
  bad("all_to_all", "split sizes that do not add up to the rows", [&] {
    AllToAllOptions opts;
    opts.input_split_sizes.assign(static_cast<std::size_t>(n), 1);
    opts.output_split_sizes.assign(static_cast<std::size_t>(n), 1);
    return pg.all_to_all(Tensor::empty({n + 1}, f32), Tensor::empty({n + 1}, f32), opts);
  });
  // Every rank would send n-row blocks into 2n-row blocks' room on its peers, or the reverse.
  bad("all_to_all", "no split sizes and an output twice the input",
      [&] { return pg.all_to_all(Tensor::empty({2 * n}, f32), Tensor::empty({n}, f32)); });
  bad("send", "to rank = world size", [&] { return pg.send({t}, n); });
  bad("recv", "from rank -1", [&] { return pg.recv({t}, -1); });

  const Call call{"all_reduce", DType::kInt64, ReduceOp::kSum, 7, -1, "after rejected calls"};
  const Tensor x = affine(7, r + 1, 0);
  if (run(rep, call, config, [&] { return pg.all_reduce({x}); })) {
    expect_equal(rep, call, "the tensor", x, affine(7, n * (n + 1) / 2, 0));
  }
}

// An op that fails: every rank waits, with a 300 ms timeout, for a message its next rank never
// sends. wait() and result() must rethrow the op's error (TimeoutError, or the NetworkError of
// a peer whose own failure closed the connection first), and the Work must say it failed. A
// failed op may abort the transport (TransportProcessGroup does, for the parent too), so this
// runs last. A group of one, which has no peer, aborts a subgroup and issues an op instead.
void errors_case(ProcessGroup& pg, const Config& config, Reporter& rep) {
  const int n = pg.size();
  const int r = pg.rank();
  // Every rank has finished every earlier op before any rank fails.
  barrier(pg, config, rep, "before the failing op");
  barrier(pg, config, rep, "before the failing op, twice");
  std::vector<int> all(static_cast<std::size_t>(n));
  for (int q = 0; q < n; ++q) all[q] = q;
  std::shared_ptr<ProcessGroup> sub;
  try {
    sub = pg.new_group(all);
  } catch (const std::exception& e) {
    rep.fail({"new_group", std::nullopt, std::nullopt, -1, -1, "all ranks"}, e.what());
    return;
  }
  const Tensor t = Tensor::empty({3}, DType::kFloat32);
  Call call;
  std::shared_ptr<Work> work;
  if (n >= 2) {
    const int peer = (r + 1) % n;
    call = {"recv", DType::kFloat32, std::nullopt, 3, peer, "tag 77, 300 ms timeout, no sender"};
    work = issue(rep, call,
                 [&] { return sub->recv({t}, peer, {.tag = 77, .timeout = Milliseconds(300)}); });
  } else {
    call = {"barrier", std::nullopt, std::nullopt, -1, -1, "after abort() of its group"};
    sub->abort();
    try {
      work = sub->barrier();
    } catch (const Error&) {
      rep.pass();  // failing at once is as good
      return;
    }
  }
  if (!work) return;
  expect_error(rep, call, "wait()", [&] { work->wait(config.wait_timeout); });
  if (!work->is_completed() || work->is_success() || work->exception() == nullptr) {
    rep.fail(call,
             fmt::format("after the failure: is_completed {} is_success {} exception {}",
                         work->is_completed(), work->is_success(), work->exception() != nullptr));
  }
  expect_error(rep, call, "result()", [&] { (void)work->result(); });
}

}  // namespace c10d::inline v1::conformance
