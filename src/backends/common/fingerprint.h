// Fingerprints of collective calls, for C10D_DEBUG=DETAIL.
//
// Before each collective, the ranks of a group all-gather a 32-byte fingerprint of their call
// (op, dtype, count, root, reduce op, sequence number) and compare every rank's with rank 0's.
// On a mismatch every rank fails that op with the same InvalidArgument, naming rank 0's call
// and each differing rank's, instead of hanging in mismatched collectives or returning garbage.
// The backends differ only in how they all-gather (the transport's control tag; MPI_Allgather).
//
// Wire layout, little-endian, 32 bytes:
//
//   0      1      2          3    4          8             16              32
//   +------+------+----------+----+----------+-------------+---------------+
//   | op   |dtype | reduce op| 0  | root i32 | count i64   | sequence u64  |
//   +------+------+----------+----+----------+-------------+---------------+
//   dtype and reduce op 0xff: none; root -1: none; count -1: not compared.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "backends/common/op_record.h"
#include "c10d/tensor.h"
#include "c10d/types.h"
#include "transport/transport.h"

namespace c10d::inline v1::backends {

// C10D_DEBUG=DETAIL in the environment.
bool detail_from_env();

struct Fingerprint {
  static constexpr std::size_t kBytes = 32;
  std::uint8_t op_id = 0;  // index in the op table (fingerprint.cc); 0: unknown
  std::uint8_t dtype = 0xff;
  std::uint8_t reduce_op = 0xff;
  std::int32_t root = -1;
  std::int64_t count = -1;
  std::uint64_t sequence = 0;
  // all_to_all called with split sizes: the MPI backend calls MPI_Alltoallv then, MPI_Alltoall
  // without, and MPI cannot match the two, so there every rank must pass them alike.
  bool split_sizes = false;

  // The call `r` records (OpRecord::of), with its sequence number.
  static Fingerprint of(const OpRecord& r);
  void set_op(std::string_view op);
  std::array<std::byte, kBytes> encode() const;
};

// "all_reduce(float32, count 1048576, sum) #0"
std::string describe_fingerprint(std::span<const std::byte, Fingerprint::kBytes> bytes);

// A call in 64 bits: op, dtype, reduce op, root (its low 16 bits) and the count's low 35 bits
// (not the sequence number: the op's tag carries that); never 0 for a collective (its op id is 1
// or more).
// Whatever C10D_DEBUG says, every message of a collective carries its op's (transport.h: Calls),
// and a collective whose ranks' bytes meet without a message (shared slots) compares these, so
// ranks that call different collectives, or one with other sizes, dtypes, reductions or roots,
// fail at no extra cost. (A rooted op's ranks that only send learn of it through its entry
// check: algorithms/entry_check.h.)
std::uint64_t pack_call(const Fingerprint& fp);
// "all_reduce(float32, count 2, sum)", "broadcast(float32, count 2, root 0)" for what pack_call
// packed.
std::string describe_call(std::uint64_t packed);
// What a group's error says of `m`, a message of another call that met one of its receives (or,
// in-process, sends), opening with the rank: "rank 3: its all_reduce(float32, count 1024, sum)
// #5 received a frame of rank 2's broadcast(float32, count 1024) #5: every rank must ...".
std::string describe_call_mismatch(const transport::CallMismatch& m);
// What every rank must do, as such errors end.
inline constexpr std::string_view kSameCallsRule =
    "every rank must call the same collectives in the same order, with the same sizes, dtypes, "
    "reductions and roots";

// `all` holds every rank's fingerprint in rank order. Null when they all equal rank 0's, else
// the InvalidArgument that names the calls, for `group` (its name in messages).
std::exception_ptr fingerprint_mismatch(std::span<const std::byte> all, int size,
                                        std::string_view group);

}  // namespace c10d::inline v1::backends
