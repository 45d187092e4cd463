// The state_dict file format: named tensors on disk.
//
//   file    := header entry{count}                  (nothing may follow the last entry)
//   header  := magic[8] = "C10DSDCT"
//              version  u32 = 1
//              count    u32                          (<= kMaxEntries)
//   entry   := name_len u32                          (1 ..= kMaxNameBytes)
//              name     name_len bytes (UTF-8)
//              dtype    u8                           (c10d::DType's numbering, types.h)
//              ndim     u8                           (<= kMaxDims)
//              dims     i64 x ndim                   (each >= 0)
//              nbytes   u64                          (== numel * element_size(dtype))
//              data     nbytes bytes                 (dense, row-major)
//
// Every integer, and every element in `data`, is little-endian. Limits are checked, and every
// length against the bytes that remain, before anything is allocated, so a hostile or
// truncated file costs no memory. The decoder is a pure function over a byte span that reports
// what is wrong instead of throwing; the file functions in nn.h add the path and throw.
// read_state_dict reads only a regular file, whose size bounds the lengths: it decodes the file
// as a stream (the header first, each tensor's bytes straight into the tensor), so a file costs
// at most its own size, and a device, FIFO or directory is refused before anything is read.
// save_state_dict writes `<path>.tmp`, fsyncs it, renames it onto `<path>` and fsyncs the
// directory.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "c10d/nn.h"

namespace c10d::inline v1::nn::format {

inline constexpr char kMagic[8] = {'C', '1', '0', 'D', 'S', 'D', 'C', 'T'};
inline constexpr std::uint32_t kVersion = 1;
inline constexpr std::uint32_t kMaxEntries = 1u << 20;
inline constexpr std::uint32_t kMaxNameBytes = 4096;
inline constexpr std::uint8_t kMaxDims = 16;

// Appends the encoding of `state` to `out`. Reads (materializes) every tensor.
void encode(const NamedTensors& state, std::vector<std::uint8_t>& out);

struct Decoded {
  std::string error;  // empty when the bytes were a whole, valid file
  NamedTensors entries;
};
Decoded decode(std::span<const std::uint8_t> bytes);

}  // namespace c10d::inline v1::nn::format
