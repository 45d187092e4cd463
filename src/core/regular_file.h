// Readers that bound what they read by a file's size (state_dict files, IDX files) take only a
// regular file: a device, a FIFO or a directory has no size to bound the read by, and /dev/zero
// or a FIFO may never end.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string_view>

namespace c10d::inline v1::core {

// What a file of `mode` is, for messages: "a directory", "a FIFO", ... or "a regular file".
std::string_view file_kind(mode_t mode);

// The size of the open file `fd`. Throws InvalidArgument unless it is a regular file, naming it
// by `label` and saying what it is: "<label> is a FIFO, not a regular file".
std::uint64_t regular_file_size(int fd, std::string_view label);

}  // namespace c10d::inline v1::core
