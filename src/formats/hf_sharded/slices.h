#pragma once
// Sharded tensors of the HF layout (issue 20): a global tensor assembled from
// pieces stored in shard files. One place between the index's records and
// box.h's pieced tensors.

#include <cstdint>
#include <utility>
#include <vector>

#include "ckpt/dtype.h"
#include "ckpt/tensor.h"

namespace ckpt::hf_sharded_detail {

// One stored piece: the region [offsets, offsets + sizes) of the global
// tensor, and its data (shape == sizes).
struct StoredPiece {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;
  Tensor data;
};

// The global tensor of `dtype` and `shape` made of `pieces`, deferred:
// nothing is read until it is used, and a region of it reads only the pieces
// it overlaps (box.h pieced_tensor, read_box).
// Throws Error{kCorrupt} if a piece lies outside `shape`, two overlap, or
// they do not cover it.
Tensor assemble_pieces(DType dtype, const Shape& shape, std::vector<StoredPiece> pieces);

// Checks the regions (offsets, sizes) of the pieces of a tensor of `shape`
// before any is written: each inside `shape`, no two overlapping, together
// covering it. Throws Error{kCorrupt} naming the first defect.
void check_piece_layout(const Shape& shape,
                        const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>& regions);

}  // namespace ckpt::hf_sharded_detail
