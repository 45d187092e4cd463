// All-to-all by pairwise exchange: every rank sends a distinct block to every rank.
//
// Words used here:
//  - block: the bytes one rank sends to one rank. Rank r's input holds n blocks, block d
//    destined for rank d; its output holds n blocks, block s received from rank s. In
//    all_to_allv each block has its own byte count and offset; all_to_all cuts both buffers
//    into n equal blocks in rank order.
//  - step: the exchange runs steps k = 1..n-1. At step k a rank sends its block to
//    peer (rank + k) mod n and receives a block from peer (rank - k) mod n; so every pair of
//    ranks meets exactly once, and at every step each rank has one send on the wire. Every
//    receive is posted before the first send, so a block that arrives ahead of its step lands
//    in place. Its own block (k = 0) is copied locally, without a message.
//  - peer: the rank on the other end of a step's send or receive.
//
// Every step exchanges a message, even one of zero bytes: the protocol then does not depend on
// the counts, and a sender and receiver that disagree on a block's size fail with the
// transport's size-mismatch error, naming both sizes, instead of one of them hanging.
//
// Buffers are bytes; the caller converts element counts. Input and output must not overlap.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "algorithms/context.h"

namespace c10d::inline v1::algorithms {

// Sends input[send_offsets[d], +send_counts[d]) to rank d and receives the block from rank s
// into output[recv_offsets[s], +recv_counts[s]), for every rank d and s (all in bytes). Each
// counts/offsets array has one entry per rank. Throws InvalidArgument, naming this rank, the
// peer and the sizes, before any message when an array has the wrong length or a block does
// not fit its buffer. recv_counts[s] on this rank must equal send_counts[rank] on rank s.
void all_to_allv(const Context& ctx, std::span<const std::byte> input,
                 std::span<const std::int64_t> send_counts,
                 std::span<const std::int64_t> send_offsets, std::span<std::byte> output,
                 std::span<const std::int64_t> recv_counts,
                 std::span<const std::int64_t> recv_offsets);

// Equal splits: input and output each hold n blocks of `block_bytes`, in rank order.
// Throws InvalidArgument unless both buffers hold exactly n * block_bytes bytes.
void all_to_all(const Context& ctx, std::span<const std::byte> input, std::span<std::byte> output,
                std::int64_t block_bytes);

}  // namespace c10d::inline v1::algorithms
