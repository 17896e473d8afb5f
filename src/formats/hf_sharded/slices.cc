#include "formats/hf_sharded/slices.h"

#include <string>

#include "ckpt/error.h"

namespace ckpt::hf_sharded_detail {

void check_piece_layout(const Shape& shape, const std::vector<Box>& boxes) {
  const uint64_t total = checked_numel(shape);
  uint64_t covered = 0;
  for (size_t p = 0; p < boxes.size(); ++p) {
    check_box(boxes[p], shape);
    const uint64_t numel = box_numel(boxes[p]);
    if (numel == 0) continue;
    for (size_t q = 0; q < p; ++q) {
      if (intersect(boxes[p], boxes[q])) {
        throw Error(ErrorCode::kInvalidArgument,
                    "the pieces " + box_text(boxes[q]) + " and " + box_text(boxes[p]) + " overlap");
      }
    }
    covered += numel;  // disjoint boxes inside the tensor: never more than total
  }
  if (covered != total) {
    throw Error(ErrorCode::kInvalidArgument, "the pieces cover " + std::to_string(covered) + " of the tensor's " +
                                                 std::to_string(total) + " elements");
  }
}

}  // namespace ckpt::hf_sharded_detail
