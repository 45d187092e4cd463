// C10D_CHECK and C10D_THROW: throw a typed c10d error whose message is formatted with fmt and
// stamped with the file and line that raised it.
#pragma once

#include <fmt/format.h>

#include <exception>
#include <string>

#include "c10d/errors.h"

namespace c10d::inline v1::core {

std::string with_location(const char* file, int line, const std::string& message);

// The message of the exception `e` holds, for an error that wraps it ("an exception of unknown
// type" when it is not a std::exception).
std::string what_of(const std::exception_ptr& e);

}  // namespace c10d::inline v1::core

// Throws `ErrorType` with a formatted message: C10D_THROW(TimeoutError, "waited {} ms", ms).
#define C10D_THROW(ErrorType, ...) \
  throw ErrorType(::c10d::core::with_location(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__)))

// The exception_ptr of such an error, for failing requests without throwing:
// C10D_ERROR(NetworkError, "peer {} is gone", p).
#define C10D_ERROR(ErrorType, ...) \
  std::make_exception_ptr(         \
      ErrorType(::c10d::core::with_location(__FILE__, __LINE__, ::fmt::format(__VA_ARGS__))))

// Throws InvalidArgument unless `cond` holds: C10D_CHECK(n >= 0, "count {} is negative", n).
#define C10D_CHECK(cond, ...)                                      \
  do {                                                             \
    if (!(cond)) C10D_THROW(::c10d::InvalidArgument, __VA_ARGS__); \
  } while (0)
