#pragma once
// Sharded tensors of the HF layout (issue 20): the check a writer of the
// index makes of the pieces' boxes, before any data is read. (A reader
// assembles the pieces with box.h pieced_tensor, which checks the same of
// boxes with their data.)

#include <vector>

#include "ckpt/box.h"
#include "ckpt/tensor.h"

namespace ckpt::hf_sharded_detail {

// Checks the boxes of the pieces of a tensor of `shape`: each of its rank and
// inside it (box.h check_box), no two sharing an element (intersect),
// together covering it. Throws Error{kInvalidArgument} naming the first
// defect.
void check_piece_layout(const Shape& shape, const std::vector<Box>& boxes);

}  // namespace ckpt::hf_sharded_detail
