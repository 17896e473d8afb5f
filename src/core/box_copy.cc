#include "core/box_copy.h"

#include <cstring>
#include <string>
#include <vector>

#include "ckpt/error.h"

namespace ckpt::detail {
namespace {

[[noreturn]] void invalid(const std::string& message) {
  throw Error(ErrorCode::kInvalidArgument, "copy_box: " + message);
}

// Checks one array and the box in it; returns the byte stride of each
// dimension (C order) and, in `base`, the byte offset of the box's first
// element.
std::vector<uint64_t> checked_strides(const char* side, size_t bytes, std::span<const int64_t> shape,
                                      std::span<const int64_t> origin, std::span<const int64_t> extent,
                                      size_t element_size, uint64_t& base) {
  const size_t rank = extent.size();
  if (shape.size() != rank || (!origin.empty() && origin.size() != rank)) {
    invalid(std::string("the ") + side + " array's shape or origin has another rank than the box");
  }
  std::vector<uint64_t> strides(rank);
  uint64_t size = element_size;
  for (size_t d = rank; d-- > 0;) {
    const int64_t start = origin.empty() ? 0 : origin[d];
    if (shape[d] < 0 || extent[d] < 0 || start < 0 || start > shape[d] || extent[d] > shape[d] - start) {
      invalid(std::string("the box reaches outside the ") + side + " array in dimension " + std::to_string(d));
    }
    strides[d] = size;
    if (__builtin_mul_overflow(size, static_cast<uint64_t>(shape[d]), &size)) {
      invalid(std::string("the ") + side + " array's size overflows");
    }
  }
  if (size > bytes) invalid(std::string("the ") + side + " array's bytes are shorter than its shape");
  base = 0;
  for (size_t d = 0; d < rank && !origin.empty(); ++d) base += static_cast<uint64_t>(origin[d]) * strides[d];
  return strides;
}

}  // namespace

void copy_box(const BoxCopy& copy) {
  const std::span<const int64_t> extent = copy.extent;
  const size_t rank = extent.size();
  uint64_t to_base = 0, from_base = 0;
  const std::vector<uint64_t> to_strides =
      checked_strides("target", copy.to.size(), copy.to_shape, copy.to_origin, extent, copy.element_size, to_base);
  const std::vector<uint64_t> from_strides = checked_strides(
      "source", copy.from.size(), copy.from_shape, copy.from_origin, extent, copy.element_size, from_base);
  for (int64_t length : extent) {
    if (length == 0) return;
  }
  if (rank == 0) {
    std::memcpy(copy.to.data(), copy.from.data(), copy.element_size);
    return;
  }
  // Dimensions [outer, rank) are one run: all but the first of them are
  // covered whole in both arrays, so their elements lie back to back there.
  size_t outer = rank - 1;
  while (outer > 0 && extent[outer] == copy.to_shape[outer] && extent[outer] == copy.from_shape[outer]) --outer;
  const uint64_t run = static_cast<uint64_t>(extent[outer]) * to_strides[outer];
  std::vector<int64_t> index(outer, 0);
  uint64_t to_offset = to_base, from_offset = from_base;
  while (true) {
    std::memcpy(copy.to.data() + to_offset, copy.from.data() + from_offset, run);
    // Advance the dimensions before the run like an odometer, last fastest.
    size_t d = outer;
    while (d > 0) {
      --d;
      if (++index[d] < extent[d]) {
        to_offset += to_strides[d];
        from_offset += from_strides[d];
        break;
      }
      index[d] = 0;
      to_offset -= static_cast<uint64_t>(extent[d] - 1) * to_strides[d];
      from_offset -= static_cast<uint64_t>(extent[d] - 1) * from_strides[d];
      if (d == 0) return;
    }
    if (outer == 0) return;
  }
}

}  // namespace ckpt::detail
