// Transport: the seam between collective algorithms and the wires that carry their bytes.
//
// An algorithm sees ranks and byte spans, never sockets: it posts tagged isend/irecv requests to
// peers and waits on them. Backends implement this over TCP (src/backends/gloo_like), over the
// simulated torus (src/backends/tpu_ici), or between threads of one process (inproc_transport.h,
// for tests).
//
// Matching: a receive from peer P with tag T takes the oldest unmatched send from P to this rank
// with tag T (messages between a pair with one tag never overtake each other, as in MPI). The
// receive buffer's size must equal the send's; a mismatch fails the receive with an
// InvalidArgument that names the peer, the tag and both sizes (and the send too, where the
// transport still can: in-process it does, over TCP the send has completed when it was written).
//
// Buffers: neither side copies on posting. A send's span must stay valid and unchanged, and a
// receive's span untouched, until the request completes (or the transport is aborted).
//
// Errors and deadlines: wait() takes an absolute deadline and throws TimeoutError naming the
// peer, the direction, the tag and the bytes; a peer that is gone (or an abort()) fails every
// pending and later request with the NetworkError the backend raised, naming that peer. Nothing
// blocks without a deadline.
//
// Thread-safety: isend/irecv/abort may be called from any thread; one Request is waited on by
// one thread at a time.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>

namespace c10d::transport {

using Clock = std::chrono::steady_clock;

// A message tag. Collectives use make_tag(group, sequence) so concurrent ops and subgroups
// never mix their bytes; point-to-point user tags live in their own space (user_tag).
using Tag = std::uint64_t;

inline constexpr Tag kUserTagBit = Tag{1} << 63;

// Group ids take the top 23 bits below the user bit, sequence numbers the low 40.
constexpr Tag make_tag(std::uint32_t group, std::uint64_t sequence) {
  return (static_cast<Tag>(group & 0x7fffff) << 40) | (sequence & ((Tag{1} << 40) - 1));
}
constexpr Tag user_tag(std::uint32_t group, std::uint32_t tag) {
  return kUserTagBit | (static_cast<Tag>(group & 0x7fffff) << 40) | tag;
}
// Group ids stay below kMaxGroups; the bit above them marks a group's control messages (the
// DETAIL fingerprint exchange), so they never match the op they check.
inline constexpr std::uint32_t kMaxGroups = 1u << 22;
constexpr Tag control_tag(std::uint32_t group, std::uint64_t sequence) {
  return make_tag(group | kMaxGroups, sequence);
}

std::string tag_string(Tag tag);  // "group 3 seq 17" or "group 3 user tag 5"

class Request {
 public:
  virtual ~Request() = default;
  // True once the request completed; rethrows its error. Never blocks.
  virtual bool test() = 0;
  // Blocks until completion; throws the request's error, or TimeoutError at the deadline (the
  // request stays pending and may still be waited on).
  virtual void wait(Clock::time_point deadline) = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  virtual std::unique_ptr<Request> isend(int peer, Tag tag, std::span<const std::byte> data) = 0;
  virtual std::unique_ptr<Request> irecv(int peer, Tag tag, std::span<std::byte> data) = 0;

  // Fails every pending and later request of this rank with `reason`, and releases every
  // waiter. Idempotent: the first reason sticks.
  virtual void abort(std::exception_ptr reason) = 0;
};

// Waits for every request in order, each against the same deadline.
void wait_all(std::span<const std::unique_ptr<Request>> requests, Clock::time_point deadline);

}  // namespace c10d::transport
