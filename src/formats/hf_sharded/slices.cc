#include "formats/hf_sharded/slices.h"

#include <string>

#include "ckpt/error.h"

namespace ckpt::hf_sharded_detail {
namespace {

std::string region_text(const std::vector<int64_t>& offsets, const std::vector<int64_t>& sizes) {
  std::string text = "[";
  for (size_t i = 0; i < offsets.size(); ++i) {
    if (i > 0) text += ", ";
    text += std::to_string(offsets[i]) + ":" + std::to_string(offsets[i] + sizes[i]);
  }
  return text + "]";
}

}  // namespace

Tensor assemble_pieces(DType dtype, const Shape& shape, std::vector<StoredPiece> pieces) {
  // Until box.h's pieced_tensor lands on main.
  throw Error(ErrorCode::kUnsupported, "sharded tensors (pieces) cannot be read yet");
}

void check_piece_layout(const Shape& shape,
                        const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& regions) {
  const size_t ndim = shape.size();
  uint64_t covered = 0;
  const uint64_t total = checked_numel(shape);
  for (size_t p = 0; p < regions.size(); ++p) {
    const auto& [offsets, sizes] = regions[p];
    if (offsets.size() != ndim || sizes.size() != ndim) {
      throw Error(ErrorCode::kCorrupt, "a piece has another number of dimensions than the tensor");
    }
    for (size_t d = 0; d < ndim; ++d) {
      if (offsets[d] < 0 || sizes[d] < 0 || offsets[d] > shape[d] || sizes[d] > shape[d] - offsets[d]) {
        throw Error(ErrorCode::kCorrupt, "the piece " + region_text(offsets, sizes) + " leaves the tensor's bounds");
      }
    }
    const uint64_t volume = checked_numel(sizes);
    covered += volume;  // <= total per piece; the sum is checked below
    if (volume == 0) continue;
    for (size_t q = 0; q < p; ++q) {
      const auto& [other_offsets, other_sizes] = regions[q];
      bool overlap = true;
      for (size_t d = 0; d < ndim && overlap; ++d) {
        overlap = offsets[d] < other_offsets[d] + other_sizes[d] && other_offsets[d] < offsets[d] + sizes[d];
      }
      if (overlap) {
        throw Error(ErrorCode::kCorrupt, "the pieces " + region_text(other_offsets, other_sizes) + " and " +
                                             region_text(offsets, sizes) + " overlap");
      }
    }
    if (covered > total) throw Error(ErrorCode::kCorrupt, "the pieces hold more elements than the tensor");
  }
  if (covered != total) {
    throw Error(ErrorCode::kCorrupt, "the pieces cover " + std::to_string(covered) + " of the tensor's " +
                                         std::to_string(total) + " elements");
  }
}

}  // namespace ckpt::hf_sharded_detail
