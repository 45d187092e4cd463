// OpRecord: what a group knows of one op from its call to its end: what the call asked for (op,
// sequence number, dtype, count, root or peer, reduce op) and how far the op got (queued,
// started, completed or failed), with when it got there. OpRunner (op_runner.h) moves every op
// of the TCP, ICI and MPI groups through these states, so a flight recorder (a per-group ring of
// the last ops' records, dumped when a job hangs) needs code in one place only.
//
// Cost: a call fills its record with plain stores (no lookup, no allocation); `state` is one byte
// stored with release order (a plain store on x86). The timestamps are read only when the group
// asks (OpRunner::Options::stamp_times: the flight recorder is on), and then from the coarse
// monotonic clock (core::coarse_now: about 6 ns against 30 for steady_clock on these guests, in
// ticks of 1-4 ms, plenty to tell which op a hung rank sat in).
//
// Thread-safety: each transition is written by the thread that makes it (the caller queues, the
// worker or a waiter starts, whoever completes the op ends it). A reader on another thread loads
// state() first and reads only what that state has published (started: `started`; completed or
// failed: `ended`).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string_view>

#include "c10d/tensor.h"
#include "c10d/types.h"
#include "core/coarse_clock.h"

namespace c10d::inline v1::backends {

struct OpRecord {
  using Clock = std::chrono::steady_clock;
  enum class State : std::uint8_t { kQueued, kStarted, kCompleted, kFailed };
  static constexpr std::uint8_t kNone = 0xff;  // dtype, reduce_op: none
  static constexpr std::size_t kMaxDims = 4;

  std::string_view op;         // a string literal: "all_reduce", "send", ...
  std::uint64_t sequence = 0;  // set when queued; collectives and point-to-point count apart
  std::int64_t count = -1;     // elements; -1: none, or not one number (all_to_all's splits)
  std::int32_t rank = -1;      // a rooted collective's root, a send's or recv's peer; -1: none
                               // (recv_any_source: any)
  std::uint8_t dtype = kNone;
  std::uint8_t reduce_op = kNone;
  bool collective = true;
  // The shape of the tensor the record was made from (of, point_to_point): its first dims, the
  // last of them the product of any beyond kMaxDims.
  std::uint8_t dims = 0;
  std::array<std::int64_t, kMaxDims> shape{};
  bool timed = false;                     // the timestamps are read (set when queued)
  mutable State state_ = State::kQueued;  // read with state(), written by move_to()
  Clock::time_point queued{}, started{}, ended{};

  // A collective on tensors of `t`'s dtype.
  static OpRecord of(std::string_view op, const Tensor& t, std::optional<ReduceOp> reduce_op,
                     int root, std::int64_t count) {
    OpRecord r;
    r.op = op;
    r.dtype = static_cast<std::uint8_t>(t.dtype());
    if (reduce_op) r.reduce_op = static_cast<std::uint8_t>(*reduce_op);
    r.rank = root;
    r.count = count;
    if (t.defined()) {
      const auto& s = t.shape();
      r.dims = static_cast<std::uint8_t>(std::min(s.size(), kMaxDims));
      for (std::size_t i = 0; i < s.size(); ++i) {
        const std::size_t d = std::min(i, kMaxDims - 1);
        r.shape[d] = i > d ? r.shape[d] * s[i] : s[i];
      }
    }
    return r;
  }
  // A send or receive of `count` elements of `t`'s dtype with `peer`.
  static OpRecord point_to_point(std::string_view op, const Tensor& t, int peer,
                                 std::int64_t count) {
    OpRecord r = of(op, t, std::nullopt, peer, count);
    r.collective = false;
    return r;
  }

  State state() const { return std::atomic_ref(state_).load(std::memory_order_acquire); }
  // A transition (OpRunner and RunnerOp make them).
  void move_to(State s) {
    if (timed) (s == State::kStarted ? started : ended) = core::coarse_now();
    std::atomic_ref(state_).store(s, std::memory_order_release);
  }
};

}  // namespace c10d::inline v1::backends
