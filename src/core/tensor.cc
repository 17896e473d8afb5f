#include "ckpt/tensor.h"

#include <cstring>
#include <limits>

#include "ckpt/error.h"
#include "core/strided.h"

namespace ckpt {

uint64_t checked_numel(std::span<const int64_t> shape, size_t element_size) {
  uint64_t count = 1;
  for (int64_t dim : shape) {
    if (dim < 0) {
      throw Error(ErrorCode::kInvalidArgument, "negative dimension " + std::to_string(dim) + " in shape");
    }
    if (__builtin_mul_overflow(count, static_cast<uint64_t>(dim), &count)) {
      throw Error(ErrorCode::kInvalidArgument, "element count of shape overflows 64 bits");
    }
  }
  uint64_t bytes;
  if (__builtin_mul_overflow(count, static_cast<uint64_t>(element_size), &bytes)) {
    throw Error(ErrorCode::kInvalidArgument, "byte size of shape overflows 64 bits");
  }
  return count;
}

std::string shape_text(const Shape& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) text += ", ";
    text += std::to_string(shape[i]);
  }
  return text + "]";
}

namespace {

size_t byte_size(DType dtype, const Shape& shape) {
  const size_t size = dtype_size(dtype);
  const uint64_t count = checked_numel(shape, size);
  if (count * size > std::numeric_limits<size_t>::max()) {
    throw Error(ErrorCode::kInvalidArgument, "tensor too large");
  }
  return static_cast<size_t>(count * size);
}
}  // namespace

Tensor::Tensor(DType dtype, Shape shape, Buffer buffer)
    : dtype_(dtype), shape_(std::move(shape)), buffer_(std::move(buffer)) {
  const size_t expected = byte_size(dtype_, shape_);
  if (buffer_.size() != expected) {
    throw Error(ErrorCode::kInvalidArgument,
                std::string(dtype_name(dtype_)) + " tensor of shape " + shape_text(shape_) + " needs " +
                    std::to_string(expected) + " bytes, buffer has " + std::to_string(buffer_.size()));
  }
}

Tensor Tensor::empty(DType dtype, Shape shape) {
  const size_t size = byte_size(dtype, shape);
  return Tensor(dtype, std::move(shape), Buffer::allocate(size));
}

Tensor Tensor::zeros(DType dtype, Shape shape) {
  const size_t size = byte_size(dtype, shape);
  return Tensor(dtype, std::move(shape), Buffer::allocate_zeroed(size));
}

Tensor Tensor::from_bytes(DType dtype, Shape shape, std::span<const std::byte> bytes) {
  const size_t size = byte_size(dtype, shape);
  if (bytes.size() != size) {
    throw Error(ErrorCode::kInvalidArgument, std::string(dtype_name(dtype)) + " tensor of shape " +
                                                 shape_text(shape) + " needs " + std::to_string(size) +
                                                 " bytes, got " + std::to_string(bytes.size()));
  }
  return Tensor(dtype, std::move(shape), Buffer::copy_of(bytes));
}

uint64_t Tensor::numel() const noexcept {
  uint64_t count = 1;
  for (int64_t dim : shape_) count *= static_cast<uint64_t>(dim);
  return count;
}

Tensor Tensor::copy() const {
  Buffer fresh = Buffer::allocate(buffer_.size());
  buffer_.copy_to(fresh.mutable_bytes());
  return Tensor(dtype_, shape_, std::move(fresh));
}

std::optional<StridedView> Tensor::strided_view() const {
  const detail::StridedLayout* layout = detail::strided_layout(buffer_);
  if (layout == nullptr) return std::nullopt;
  return StridedView{.storage = layout->base, .offset = layout->offset, .strides = layout->strides};
}

bool Tensor::equals(const Tensor& other) const {
  if (dtype_ != other.dtype_ || shape_ != other.shape_ || nbytes() != other.nbytes()) return false;
  return nbytes() == 0 || std::memcmp(buffer_.data(), other.buffer_.data(), nbytes()) == 0;
}

bool Tensor::same_memory(const Tensor& other) const noexcept {
  if (nbytes() == 0 || nbytes() != other.nbytes() || !has_data() || !other.has_data()) return false;
  if (buffer_.address() != nullptr) return buffer_.address() == other.buffer_.address();
  return buffer_.storage() != nullptr && buffer_.storage() == other.buffer_.storage() &&
         other.buffer_.address() == nullptr;
}

namespace {

// The storage of a spec tensor: it has no bytes to give.
class SpecStorage final : public Storage {
 public:
  StorageKind kind() const override { return StorageKind::kDeferred; }
  void copy_out(const std::byte*, std::span<std::byte>) const override { fail(); }
  const std::byte* materialize() const override { fail(); }

 private:
  [[noreturn]] static void fail() {
    throw Error(ErrorCode::kInvalidArgument, "a tensor spec (dtype and shape only) has no data");
  }
};

const std::shared_ptr<const Storage>& spec_storage() {
  static const std::shared_ptr<const Storage> storage = std::make_shared<SpecStorage>();
  return storage;
}

}  // namespace

Tensor Tensor::spec(DType dtype, Shape shape) {
  const size_t size = byte_size(dtype, shape);
  return Tensor(dtype, std::move(shape), size == 0 ? Buffer() : Buffer::deferred(spec_storage(), size));
}

bool Tensor::has_data() const noexcept { return buffer_.storage() != spec_storage(); }

void Tensor::check_access(size_t element_size, size_t alignment) const {
  if (element_size != dtype_size(dtype_)) {
    throw Error(ErrorCode::kInvalidArgument, "element type of size " + std::to_string(element_size) +
                                                 " does not match dtype " + std::string(dtype_name(dtype_)));
  }
  if (reinterpret_cast<uintptr_t>(buffer_.data()) % alignment != 0) {
    throw Error(ErrorCode::kInvalidArgument, "tensor data is not aligned for typed access; copy() it first");
  }
}

}  // namespace ckpt
