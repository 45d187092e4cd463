// c10d error types.
//
// Every failure that crosses the public API is a c10d::Error or one of its subclasses, so a
// caller can catch broadly or narrowly. A message says what failed, where and who: the op and
// its sequence number, the ranks involved, the store address and key, or the limit broken.
// Thread-safety: the types are immutable values once constructed. Lifetime: values; an error
// owns its message.
#pragma once

#include <stdexcept>
#include <string>

#include "c10d/export.h"

namespace c10d::inline v1 {

class C10D_API Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// A deadline passed before the operation could complete.
class C10D_API TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer or server went away, or a connection failed or was refused.
class C10D_API NetworkError : public Error {
 public:
  using Error::Error;
};

// The caller passed something the operation cannot accept.
class C10D_API InvalidArgument : public Error {
 public:
  using Error::Error;
};

// The store failed: a server error, a refused handshake, a protocol violation.
class C10D_API StoreError : public Error {
 public:
  using Error::Error;
};

// The backend does not implement this operation or option.
class C10D_API Unsupported : public Error {
 public:
  using Error::Error;
};

}  // namespace c10d::inline v1
