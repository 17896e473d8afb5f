#pragma once
// Tensor: a dtype, a shape and a Buffer holding the elements in row-major
// (C) order, little-endian.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ckpt/buffer.h"
#include "ckpt/dtype.h"

namespace ckpt {

// Dimensions, outermost first. An empty shape is a 0-d tensor (one element);
// a zero among the dimensions makes an empty tensor.
using Shape = std::vector<int64_t>;

// "[2, 3]"; "[]" for a 0-d tensor (for messages).
std::string shape_text(const Shape& shape);

// Returns the number of elements of `shape`.
// Throws Error{kInvalidArgument} for a negative dimension, or if the element
// count or its byte size (times `element_size`) overflows 64 bits.
uint64_t checked_numel(std::span<const int64_t> shape, size_t element_size = 1);

// How a tensor's elements lie in a storage when they are not back to back: a
// view with an element offset and strides, as torch files hold them (a
// transpose; an expand, whose stride is 0), or one value repeated (an Orbax
// array that is all fill value: one element, every stride 0).
struct StridedView {
  Buffer storage;                // the bytes viewed, never gathered by asking for them
  uint64_t offset = 0;           // of the first element, in elements
  std::vector<int64_t> strides;  // in elements, one per dimension, each >= 0
};

class Tensor {
 public:
  // A 0-d float32 tensor whose buffer is empty; only useful as a placeholder.
  Tensor() = default;
  // Throws Error{kInvalidArgument} unless buffer.size() equals the byte size
  // of dtype × shape.
  Tensor(DType dtype, Shape shape, Buffer buffer);

  // Uninitialized heap memory.
  static Tensor empty(DType dtype, Shape shape);
  static Tensor zeros(DType dtype, Shape shape);
  // A tensor with a dtype and a shape but no data: a restore target that says
  // what a leaf must look like (jax.ShapeDtypeStruct, a torch meta tensor).
  // Asking for its bytes throws Error{kInvalidArgument}.
  static Tensor spec(DType dtype, Shape shape);
  // A heap copy of `bytes` (whose size must match).
  static Tensor from_bytes(DType dtype, Shape shape, std::span<const std::byte> bytes);
  // Convenience for tests and examples: a tensor holding `values`.
  template <class T>
  static Tensor from_values(DType dtype, Shape shape, std::span<const T> values) {
    return from_bytes(dtype, std::move(shape), std::as_bytes(values));
  }

  DType dtype() const noexcept { return dtype_; }
  const Shape& shape() const noexcept { return shape_; }
  size_t ndim() const noexcept { return shape_.size(); }
  uint64_t numel() const noexcept;
  size_t nbytes() const noexcept { return buffer_.size(); }
  // False for a spec() tensor.
  bool has_data() const noexcept;

  const Buffer& buffer() const noexcept { return buffer_; }
  // The view behind a tensor whose elements are not back to back in the
  // memory it views (its buffer is deferred: bytes() gathers them into fresh
  // contiguous memory, once); nullopt for every other tensor. A caller that
  // can hold a view (numpy and torch as_strided, ckpt's torch writer) reads
  // the storage through it and never pays for the gathered copy.
  std::optional<StridedView> strided_view() const;
  // The bytes (a deferred view materializes here: Error{kUnsupported} when
  // they need more memory than the machine has, see Buffer::allocate).
  std::span<const std::byte> bytes() const { return buffer_.bytes(); }
  // Throws Error{kInvalidArgument} unless the buffer is writable heap memory.
  std::span<std::byte> mutable_bytes() { return buffer_.mutable_bytes(); }

  // Typed access. Throws Error{kInvalidArgument} if sizeof(T) differs from
  // the dtype's size or the data is not aligned for T.
  template <class T>
  std::span<const T> values() const {
    check_access(sizeof(T), alignof(T));
    return {reinterpret_cast<const T*>(buffer_.data()), static_cast<size_t>(numel())};
  }

  // A copy in fresh heap memory that no longer refers to any file (a view's
  // elements gathered back to back). Throws Error{kUnsupported} when it needs
  // more memory than the machine has.
  Tensor copy() const;
  // Materializes the elements into caller memory of exactly nbytes().
  void read_into(std::span<std::byte> dst) const { buffer_.copy_to(dst); }

  // Same dtype, same shape, same bytes.
  bool equals(const Tensor& other) const;
  // True if both tensors view the same bytes (tied weights): the same
  // address and size, whichever storages own them (two torch tensors lent
  // from one torch storage count), or the same not yet materialized view.
  // Tensors of no bytes never do.
  bool same_memory(const Tensor& other) const noexcept;

 private:
  void check_access(size_t element_size, size_t alignment) const;

  DType dtype_ = DType::kFloat32;
  Shape shape_;
  Buffer buffer_;
};

}  // namespace ckpt
