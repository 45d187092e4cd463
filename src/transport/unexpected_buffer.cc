// UnexpectedBuffer and the unexpected-message limit: see unexpected_buffer.h.
#include "transport/unexpected_buffer.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <string>

#include "core/check.h"
#include "core/parse.h"

namespace c10d::inline v1::transport {

std::uint64_t UnexpectedBuffer::allocation_at(std::uint64_t at) const {
  const std::uint64_t chunk = at / kChunkBytes;
  if (chunk < chunks()) return 0;
  return std::min<std::uint64_t>(kChunkBytes, size_ - chunk * kChunkBytes);
}

std::span<std::byte> UnexpectedBuffer::span_at(std::uint64_t at) {
  const auto i = static_cast<std::size_t>(at / kChunkBytes);
  C10D_CHECK(at < size_ && i <= chunks(),
             "UnexpectedBuffer: byte {} of a {}-byte message is not next to what arrived ({} "
             "bytes allocated)",
             at, size_, allocated_);
  const std::uint64_t begin = std::uint64_t{i} * kChunkBytes;
  const auto bytes = static_cast<std::size_t>(std::min<std::uint64_t>(kChunkBytes, size_ - begin));
  if (i == chunks()) {
    // Default-initialized: the payload overwrites every byte before anyone reads it.
    auto fresh = std::make_unique_for_overwrite<std::byte[]>(bytes);
    if (i == 0) {
      first_ = std::move(fresh);
    } else {
      rest_.push_back(std::move(fresh));
    }
    allocated_ += bytes;
  }
  const auto offset = static_cast<std::size_t>(at - begin);
  return {chunk(i) + offset, bytes - offset};
}

void UnexpectedBuffer::copy_to(std::span<std::byte> out) const {
  for (std::size_t i = 0, done = 0; done < out.size(); ++i) {
    const std::size_t n = std::min(kChunkBytes, out.size() - done);
    std::memcpy(out.data() + done, chunk(i), n);
    done += n;
  }
}

void UnexpectedBuffer::release() {
  first_.reset();
  rest_.clear();
  rest_.shrink_to_fit();
  allocated_ = 0;
}

std::uint64_t parse_max_unexpected_bytes(std::string_view text) {
  const auto parsed = core::parse_uint(text, 1, std::numeric_limits<std::uint64_t>::max());
  if (!parsed.value) {
    C10D_THROW(InvalidArgument,
               "{}=\"{}\": {}: it must be a positive number of bytes, the most a transport holds "
               "for the messages of one peer whose receive is not posted yet (unset: {})",
               kMaxUnexpectedBytesVariable, text, parsed.error, kDefaultMaxUnexpectedBytes);
  }
  return *parsed.value;
}

std::uint64_t max_unexpected_bytes(std::uint64_t option) {
  if (option != 0) return option;
  const auto env = core::env_text(std::string(kMaxUnexpectedBytesVariable).c_str());
  return env ? parse_max_unexpected_bytes(*env) : kDefaultMaxUnexpectedBytes;  // empty: as unset
}

std::exception_ptr unexpected_limit_error(std::string_view who, int peer, std::uint64_t held,
                                          std::uint64_t limit) {
  return C10D_ERROR(NetworkError,
                    "{}: peer rank {} sent more than this rank holds for one peer: {} bytes of "
                    "messages whose receive is not posted yet (with {} bytes counted per "
                    "message), over the limit of {} bytes; {} raises it",
                    who, peer, held, kUnexpectedOverheadBytes, limit, kMaxUnexpectedBytesVariable);
}

}  // namespace c10d::inline v1::transport
