// The time model of the ICI backend, shared by the fabric (real bytes, one chip per rank) and
// the timing-only simulator (every chip in one process), so both give the same simulated times.
//
// Words used here:
//  - virtual time: seconds on a chip's simulated clock; every chip starts at 0.
//  - head / tail: the virtual times at which the first and the last byte of a message reach a
//    chip. A message posted at time t is at its source with head = tail = t.
//  - link: a directed link with a bandwidth (bytes per second, one way) and a latency (seconds
//    per hop). It carries one message at a time, each for bytes / bandwidth, so a busy link
//    delays the next message: that is how congestion shows.
//  - calendar: the link's busy intervals. A message is served first come, first served in
//    virtual time: it takes the earliest free interval that starts once its head is at the link
//    and is long enough for it, whatever order the messages were handed to the link in. (A link
//    that only appended would let a message reserved early for a late time block every message
//    that is ready before it.)
//  - crossing a link (virtual cut-through): a message starts once its head has reached the
//    link's chip and the link is free, and cannot finish before its tail has arrived. Its head
//    reaches the next chip `latency` after it started, its tail `latency` after it finished. A
//    message of b bytes over k idle hops thus arrives k * latency + b / bandwidth after it was
//    posted, and a send completes (its buffer may be reused) when it has left the first link.
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace c10d::inline v1::tpu_ici {

struct MessageTimes {
  double head = 0;
  double tail = 0;
};

// One directed link's calendar and counters. Not thread-safe: one owner (the chip it leaves,
// or the simulator).
class LinkClock {
 public:
  // Hands the link a message of `bytes` arriving as `in`; returns it at the next chip.
  // last_finish() is then when it left this link.
  MessageTimes cross(double bandwidth, double latency, std::uint64_t bytes, MessageTimes in);

  // Drops the intervals that end before `t`: no message will ask for time before it.
  void forget_before(double t);

  double last_finish() const { return last_finish_; }
  double busy_seconds() const { return busy_; }
  std::uint64_t bytes() const { return bytes_; }
  std::uint64_t messages() const { return messages_; }

  // The calendar keeps at most this many intervals; the oldest go first (a message may then
  // take time the link had already given away, long ago).
  static constexpr std::size_t kMaxIntervals = 4096;

 private:
  std::vector<std::pair<double, double>> busy_intervals_;  // sorted, disjoint
  double last_finish_ = 0;
  double busy_ = 0;
  std::uint64_t bytes_ = 0;
  std::uint64_t messages_ = 0;
};

}  // namespace c10d::inline v1::tpu_ici
