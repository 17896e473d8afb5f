#pragma once
// Copying an N-d box of elements from one array in memory into another: a
// tensor's slice into the whole tensor (TF's sliced entries), a zarr chunk
// into its array (Orbax), and, for resharding, one shard's part of a tensor
// into another shard. Both arrays are C-order (row-major), each with its own
// shape; the box lies at its own origin in each.

#include <cstddef>
#include <cstdint>
#include <span>

namespace ckpt::detail {

struct BoxCopy {
  size_t element_size = 1;           // bytes per element, in both arrays
  std::span<const int64_t> extent;   // the box: elements per dimension (the rank)
  // The array copied into: its bytes, its shape, and the box's first
  // element in it (empty: the array's first element).
  std::span<std::byte> to;
  std::span<const int64_t> to_shape;
  std::span<const int64_t> to_origin;
  // The array copied from, likewise.
  std::span<const std::byte> from;
  std::span<const int64_t> from_shape;
  std::span<const int64_t> from_origin;
};

// Copies the elements of the box from `copy.from` into `copy.to`; the rest
// of `copy.to` is left as it was. Rank 0 (an empty extent) copies the one
// element; a box with a dimension of 0 copies nothing. Trailing dimensions
// that the box covers whole in both arrays are copied as one run.
// Throws Error{kInvalidArgument} if the shapes or origins have another rank
// than `extent`, a size or index is negative, the box reaches outside either
// array, or a byte span is shorter than its array; nothing is copied then.
void copy_box(const BoxCopy& copy);

}  // namespace ckpt::detail
