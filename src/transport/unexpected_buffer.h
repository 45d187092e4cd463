// What every transport keeps for a message that arrives before its receive is posted (an
// *unexpected* message), and the bound on how much of that a peer may make it hold.
//
// UnexpectedBuffer: a message's bytes in chunks of up to kChunkBytes, each allocated only when
// the bytes for it arrive, so a header claiming a huge message costs nothing until its payload
// comes (a peer cannot make a rank allocate more than it has sent, plus one chunk). When the
// receive is posted the bytes are copied into its buffer: one copy in, one copy out, as with a
// single buffer.
//
// The bound: a transport holds at most max_unexpected_bytes for the unexpected messages of one
// peer, counting each message's allocated chunks and kUnexpectedOverheadBytes (so a flood of
// empty messages is bounded too). A peer that goes past it fails the transport with a
// NetworkError from unexpected_limit_error. The limit is the transport option when nonzero, else
// C10D_MAX_UNEXPECTED_BYTES, else kDefaultMaxUnexpectedBytes.
//
// Thread-safety: none; the owner serializes access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

namespace c10d::inline v1::transport {

inline constexpr std::uint64_t kDefaultMaxUnexpectedBytes = std::uint64_t{1} << 30;
// Counted per unexpected message besides its bytes: about what its bookkeeping costs.
inline constexpr std::uint64_t kUnexpectedOverheadBytes = 128;
inline constexpr std::string_view kMaxUnexpectedBytesVariable = "C10D_MAX_UNEXPECTED_BYTES";

class UnexpectedBuffer {
 public:
  static constexpr std::size_t kChunkBytes = std::size_t{1} << 20;

  UnexpectedBuffer() = default;
  explicit UnexpectedBuffer(std::uint64_t size) : size_(size) {}

  std::uint64_t size() const { return size_; }  // the message's length, as its header claims
  std::uint64_t allocated() const { return allocated_; }

  // The bytes span_at(at) would allocate: the size of the chunk holding `at` when it is not
  // allocated yet, else 0.
  std::uint64_t allocation_at(std::uint64_t at) const;
  // The bytes from `at` (< size()) to the end of the chunk that holds it, allocating that chunk
  // when needed. Chunks are allocated in order: `at` may lie at most one chunk past the last.
  std::span<std::byte> span_at(std::uint64_t at);
  // Copies the first out.size() bytes (all allocated) to `out`.
  void copy_to(std::span<std::byte> out) const;
  // Frees every chunk (the message is dropped); allocated() is 0 after.
  void release();

 private:
  std::size_t chunks() const { return first_ ? 1 + rest_.size() : 0; }
  std::byte* chunk(std::size_t i) const { return i == 0 ? first_.get() : rest_[i - 1].get(); }

  // The first chunk on its own: a small message costs one allocation for its bytes.
  std::unique_ptr<std::byte[]> first_;
  std::vector<std::unique_ptr<std::byte[]>> rest_;
  std::uint64_t size_ = 0;
  std::uint64_t allocated_ = 0;
};

// `option` when nonzero, else C10D_MAX_UNEXPECTED_BYTES when set and not empty, else the default.
// Throws InvalidArgument naming the variable when its value is not a positive decimal byte count
// that fits 64 bits (parsed by core::parse_uint, the parser of every number users write).
std::uint64_t max_unexpected_bytes(std::uint64_t option);
// The value of C10D_MAX_UNEXPECTED_BYTES as max_unexpected_bytes reads it (throws alike).
std::uint64_t parse_max_unexpected_bytes(std::string_view text);

// The NetworkError of a peer that made this rank hold `held` bytes of unexpected messages, over
// `limit`; `who` opens the message ("rank 3", "ICI rank 3", ...).
std::exception_ptr unexpected_limit_error(std::string_view who, int peer, std::uint64_t held,
                                          std::uint64_t limit);

}  // namespace c10d::inline v1::transport
