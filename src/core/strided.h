#pragma once
// Strided views: a tensor that views a storage with an element offset and
// arbitrary (non-negative) strides, as torch files hold them. A contiguous
// view is a plain slice of the storage; any other view is a deferred Buffer
// whose bytes are gathered into contiguous memory only when first used, and
// which remembers its layout so that a writer can store it as a view again.

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "ckpt/buffer.h"
#include "ckpt/tensor.h"

namespace ckpt::detail {

struct StridedLayout {
  Buffer base;               // the whole storage
  size_t element_size = 1;   // bytes per element
  uint64_t offset = 0;       // in elements
  Shape shape;
  std::vector<int64_t> strides;  // in elements, one per dimension
};

// Row-major strides of `shape` (dimensions of size 1 may have any stride in
// a contiguous view; this gives the canonical ones).
std::vector<int64_t> contiguous_strides(const Shape& shape);

// True if the view's elements are back to back in row-major order (ignoring
// the strides of dimensions of size 0 or 1).
bool is_contiguous(const Shape& shape, const std::vector<int64_t>& strides);

// Checks that every element of the view lies inside `base` and returns the
// number of storage elements it spans from `offset` (0 for an empty view).
// Throws Error{kCorrupt} for negative sizes or strides, overflow, or a view
// that reaches past the storage.
uint64_t checked_view_extent(const StridedLayout& layout);

// The bytes of the view as a Buffer: a slice of base for a contiguous view,
// a deferred Buffer over a StridedStorage otherwise. Call
// checked_view_extent() first; this assumes the view is valid.
Buffer view_buffer(StridedLayout layout);

class StridedStorage final : public Storage {
 public:
  explicit StridedStorage(StridedLayout layout);
  StorageKind kind() const override { return StorageKind::kDeferred; }
  // Gathers straight into dst when not yet materialized.
  void copy_out(const std::byte* src, std::span<std::byte> dst) const override;
  const std::byte* materialize() const override;
  const StridedLayout& layout() const { return layout_; }
  uint64_t nbytes() const { return nbytes_; }

 private:
  void gather(std::byte* dst) const;
  StridedLayout layout_;
  uint64_t nbytes_ = 0;
  mutable std::once_flag once_;
  mutable Buffer materialized_;
};

// The layout behind `buffer` if it is a deferred strided view, else nullptr.
const StridedLayout* strided_layout(const Buffer& buffer);

}  // namespace ckpt::detail
