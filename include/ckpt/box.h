#pragma once
// Boxes of a tensor: the region of a global tensor that one process holds or
// needs (a shard of a sharded save, a chunk of a torch DCP checkpoint, the
// part of a tensor one rank loads), and tensors assembled from such pieces.
//
// A Box is given in elements of the global tensor: its first element's index
// (offsets) and its extent (sizes), one of each per dimension; a 0-d tensor's
// only box has empty offsets and sizes.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ckpt/error.h"
#include "ckpt/tensor.h"

namespace ckpt {

struct Box {
  std::vector<int64_t> offsets;
  std::vector<int64_t> sizes;

  bool operator==(const Box&) const = default;
};

// The whole of a tensor of `shape`: offsets 0, sizes `shape`.
Box whole_box(const Shape& shape);
// Elements in the box (the product of its sizes; 1 for rank 0).
uint64_t box_numel(const Box& box);
// "[0:4, 2:6]" (start:stop per dimension; "[]" for rank 0), for messages.
std::string box_text(const Box& box);
// Throws Error{kInvalidArgument} (with `context`, its message naming the box
// and the shape) unless `box` has the rank of `shape`, no negative offset or
// size, and lies inside it.
void check_box(const Box& box, const Shape& shape, const ErrorContext& context = {});
// The common part of two boxes of one rank; nullopt when they share no
// element (a box with a size 0 shares none). Throws Error{kInvalidArgument}
// when their ranks differ.
std::optional<Box> intersect(const Box& a, const Box& b);

// Checks that `boxes` tile a tensor of `shape`: each of its rank and inside
// it, no two sharing an element, together covering it (the check of
// pieced_tensor's pieces, for a writer that has boxes and no data yet).
// Throws Error{code} (with `context`, its message naming the first defect's
// boxes).
void check_tiling(const Shape& shape, const std::vector<Box>& boxes, ErrorCode code = ErrorCode::kInvalidArgument,
                  const ErrorContext& context = {});

// One stored piece of a global tensor: the box it holds and its elements
// (shape box.sizes, the global tensor's dtype), typically mapped from a file
// and not yet read.
struct Piece {
  Box box;
  Tensor data;
};

// A tensor of `shape` and `dtype` whose elements lie in `pieces`. Nothing is
// read here: the result is deferred (its bytes assembled on first use, only
// the pieces' own storages read), and read_box() on it reads only the
// pieces a region overlaps. A single piece covering the whole tensor is
// returned as is.
// Throws Error{kCorrupt} (with `context`, its message naming the piece by its
// box) when a piece has another dtype, a shape other than its box's sizes,
// lies outside the tensor, overlaps another, or the pieces leave elements
// uncovered.
Tensor pieced_tensor(DType dtype, const Shape& shape, std::vector<Piece> pieces, const ErrorContext& context = {});

// The pieces of a tensor made by pieced_tensor() (in the order given), or of
// any other tensor the one piece that is all of it.
std::vector<Piece> pieces_of(const Tensor& tensor);

// The elements of `region` of `tensor` as a tensor of shape region.sizes in
// fresh heap memory. Reads only what the region needs: of a pieced tensor,
// the pieces it overlaps; of a mapped tensor, the pages its rows lie in;
// other deferred tensors (a strided view, remote bytes) are produced whole
// first. Throws Error{kInvalidArgument} (check_box) for a region outside the
// tensor, Error{kUnsupported} when its copy needs more memory than the
// machine has.
Tensor read_box(const Tensor& tensor, const Box& region);

}  // namespace ckpt
