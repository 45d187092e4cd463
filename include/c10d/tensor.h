// Tensor: a handle to an n-dimensional array of one dtype.
//
// A Tensor is cheap to copy: copies share one TensorImpl (shape, dtype, storage), as torch
// tensors do. Storage is dense and contiguous, either owned (allocated by the library) or
// borrowed from the user by from_blob(), in which case the user keeps the memory alive for the
// tensor's whole life and no copy is ever made.
//
// The lazy core (src/lazy) extends a tensor with a pending value: an impl may hold a
// PendingValue instead of storage until something reads it. data() and the collectives call
// materialize() first, so code below the lazy layer only ever sees dense storage.
//
// Autograd (src/lazy/autograd.h) keeps its per-tensor state in an opaque AutogradMeta slot of
// the impl; this layer never looks inside it.
//
// Thread-safety: distinct tensors may be used from any thread. One tensor's data may be read
// concurrently; writes must be ordered by the caller (collectives write only their outputs).
// Lifetime: a TensorImpl lives while any copy of the tensor does (a Work's result included);
// memory borrowed by from_blob() must outlive them all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "c10d/export.h"
#include "c10d/types.h"

namespace c10d::inline v1 {

class TensorImpl;
class AutogradMeta;  // defined by the lazy core's autograd (src/lazy/autograd.h)
[[noreturn]] C10D_API void throw_element_size_mismatch(std::size_t host_size, DType dtype);
// InvalidArgument "<what> of an undefined tensor".
[[noreturn]] C10D_API void throw_undefined_tensor(const char* what);

// Hook for the lazy core: a value that is computed on demand and written into the impl.
class C10D_API PendingValue {
 public:
  virtual ~PendingValue() = default;
  // Computes the value and gives `impl` its storage. Called at most once per impl.
  virtual void materialize(TensorImpl& impl) = 0;
};

// Dense bytes with an owner. Either allocated here (aligned to 64 bytes) or borrowed.
class C10D_API Storage {
 public:
  // Allocates nbytes of zeroed, 64-byte aligned memory.
  explicit Storage(std::size_t nbytes);
  // Borrows user memory; `deleter` (may be empty) runs when the last handle goes away.
  Storage(void* data, std::size_t nbytes, std::function<void(void*)> deleter);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  std::size_t nbytes() const { return nbytes_; }

 private:
  void* data_ = nullptr;
  std::size_t nbytes_ = 0;
  std::function<void(void*)> deleter_;
};

class C10D_API TensorImpl {
 public:
  // A view of `storage` starting `offset_bytes` in.
  TensorImpl(DType dtype, std::vector<std::int64_t> shape, std::shared_ptr<Storage> storage,
             std::size_t offset_bytes = 0);
  TensorImpl(DType dtype, std::vector<std::int64_t> shape, std::shared_ptr<PendingValue> pending);

  DType dtype() const { return dtype_; }
  const std::vector<std::int64_t>& shape() const { return shape_; }
  std::int64_t numel() const { return numel_; }
  bool is_pending() const { return pending_ != nullptr; }
  // Runs the pending value, if any; afterwards storage() is set.
  void materialize();
  const std::shared_ptr<Storage>& storage() {
    if (pending_) [[unlikely]]
      materialize();
    return storage_;
  }
  // Gives the impl dense bytes (a view `offset_bytes` into `storage`); drops any pending value.
  void set_storage(std::shared_ptr<Storage> storage, std::size_t offset_bytes = 0);
  // Makes the impl pending on `pending` and drops its storage (lazy::assign rebinds a tensor in
  // place this way; whoever still reads the old storage holds its own reference to it).
  void set_pending(std::shared_ptr<PendingValue> pending);
  const std::shared_ptr<PendingValue>& pending() const { return pending_; }
  std::size_t offset_bytes() const { return offset_bytes_; }

  const std::shared_ptr<AutogradMeta>& autograd_meta() const { return autograd_meta_; }
  void set_autograd_meta(std::shared_ptr<AutogradMeta> meta) { autograd_meta_ = std::move(meta); }

 private:
  DType dtype_;
  std::vector<std::int64_t> shape_;
  std::int64_t numel_;
  std::shared_ptr<Storage> storage_;
  std::size_t offset_bytes_ = 0;
  std::shared_ptr<PendingValue> pending_;
  std::shared_ptr<AutogradMeta> autograd_meta_;
};

class C10D_API Tensor {
 public:
  Tensor() = default;  // an undefined tensor; defined() is false
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // Allocates zeroed storage.
  static Tensor empty(std::vector<std::int64_t> shape, DType dtype);
  static Tensor zeros(std::vector<std::int64_t> shape, DType dtype) { return empty(shape, dtype); }
  // Wraps user memory without copying; see the class comment for the lifetime rule.
  static Tensor from_blob(void* data, std::vector<std::int64_t> shape, DType dtype,
                          std::function<void(void*)> deleter = {});
  // Copies a vector into a new 1-D tensor (test and example convenience).
  template <typename T>
  static Tensor from_vector(const std::vector<T>& values, DType dtype);

  bool defined() const { return impl_ != nullptr; }
  // Inline, as every collective's checks read them. InvalidArgument on an undefined tensor.
  DType dtype() const { return checked("dtype()").dtype(); }
  const std::vector<std::int64_t>& shape() const { return checked("shape()").shape(); }
  std::int64_t numel() const { return checked("numel()").numel(); }
  std::int64_t dim() const { return static_cast<std::int64_t>(shape().size()); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * element_size(dtype()); }
  std::string to_string() const;  // "float32[4, 8]"

  // Materializes a pending value, then returns the dense bytes.
  void* raw_data() const {
    TensorImpl& impl = checked("data");
    return static_cast<std::uint8_t*>(impl.storage()->data()) + impl.offset_bytes();
  }
  template <typename T>
  T* data() const {
    return static_cast<T*>(raw_data());
  }
  std::span<std::uint8_t> bytes() const {
    return {static_cast<std::uint8_t*>(raw_data()), nbytes()};
  }

  // A deep copy with its own storage.
  Tensor clone() const;
  // Same storage, different shape of the same numel.
  Tensor view(std::vector<std::int64_t> shape) const;
  // Rows [begin, end) of the first dimension, sharing storage (a contiguous range).
  Tensor narrow_rows(std::int64_t begin, std::int64_t end) const;

  const std::shared_ptr<TensorImpl>& impl() const { return impl_; }

 private:
  TensorImpl& checked(const char* what) const {
    if (!impl_) [[unlikely]]
      throw_undefined_tensor(what);
    return *impl_;
  }

  std::shared_ptr<TensorImpl> impl_;
};

template <typename T>
Tensor Tensor::from_vector(const std::vector<T>& values, DType dtype) {
  if (sizeof(T) != element_size(dtype)) throw_element_size_mismatch(sizeof(T), dtype);
  Tensor t = empty({static_cast<std::int64_t>(values.size())}, dtype);
  T* out = t.data<T>();
  for (std::size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

}  // namespace c10d::inline v1
