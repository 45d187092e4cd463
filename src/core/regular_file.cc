#include "core/regular_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>

#include "core/check.h"

namespace c10d::inline v1::core {

std::string_view file_kind(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

std::uint64_t regular_file_size(int fd, std::string_view label) {
  struct stat st {};
  C10D_CHECK(::fstat(fd, &st) == 0, "{}: fstat failed: {}", label, std::strerror(errno));
  C10D_CHECK(S_ISREG(st.st_mode), "{} is {}, not a regular file", label, file_kind(st.st_mode));
  return static_cast<std::uint64_t>(st.st_size);
}

}  // namespace c10d::inline v1::core
