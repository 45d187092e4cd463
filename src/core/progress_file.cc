#include "core/progress_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/fd.h"
#include "core/logging.h"
#include "core/parse.h"

namespace c10d::inline v1::core::progress {

namespace {

std::uint64_t* map_counter() {
  const auto path = env_text(kFileEnv);
  if (!path) return nullptr;
  const auto fail = [&](const char* what) -> std::uint64_t* {
    C10D_LOG_WARN("{}={}: {}: {}; the launcher will not see this rank's progress", kFileEnv, *path,
                  what, std::strerror(errno));
    return nullptr;
  };
  Fd fd(::open(path->c_str(), O_RDWR | O_CLOEXEC));
  if (!fd.valid()) return fail("cannot open it");
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return fail("cannot stat it");
  if (st.st_size < static_cast<off_t>(kFileBytes)) {
    errno = EINVAL;
    return fail("it is shorter than 8 bytes");
  }
  void* p = ::mmap(nullptr, kFileBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (p == MAP_FAILED) return fail("cannot map it");
  return static_cast<std::uint64_t*>(p);  // mapped for the life of the process
}

}  // namespace

std::uint64_t* counter() {
  static std::uint64_t* const c = map_counter();
  return c;
}

}  // namespace c10d::inline v1::core::progress
