#pragma once
// Sliced (partitioned) entries: a tensor whose entry lists `slices` has no
// bytes of its own; each slice is stored as an entry of its own under the key
// EncodeTensorNameSlice(name, slice) (core/util/saved_tensor_slice_util.cc):
// OrderedCode of 0, the name, the rank, then each dimension's start and
// length (-1: the whole dimension). OrderedCode keeps numeric order, so the
// slices of one tensor sort by (start, length) per dimension, and ckpt pairs
// them with the entry's slice list in that order instead of re-encoding keys.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ckpt/tensor.h"

namespace ckpt::tf_detail {

// One dimension of a slice: `length` -1 is the whole dimension.
struct Extent {
  int64_t start = 0;
  int64_t length = -1;
  auto operator<=>(const Extent&) const = default;
};
using SliceSpec = std::vector<Extent>;

// True if `key` is a slice key (its first byte is OrderedCode's 0).
inline bool is_slice_key(std::string_view key) { return !key.empty() && key.front() == '\0'; }

// The tensor name in a slice key; nullopt if the key is malformed.
std::optional<std::string> slice_key_name(std::string_view key);

// Copies `part`, the C-order bytes of `slice` of a tensor of `shape`, into
// `full` (the whole tensor's bytes), by core/box_copy.h. The caller has
// checked that the slice lies inside `shape` and that part.size() matches
// its lengths (copy_box throws Error{kInvalidArgument} otherwise).
void copy_slice(std::span<std::byte> full, const Shape& shape, size_t element_size, const SliceSpec& slice,
                std::span<const std::byte> part);

}  // namespace ckpt::tf_detail
