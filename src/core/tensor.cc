#include "c10d/tensor.h"

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/check.h"
#include "core/shape.h"

namespace c10d::inline v1 {
namespace {

constexpr std::size_t kAlignment = 64;

// offset + bytes, checked against what `storage` holds without wrapping.
bool fits(std::size_t offset, std::size_t bytes, std::size_t nbytes) {
  return offset <= nbytes && bytes <= nbytes - offset;
}

std::string shape_string(const std::vector<std::int64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

void throw_undefined_tensor(const char* what) {
  C10D_THROW(InvalidArgument, "{} of an undefined tensor", what);
}

void throw_element_size_mismatch(std::size_t host_size, DType dtype) {
  C10D_THROW(InvalidArgument, "host type of {} bytes does not match dtype {} of {} bytes",
             host_size, dtype_name(dtype), element_size(dtype));
}

Storage::Storage(std::size_t nbytes) : nbytes_(nbytes) {
  // Round up so aligned_alloc's size rule holds; zero-length storage still gets a pointer.
  const std::size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  data_ = std::aligned_alloc(kAlignment, rounded == 0 ? kAlignment : rounded);
  if (data_ == nullptr) throw std::bad_alloc();
  std::memset(data_, 0, nbytes);
  deleter_ = [](void* p) { std::free(p); };
}

Storage::Storage(void* data, std::size_t nbytes, std::function<void(void*)> deleter)
    : data_(data), nbytes_(nbytes), deleter_(std::move(deleter)) {}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

TensorImpl::TensorImpl(DType dtype, std::vector<std::int64_t> shape,
                       std::shared_ptr<Storage> storage, std::size_t offset_bytes)
    : dtype_(dtype),
      shape_(std::move(shape)),
      numel_(core::checked_numel("tensor", shape_, dtype_)),
      storage_(std::move(storage)),
      offset_bytes_(offset_bytes) {
  C10D_CHECK(storage_ != nullptr, "tensor storage is null");
  const std::size_t bytes = static_cast<std::size_t>(numel_) * element_size(dtype_);
  C10D_CHECK(fits(offset_bytes_, bytes, storage_->nbytes()),
             "tensor {}{} needs {} bytes at offset {} but its storage holds {}", dtype_name(dtype_),
             shape_string(shape_), bytes, offset_bytes_, storage_->nbytes());
}

TensorImpl::TensorImpl(DType dtype, std::vector<std::int64_t> shape,
                       std::shared_ptr<PendingValue> pending)
    : dtype_(dtype),
      shape_(std::move(shape)),
      numel_(core::checked_numel("tensor", shape_, dtype_)),
      pending_(std::move(pending)) {
  C10D_CHECK(pending_ != nullptr, "pending value is null");
}

void TensorImpl::materialize() {
  if (pending_) {
    // The impl stays pending while its value is computed (the lazy core finds it among the
    // live pending tensors); set_storage() ends that. If the computation throws, the impl is
    // still pending and a later read tries again.
    auto pending = pending_;
    pending->materialize(*this);
    C10D_CHECK(storage_ != nullptr, "a pending value left tensor {}{} without storage",
               dtype_name(dtype_), shape_string(shape_));
    pending_.reset();
  }
}

void TensorImpl::set_storage(std::shared_ptr<Storage> storage, std::size_t offset_bytes) {
  C10D_CHECK(storage != nullptr &&
                 fits(offset_bytes, static_cast<std::size_t>(numel_) * element_size(dtype_),
                      storage->nbytes()),
             "storage too small for tensor {}{}", dtype_name(dtype_), shape_string(shape_));
  storage_ = std::move(storage);
  offset_bytes_ = offset_bytes;
  pending_.reset();
}

void TensorImpl::set_pending(std::shared_ptr<PendingValue> pending) {
  C10D_CHECK(pending != nullptr, "pending value is null");
  pending_ = std::move(pending);
  storage_.reset();
  offset_bytes_ = 0;
}

Tensor Tensor::empty(std::vector<std::int64_t> shape, DType dtype) {
  const std::int64_t n = core::checked_numel("empty", shape, dtype);
  auto storage = std::make_shared<Storage>(static_cast<std::size_t>(n) * element_size(dtype));
  return Tensor(std::make_shared<TensorImpl>(dtype, std::move(shape), std::move(storage)));
}

Tensor Tensor::from_blob(void* data, std::vector<std::int64_t> shape, DType dtype,
                         std::function<void(void*)> deleter) {
  const std::int64_t n = core::checked_numel("from_blob", shape, dtype);
  C10D_CHECK(data != nullptr || n == 0, "from_blob: null data for {} elements", n);
  auto storage = std::make_shared<Storage>(data, static_cast<std::size_t>(n) * element_size(dtype),
                                           std::move(deleter));
  return Tensor(std::make_shared<TensorImpl>(dtype, std::move(shape), std::move(storage)));
}

std::string Tensor::to_string() const {
  if (!impl_) return "undefined";
  return fmt::format("{}{}", dtype_name(dtype()), shape_string(shape()));
}

Tensor Tensor::clone() const {
  Tensor out = empty(shape(), dtype());
  if (nbytes() > 0) std::memcpy(out.raw_data(), raw_data(), nbytes());
  return out;
}

Tensor Tensor::view(std::vector<std::int64_t> new_shape) const {
  C10D_CHECK(core::checked_numel("view", new_shape, dtype()) == numel(),
             "view {} of tensor {}: element counts differ", shape_string(new_shape), to_string());
  impl_->materialize();
  return Tensor(std::make_shared<TensorImpl>(dtype(), std::move(new_shape), impl_->storage(),
                                             impl_->offset_bytes()));
}

Tensor Tensor::narrow_rows(std::int64_t begin, std::int64_t end) const {
  C10D_CHECK(dim() >= 1, "narrow_rows of a 0-d tensor {}", to_string());
  const std::int64_t rows = shape()[0];
  C10D_CHECK(0 <= begin && begin <= end && end <= rows, "rows [{}, {}) out of range for {}", begin,
             end, to_string());
  const std::int64_t row_elems = rows == 0 ? 0 : numel() / rows;
  std::vector<std::int64_t> new_shape = shape();
  new_shape[0] = end - begin;
  impl_->materialize();
  const std::size_t offset =
      impl_->offset_bytes() + static_cast<std::size_t>(begin * row_elems) * element_size(dtype());
  return Tensor(
      std::make_shared<TensorImpl>(dtype(), std::move(new_shape), impl_->storage(), offset));
}

}  // namespace c10d::inline v1
